"""Sequence graph -> frame graph: the ATen-level rewrite behind ``mcu_npu.streaming``.

The sequence model is exported (``torch.export``) on a sequence whose length ``T`` is a
marker no other size of the model comes near, so the time axis of every tensor is the axis
whose size lies in the marker's band (``T`` give or take padding). Each node of the
exported graph then becomes its one-frame form:

* ``pad`` / ``constant_pad_nd`` left on the time axis: nothing per frame; the padding values
  become the initial contents of the ring of the convolution it feeds. Right padding marks
  trailing frames that must be cut off (chomped) before the output or a reduction.
* ``conv1d`` / ``convolution`` over time (stride 1, any dilation) whose left context
  (explicit pad + own padding) equals its span ``dilation * (kernel - 1)``: a ``FrameRing``
  of that many frames and the convolution on the window without padding.
* ``slice`` / ``narrow`` on time cutting off right-padding frames (a chomp): nothing per frame.
  ``select`` / ``slice`` of the last frame: the frame itself.
* ``mean`` / ``sum`` / ``amax`` / ``adaptive_avg_pool1d(1)`` over time: a
  ``RunningStatistic`` (cumulative over all frames so far).
* ``gru`` / ``lstm`` / ``rnn_*`` (unidirectional): the same op on one step, reading and
  writing a ``RecurrentState``.
* Pointwise ops, views keeping the time axis apart, ``linear`` / ``batch_norm`` /
  ``layer_norm`` / ``softmax`` / ``cat`` / ``split`` over other axes: unchanged per frame.

Anything else touching the time axis is refused with an ``UnsupportedModelError`` naming
the layer. It is an ATen rewrite so that a chomp spelled ``x[:, :, :-p]``, ``x[..., :-p]``
or ``x.narrow`` and a pad spelled ``F.pad`` or ``nn.ConstantPad1d`` are the same node.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch import fx, nn

from mcu_npu.errors import UnsupportedModelError
from mcu_npu.graph.module_names import layer_name
from mcu_npu.graph.schema import bind

from .state import FrameRing, RecurrentState, RunningStatistic

aten = torch.ops.aten

STATE_ATTR = "stream_state"
"""The submodule of the frame graph module holding every ``StreamState``."""

_SAME = {aten.contiguous.default, aten.clone.default, aten.alias.default,
         aten.detach.default, aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout,
         aten.dropout.default, aten.transpose.int, aten.permute.default,
         aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.t.default,
         aten.flatten.using_ints, aten.view.default, aten.reshape.default,
         aten._unsafe_view.default, aten.expand.default, aten.zeros_like.default,
         aten.ones_like.default}
"""Per-frame ops that only need the time axis to stay an axis of its own."""
_SHAPE_ARG = {aten.view.default, aten.reshape.default, aten._unsafe_view.default,
              aten.expand.default}
_REDUCE = {aten.mean.dim: "mean", aten.mean.default: "mean", aten.sum.dim_IntList: "sum",
           aten.sum.default: "sum", aten.amax.default: "amax",
           aten.adaptive_avg_pool1d.default: "mean"}
_RECURRENT = {aten.gru.input, aten.lstm.input, aten.rnn_tanh.input, aten.rnn_relu.input}
_CONV = {aten.conv1d.default, aten.conv1d.padding, aten.convolution.default}
_PAD = {aten.pad.default, aten.constant_pad_nd.default}
_SPLIT = {aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default,
          aten.unbind.int}
_ALONG_DIM = {aten.softmax.int, aten._softmax.default, aten.log_softmax.int,
              aten._log_softmax.default, aten.glu.default, aten.cat.default} | _SPLIT
_PICK = {aten.slice.Tensor, aten.select.int, aten.narrow.default}
_IGNORED = {aten._assert_tensor_metadata.default, aten._assert_scalar.default}


@dataclass(frozen=True)
class Form:
    """How a time-carrying tensor of the sequence graph lines up with the frames:
    ``lead`` pending left-padding values (outermost first) before frame 1, ``trail`` frames
    after the last one that only right padding produced (to be chomped)."""

    dim: int
    lead: tuple[float, ...] = ()
    trail: int = 0


def marker_length(model: nn.Module, shape: tuple[int, ...], time_dim: int) -> int:
    """A sequence length whose band [T/2, 2T] holds no size of the model's parameters,
    buffers or other input axes, so any axis sized in the band is the time axis."""
    sizes = [s for i, s in enumerate(shape) if i != time_dim]
    for t in list(model.parameters()) + list(model.buffers()):
        sizes.extend(t.shape)
    return max(64, 2 * max(sizes, default=1) + 2)  # T // 2 above every other size


class FrameGraph:
    """Builds the frame graph of one exported sequence graph (``build``)."""

    def __init__(self, gm: fx.GraphModule, values: dict, length: int, time_dim: int):
        self.gm, self.values, self.time_dim = gm, values, time_dim
        self.band = (length // 2, 2 * length)
        self.g = fx.Graph()
        self.env: dict[fx.Node, object] = {}
        self.form: dict[fx.Node, Form] = {}      # time-carrying nodes
        self.parts: dict[fx.Node, list] = {}     # tuple-valued nodes: Form or None per item
        self.dynamic: set[fx.Node] = set()       # nodes computed from the input
        self.recomputed: set[fx.Node] = set()     # frames that use a summary of all frames
        self.states = nn.Module()

    # -- helpers -----------------------------------------------------------------------
    def refuse(self, node: fx.Node, why: str, fix: str = "") -> UnsupportedModelError:
        layer = layer_name(node)
        where = f"layer '{layer}'" if layer else "the model's forward"
        op = getattr(node.target, "__name__", str(node.target))
        return UnsupportedModelError(
            f"cannot turn {where} ({node.name} = {op}) into its stream: {why}."
            + (f" {fix}" if fix else ""))

    def time_axes(self, val) -> list[int]:
        shape = getattr(val, "shape", None)
        if shape is None:
            return []
        lo, hi = self.band
        return [i for i, s in enumerate(shape) if isinstance(s, int) and lo <= s <= hi]

    def time_axis(self, node: fx.Node) -> int | None:
        axes = self.time_axes(node.meta.get("val"))
        if len(axes) > 1:
            raise self.refuse(node, "it makes a tensor with two time axes (frames against "
                                    "frames, as attention over time does)")
        return axes[0] if axes else None

    def frame_shape(self, node: fx.Node) -> tuple[int, ...]:
        shape = list(node.meta["val"].shape)
        shape[self.form[node].dim] = 1
        return tuple(shape)

    def map(self, a):
        return fx.node.map_arg(a, lambda n: self.env[n])

    def emit(self, node: fx.Node, args=None, kwargs=None, target=None):
        new = self.g.call_function(target or node.target,
                                   self.map(node.args if args is None else args),
                                   self.map(node.kwargs if kwargs is None else kwargs))
        new.meta.update({k: v for k, v in node.meta.items() if k in ("nn_module_stack",
                                                                     "stack_trace")})
        return new

    def add_state(self, name: str, state: nn.Module) -> str:
        self.states.add_module(name, state)
        return f"{STATE_ATTR}.{name}"

    def normal_dim(self, dim: int, ndim: int) -> int:
        return dim % ndim if ndim else 0

    # -- the walk ----------------------------------------------------------------------
    def build(self) -> fx.Graph:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.placeholder(node)
            elif node.op == "get_attr":
                self.env[node] = self.g.get_attr(node.target)
            elif node.op == "call_module":
                if not str(node.target).startswith("_guards"):
                    raise self.refuse(node, "an unexpected module call in the exported graph")
            elif node.op == "call_function":
                if node.target in _IGNORED:
                    continue
                if any(a in self.dynamic for a in node.all_input_nodes):
                    self.dynamic.add(node)
                if any(a in self.recomputed for a in node.all_input_nodes):
                    self.recomputed.add(node)
                self.call(node)
            elif node.op == "output":
                self.output(node)
        return self.g

    def placeholder(self, node: fx.Node) -> None:
        if self.env:
            placeholders = [n for n in self.env if n.op == "placeholder"]
            if placeholders:
                raise self.refuse(node, "the model takes more than one input; streaming "
                                        "handles one sequence input")
        dim = self.time_axis(node)
        if dim is None:
            raise self.refuse(node, "the input has no time axis")
        self.env[node] = self.g.placeholder("frame")
        self.form[node] = Form(dim)
        self.dynamic.add(node)

    def output(self, node: fx.Node) -> None:
        outs = []
        for a in node.args[0]:
            f = self.form.get(a) if isinstance(a, fx.Node) else None
            if f is not None and (f.trail or f.lead):
                raise self.refuse(a, f"the output has {f.trail} frame(s) past the last one "
                                     "(right padding not cut off), so it looks ahead",
                                  "Cut the padding off (x[..., :-p]) or pad on the left only.")
            outs.append(self.map(a))
        self.g.output(tuple(outs))

    def call(self, node: fx.Node) -> None:
        t = node.target
        if t is operator.getitem:
            return self.getitem(node)
        timed = [a for a in node.all_input_nodes if a in self.form]
        if not timed:
            if any(self.time_axes(v) for v in _vals(node)):
                raise self.refuse(node, "it builds a tensor as long as the sequence",
                                  "A stream cannot depend on the sequence length.")
            if any(isinstance(v, torch.SymInt) for v in _vals(node)):
                raise self.refuse(node, "it reads the sequence length")
            self.env[node] = self.emit(node)
            return
        if t in _PAD:
            return self.pad(node)
        if t in _CONV:
            return self.conv(node)
        if t in _RECURRENT:
            return self.recurrent(node)
        x = node.args[0]
        if t in _PICK and self.on_time(node, x):
            return self.pick(node)
        if t in _REDUCE and self.reduces_time(node, x):
            return self.reduce(node)
        self.per_frame(node, timed)

    def on_time(self, node: fx.Node, x) -> bool:
        a = bind(node)
        return x in self.form and self.normal_dim(a.dim, x.meta["val"].dim()) == self.form[x].dim

    def reduces_time(self, node: fx.Node, x) -> bool:
        if x not in self.form:
            return False
        if node.target is aten.adaptive_avg_pool1d.default:
            return True
        dims = bind(node).dim
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return True
        ndim = x.meta["val"].dim()
        dims = [dims] if isinstance(dims, int) else dims
        return self.form[x].dim in {self.normal_dim(d, ndim) for d in dims}

    def check_history(self, node: fx.Node, x: fx.Node) -> None:
        """Refuse keeping past frames of ``x`` when they depend on a statistic of all frames
        so far (``x - x.mean(-1, keepdim=True)``): the sequence model recomputes those past
        frames with every new one, a stream cannot."""
        if x in self.recomputed:
            raise self.refuse(node, "it keeps past frames of a tensor that depends on a "
                                    "statistic of the whole sequence so far, which the "
                                    "sequence model recomputes for every new frame",
                              "Use a running statistic only after the last layer that keeps "
                              "frames.")

    # -- per-op rewrites ---------------------------------------------------------------
    def getitem(self, node: fx.Node) -> None:
        src, i = node.args
        if src in self.dynamic:
            self.dynamic.add(node)
        self.env[node] = self.g.call_function(operator.getitem, (self.env[src], i))
        f = self.parts.get(src, [None] * (i + 1))[i] if src in self.parts else None
        if f is not None:
            self.form[node] = f

    def pad(self, node: fx.Node) -> None:
        a = bind(node)
        x = a.self if hasattr(a, "self") else node.args[0]
        f = self.form[x]
        ndim = x.meta["val"].dim()
        pads = list(a.pad)
        k = ndim - 1 - f.dim
        left, right = (pads[2 * k], pads[2 * k + 1]) if 2 * k + 1 < len(pads) else (0, 0)
        mode = getattr(a, "mode", "constant") or "constant"
        value = float(a.value or 0.0)
        if (left or right) and mode != "constant":
            raise self.refuse(node, f"{mode} padding on the time axis reads frames that are "
                                    "not there yet", "Use constant (zero) left padding.")
        if left < 0 or right < 0:
            raise self.refuse(node, "negative padding on the time axis")
        if f.trail and left:
            raise self.refuse(node, "left padding after right padding")
        rest = pads.copy()
        if 2 * k + 1 < len(pads):
            rest[2 * k] = rest[2 * k + 1] = 0
        if any(rest):
            self.env[node] = self.emit(node, args=(x, rest) + tuple(node.args[2:]))
        else:
            self.env[node] = self.env[x]
        dim = self.time_axis(node)
        self.form[node] = Form(dim, (value,) * left + f.lead, f.trail + right)

    def conv(self, node: fx.Node) -> None:
        a = bind(node)
        x, w = a.input, a.weight
        f = self.form[x]
        xv = x.meta["val"]
        if node.target is aten.convolution.default and a.transposed:
            raise self.refuse(node, "a transposed convolution over time upsamples frames")
        if xv.dim() not in (2, 3) or f.dim != xv.dim() - 1:
            raise self.refuse(node, "the convolution is not a Conv1d over the time axis",
                              "Streaming handles Conv1d over (N, C, T) sequences.")
        stride = _one(a.stride)
        if stride != 1:
            raise self.refuse(node, f"stride {stride} over time drops frames",
                              "Use stride 1 (subsample after the stream if needed).")
        k = w.meta["val"].shape[-1]
        d = _one(a.dilation)
        span = d * (k - 1)
        if isinstance(a.padding, str):
            if a.padding == "same" and span:
                raise self.refuse(node, "'same' padding centres the kernel, so each output "
                                        "looks ahead", "Pad on the left by dilation*(kernel-1).")
            own = 0
        else:
            own = _one(a.padding)
        context = len(f.lead) + own
        if span > context:
            raise self.refuse(node, f"the kernel spans {span + 1} frames but only {context} "
                                    f"come before each output, so it looks {span - context} "
                                    "frame(s) ahead (non-causal)",
                              f"Pad {span} frames on the left (F.pad(x, ({span}, 0))) or pad "
                              f"symmetrically by {span} and cut the last {span} off.")
        if span < context:
            raise self.refuse(node, f"it is padded by {context} frames for a kernel spanning "
                                    f"{span + 1}, which delays its output",
                              f"Pad by dilation*(kernel-1) = {span}.")
        frame = self.env[x]
        if span:
            self.check_history(node, x)
            init = torch.tensor((0.0,) * own + f.lead, dtype=xv.dtype)
            shape = self.frame_shape(x)[:-1] + (span,)
            ring = FrameRing(init.expand(shape).clone())
            frame = self.g.call_module(self.add_state(f"ring_{node.name}", ring), (frame,))
        groups = a.groups
        new = self.g.call_function(aten.conv1d.default,
                                   (frame, self.env[w], self.map(a.bias), [1], [0], [d], groups))
        new.meta.update(node.meta)
        self.env[node] = new
        self.form[node] = Form(self.time_axis(node), (), f.trail + own)

    def pick(self, node: fx.Node) -> None:
        a = bind(node)
        x = node.args[0]
        f = self.form[x]
        n = x.meta["val"].shape[f.dim]
        last = n - 1 - f.trail
        if node.target is aten.select.int:
            if a.index % n != last:
                raise self.refuse(node, "it picks a frame other than the last one",
                                  "A stream answers on the latest frame (x[..., -1]).")
            self.env[node] = self.g.call_function(aten.select.int, (self.env[x], f.dim, 0))
            return
        start = 0 if a.start is None else a.start
        if node.target is aten.narrow.default:
            start = start + n if start < 0 else start
            end = start + a.length
        else:
            end = n if a.end is None else a.end
        start = min(max(start + n if start < 0 else start, 0), n)
        end = min(max(end + n if end < 0 else end, 0), n)
        if (getattr(a, "step", 1) or 1) != 1:
            raise self.refuse(node, "a strided slice over time drops frames")
        cut_front, cut_back = start, n - end
        if cut_front <= len(f.lead) and cut_back <= f.trail:
            self.env[node] = self.env[x]   # a chomp: only padding frames go
            self.form[node] = Form(f.dim, f.lead[cut_front:], f.trail - cut_back)
            return
        if end - 1 == last and end - start == 1:
            self.env[node] = self.env[x]   # the last frame, kept as an axis of size 1
            return
        if cut_back > f.trail:
            raise self.refuse(node, f"it cuts off {cut_back - f.trail} real frame(s) at the "
                                    "end, more than the right padding added",
                              "Chomp exactly the right padding.")
        raise self.refuse(node, f"it keeps frames {start}..{end - 1} of the sequence; a "
                                "stream has only the latest frame and the state before it")

    def reduce(self, node: fx.Node) -> None:
        x = node.args[0]
        f = self.form[x]
        if f.lead or f.trail:
            raise self.refuse(node, "it reduces over padding frames",
                              "Cut the padding off before pooling over time.")
        if node.target is aten.adaptive_avg_pool1d.default and list(node.args[1]) != [1]:
            raise self.refuse(node, "adaptive pooling over time to more than one frame")
        self.check_history(node, x)
        kind = _REDUCE[node.target]
        stat = RunningStatistic(kind, self.frame_shape(x), x.meta["val"].dtype)
        run = self.g.call_module(self.add_state(f"{kind}_{node.name}", stat), (self.env[x],))
        self.env[node] = self.emit(node, args=(x,) + tuple(node.args[1:]))
        self.env[node].replace_input_with(self.env[x], run)

    def recurrent(self, node: fx.Node) -> None:
        a = bind(node)
        x = a.input
        f = self.form[x]
        if a.bidirectional:
            raise self.refuse(node, "a bidirectional recurrent layer reads the sequence "
                                    "backwards from its end (non-causal)",
                              "Use bidirectional=False.")
        if f.dim != (1 if a.batch_first else 0) or f.lead or f.trail:
            raise self.refuse(node, "the recurrent layer's time axis is not its input's "
                                    "time axis, or it runs over padding")
        self.check_history(node, x)
        hx = list(a.hx) if isinstance(a.hx, (list, tuple)) else [a.hx]
        if any(h in self.form or h in self.dynamic for h in hx):
            raise self.refuse(node, "its initial state is computed from the input")
        lstm = node.target is aten.lstm.input
        state = RecurrentState(*[self.values[h] for h in hx])
        prefix = self.add_state(f"state_{node.name}", state)
        reads = [self.g.get_attr(f"{prefix}.h")] + ([self.g.get_attr(f"{prefix}.c")] if lstm else [])
        args = list(node.args)
        args[0], args[1] = self.env[x], (reads if lstm else reads[0])
        args[2:] = self.map(args[2:])
        step = self.g.call_function(node.target, tuple(args))
        step.meta.update(node.meta)
        finals = [self.g.call_function(operator.getitem, (step, i)) for i in (1, 2)[:1 + lstm]]
        self.g.call_module(prefix, tuple(finals))
        self.env[node] = step
        self.parts[node] = [Form(f.dim)] + [None] * (1 + lstm)

    def per_frame(self, node: fx.Node, timed: list) -> None:
        forms = {self.form[a] for a in timed}
        if any(f.lead for f in forms):
            raise self.refuse(node, "padding on the time axis feeds it rather than a Conv1d",
                              "Pad right before the convolution that needs it.")
        if len({f.trail for f in forms}) > 1:
            raise self.refuse(node, "it combines tensors that differ in trailing padding")
        if not self.frame_local(node):
            raise self.refuse(node, "it mixes values of different frames (not known to act "
                                    "frame by frame)")
        trail = forms.pop().trail
        if any(a in self.dynamic and a not in self.form for a in node.all_input_nodes):
            self.recomputed.add(node)   # frames combined with a summary of all frames
        args = node.args
        if node.target in _SHAPE_ARG:
            out_dim = self.time_axis(node)
            shape = list(args[1])
            shape[out_dim] = 1
            args = (args[0], shape) + tuple(args[2:])
        self.env[node] = self.emit(node, args=args)
        vals = node.meta.get("val")
        if isinstance(vals, (list, tuple)):
            self.parts[node] = [Form(self.time_axes(v)[0], (), trail) if self.time_axes(v)
                                else None for v in vals]
            return
        dim = self.time_axis(node)
        if dim is None:
            raise self.refuse(node, "it drops the time axis")
        self.form[node] = Form(dim, (), trail)

    def frame_local(self, node: fx.Node) -> bool:
        t = node.target
        x = node.args[0]
        xv = x.meta["val"] if isinstance(x, fx.Node) else None
        if t in _REDUCE or t in _PAD or t in _PICK:
            return True  # over other axes (time handled before)
        if isinstance(t, torch._ops.OpOverload) and torch.Tag.pointwise in t.tags:
            return True
        if t in _SAME or t in _SHAPE_ARG:
            if t in _SHAPE_ARG or t is aten.flatten.using_ints:
                out = node.meta["val"].shape
                d_in, d_out = self.form[x].dim, self.time_axis(node)
                return (d_out is not None and math.prod(xv.shape[:d_in]) ==
                        math.prod(out[:d_out]))
            return t is not aten.dropout.default or not bind(node).train
        if t in _ALONG_DIM:
            a = bind(node)
            dim = getattr(a, "dim", 1 if t is aten.glu.default else 0)
            if t is aten.cat.default:
                x = next(n for n in a.tensors if n in self.form)
                xv = x.meta["val"]
            return self.normal_dim(dim, xv.dim()) != self.form[x].dim
        if t is aten.linear.default:
            return self.form[x].dim != xv.dim() - 1 and x is node.args[0] and \
                node.args[1] not in self.form
        if t in (aten.batch_norm.default, aten._native_batch_norm_legit_no_training.default):
            a = bind(node)
            return not getattr(a, "training", False) and self.form[x].dim != 1
        if t is aten.layer_norm.default:
            return self.form[x].dim < xv.dim() - len(bind(node).normalized_shape)
        return False


def _vals(node: fx.Node) -> list:
    v = node.meta.get("val")
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _one(v) -> int:
    return int(v[0] if isinstance(v, (list, tuple)) else v)
