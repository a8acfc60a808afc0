"""The boundary with ExecuTorch, torch and torchao internals: every private name mcu-npu reads
and private attribute it sets (``private``), the patches that change upstream behaviour
(``patches``) and the upstream notices dropped (``noise``). It imports nothing else of mcu-npu,
so every package may reach upstream internals through it; each module follows a given
release, so an upgrade of torch or ExecuTorch re-checks them
(``tests/test_upstream_private.py``, ``tests/test_upstream_patches.py``)."""
