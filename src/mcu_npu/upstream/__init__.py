"""Where mcu-npu does an upstream step its own way or reaches past a public API: ExecuTorch's
``to_edge`` passes and torch's one-node decompositions done in place, and the patches
(``patches``). Each module follows upstream internals of a given release, so an upgrade of
torch or ExecuTorch re-checks them (``tests/test_upstream_patches.py``,
``test_edge_dialect.py``, ``test_decompose_in_place.py``)."""
