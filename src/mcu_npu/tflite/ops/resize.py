"""Resizing: upsample_bilinear2d and upsample_nearest2d / _upsample_nearest_exact2d
(``F.interpolate``) as TFLite RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR on NHWC tensors.

# aten::upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners,
#     float[]? scale_factors) -> Tensor
# aten::upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors)
Source coordinates (``in``, ``out``: input and output sizes of an axis)::

    PyTorch bilinear, align_corners=True   src = dst * (in - 1) / (out - 1)
                                           TFLite align_corners=True
    PyTorch bilinear, align_corners=False  src = (dst + 0.5) * in / out - 0.5, clamped at 0
                                           TFLite half_pixel_centers=True
    PyTorch nearest                        src = floor(dst * in / out)
                                           TFLite (neither flag)
    PyTorch nearest-exact                  src = floor((dst + 0.5) * in / out)
                                           TFLite half_pixel_centers=True

PyTorch scales by ``1 / scale_factor`` where one is given, TFLite always by ``in / out``: a
scale factor that does not give the output size exactly is refused. The int8 kernels
interpolate the integers themselves, so input and output share their quantization (the
annotation ``"shared"``); the bilinear weights are fixed point with 10 fractional bits, within
one step of the float interpolation. Kept whole through core-ATen decomposition, which would
otherwise turn them into gathers and arithmetic.
"""

from __future__ import annotations

from fractions import Fraction

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from .. import layout
from ..args import bind, shape_of
from ..context import OP, Context
from ..ops_aliases import aten, at
from ..registry import operator
from ._checks import static_shapes

NHWC = layout.channels_last(4)
FACTORS = (1, 2, 4, 8)
"""Upscaling factors Vela (``constraint_resize``) and Neutron take per axis."""

BILINEAR = (aten.upsample_bilinear2d.vec, aten.upsample_bilinear2d.default)
NEAREST = (aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default)
NEAREST_EXACT = (aten._upsample_nearest_exact2d.vec, aten._upsample_nearest_exact2d.default)
ATEN_BILINEAR = (at.upsample_bilinear2d.vec, at.upsample_bilinear2d.default)
ATEN_RESIZES = (*ATEN_BILINEAR, at.upsample_nearest2d.vec, at.upsample_nearest2d.default,
                at._upsample_nearest_exact2d.vec, at._upsample_nearest_exact2d.default)
"""The same ops in an ATen graph (the checks read both; ``ConvertResizeToLinear``)."""


def _sizes(node: Node) -> tuple[tuple[int, int], tuple[int, int]]:
    """((in_h, in_w), (out_h, out_w))."""
    return (tuple(int(d) for d in node.args[0].meta["val"].shape[-2:]),
            tuple(int(d) for d in shape_of(node)[-2:]))


def _bilinear(node: Node) -> bool:
    return node.target in BILINEAR or node.target in ATEN_BILINEAR


def _align_corners(node: Node) -> bool:
    return _bilinear(node) and bool(bind(node).align_corners)


def _scale_factors(node: Node):
    a = bind(node)
    if getattr(a, "scale_factors", None):
        return tuple(a.scale_factors)
    if getattr(a, "scales_h", None) is not None:
        return a.scales_h, a.scales_w
    return None


def _factors(node: Node) -> tuple[Fraction, Fraction]:
    """Upscaling factor per axis: out / in, or (out - 1) / (in - 1) with align_corners."""
    (ih, iw), (oh, ow) = _sizes(node)
    if _align_corners(node):
        return tuple(Fraction(o - 1, i - 1) if i > 1 else Fraction(1) for i, o in ((ih, oh),
                                                                                  (iw, ow)))
    return Fraction(oh, ih), Fraction(ow, iw)


def four_dims(node: Node, target=None) -> bool:
    """resize input must be (N, C, H, W)"""
    return len(node.args[0].meta["val"].shape) == 4


def scale_gives_output_size(node: Node, target=None) -> bool:
    """a scale_factor must give the output size exactly (TFLite scales coordinates by input
    over output size, PyTorch by 1 / scale_factor)"""
    scales = _scale_factors(node)
    if scales is None or _align_corners(node):
        return True
    (ih, iw), (oh, ow) = _sizes(node)
    return all(Fraction(s) * i == o for s, i, o in zip(scales, (ih, iw), (oh, ow)))


def npu_upscale_factors(node: Node, target=None) -> bool:
    """resize must upscale height and width each by 1, 2, 4 or 8 (output size over input
    size; output size - 1 over input size - 1 with align_corners), as Vela and Neutron
    require; with align_corners the input must be at least 2 x 2 on Neutron"""
    if target is None:
        return True
    (ih, iw), _ = _sizes(node)
    limits = target.npu.limits
    if _align_corners(node) and limits is not None and \
            min(ih, iw) < limits.min_align_corners_input:
        return False
    return all(f in FACTORS for f in _factors(node))


def vela_resize_limits(node: Node, target=None) -> bool:
    """on Ethos-U, resize must have a batch of one and scale height and width by the same
    factor unless the output is one row or column, and bilinear resize without align_corners
    (TFLite half_pixel_centers) only by 2 (Vela's limits)"""
    if target is None or target.npu.vela is None:
        return True
    if node.args[0].meta["val"].shape[0] != 1:
        return False
    (ih, iw), (oh, ow) = _sizes(node)
    if (ih, iw) == (1, 1) or (ih, iw) == (oh, ow):
        return True
    fh, fw = _factors(node)
    if oh != 1 and ow != 1 and fh != fw:
        return False
    if _bilinear(node) and not _align_corners(node):
        return (oh, ow) == (2 * ih, 2 * iw)
    return True


RESIZE_CHECKS = (static_shapes, four_dims, scale_gives_output_size, npu_upscale_factors,
                 vela_resize_limits)


def npu_resizes(node: Node, target=None) -> bool:
    """Whether the resize ``node`` (Edge or ATen) passes every check of this converter."""
    return all(check(node, target) for check in RESIZE_CHECKS)


@operator(*BILINEAR, *NEAREST, *NEAREST_EXACT,
          aten=(at.upsample_bilinear2d, at.upsample_nearest2d, at._upsample_nearest_exact2d),
          annotate="shared",
          checks=RESIZE_CHECKS,
          preserve=ATEN_RESIZES)
def convert_resize(ctx: Context, node: Node) -> None:
    x = ctx.value(node.args[0])
    out = ctx.output_value(node, perm=NHWC)
    size = ctx.int32(list(shape_of(node)[-2:]))
    if node.target in BILINEAR:
        code, opts = OP.RESIZE_BILINEAR, schema.ResizeBilinearOptionsT()
        opts.alignCorners = _align_corners(node)
        opts.halfPixelCenters = not opts.alignCorners
    else:
        code, opts = OP.RESIZE_NEAREST_NEIGHBOR, schema.ResizeNearestNeighborOptionsT()
        opts.alignCorners = False
        opts.halfPixelCenters = node.target in NEAREST_EXACT
    ctx.op(code, [ctx.tensor(x, NHWC), size], [out.tensor], opts)
