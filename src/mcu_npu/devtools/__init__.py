"""ExecuTorch's debugging tools on this project's programs: the delegates' debug-handle maps
(``debug_handles``), the ETRecord of a compile (``etrecord``), an ETDump of a host run
(``etdump``) and bundled programs that carry test inputs and expected outputs to a board
(``bundled``). Nothing here adds bytes to the device program."""
