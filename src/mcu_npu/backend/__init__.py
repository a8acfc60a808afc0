"""The ExecuTorch backends: the NPU delegates' ``preprocess`` with their typed compile spec,
and the Cortex-M lowering of what no delegate takes."""
