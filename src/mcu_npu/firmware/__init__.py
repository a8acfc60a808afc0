"""The handoff to the firmware: the ``.pte`` as a C header, the kernels it must link, whether
the board can run it (at compile time, and ``mcu-npu check`` on a file), and output files
written whole or not at all."""
