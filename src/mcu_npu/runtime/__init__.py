"""Host execution: LiteRT-backed NPU emulation (and, with the backend, .pte programs)."""
