"""ExecuTorch's debugging tools on this project's programs: the ETRecord of a compile
(``etrecord``), an ETDump of a host run (``etdump``) and bundled programs that carry test
inputs and expected outputs to a board (``bundled``). The delegates' debug-handle maps they
rely on are built by the backend (``backend.debug_handles``), from the NPU operators both
sides name alike (``device.npu_ops``). Nothing here adds bytes to the device program."""
