"""Graph passes that prepare exported models for the NPU targets."""

from mcu_npu.passes.aten import (
    DecomposeGRU,
    DecomposeLSTM,
    DecomposeRNN,
    ProjSizeNotSupportedError,
    SplitGRUByLayers,
)

__all__ = ["DecomposeGRU", "DecomposeLSTM", "DecomposeRNN", "ProjSizeNotSupportedError", "SplitGRUByLayers"]
