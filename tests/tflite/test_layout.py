"""Layout helpers: which transposes are a swap of two blocks of axes."""

import pytest

from mcu_npu.tflite.layout import block_swap


@pytest.mark.parametrize("shape, perm, blocks", [
    ((1, 3, 32, 32), (0, 2, 3, 1), (1, 3, 1024)),  # NCHW -> NHWC
    ((2, 8, 5, 4), (0, 3, 1, 2), (2, 40, 4)),  # NHWC -> NCHW
    ((6, 20), (1, 0), (1, 6, 20)),
    ((2, 3, 4), (1, 2, 0), (1, 2, 12)),
])
def test_block_swaps(shape, perm, blocks):
    assert block_swap(shape, perm) == blocks


@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (0, 2, 1, 3), (0, 3, 2, 1)])
def test_other_permutations_are_not_block_swaps(perm):
    assert block_swap((1, 3, 4, 5), perm) is None
