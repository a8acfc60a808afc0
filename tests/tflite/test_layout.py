"""Layout helpers: which transposes are a swap of two blocks of axes, which reshapes keep
the memory order of their input."""

import pytest

from mcu_npu.tflite.layout import block_swap, reshape_layout


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


@pytest.mark.parametrize("in_shape, perm, out_shape, out_perm", [
    ((1, 6, 5, 5), (0, 2, 3, 1), (1, 2, 3, 25), (0, 3, 1, 2)),  # NHWC as (N, HW, G, C / G)
    ((1, 2, 3, 25), (0, 3, 1, 2), (1, 6, 5, 5), (0, 2, 3, 1)),  # and back
    ((2, 8, 4, 3), (0, 2, 3, 1), (2, 8, 12), (0, 2, 1)),  # flatten(2) of NHWC: (N, HW, C)
    ((3, 1, 7), (0, 1, 2), (3, 7), (0, 1)),  # squeeze
])
def test_reshapes_that_keep_the_memory_order_need_no_transpose(in_shape, perm, out_shape,
                                                               out_perm):
    assert reshape_layout(in_shape, perm, out_shape) == out_perm


def test_reshape_across_the_memory_order_has_no_layout():
    """(N, C, H, W) flattened in PyTorch's order reads channels first: a transpose of NHWC."""
    assert reshape_layout((1, 6, 5, 5), (0, 2, 3, 1), (1, 150)) is None
