"""Program state: the tensors a stateful model keeps between calls.

A model that keeps state in a registered buffer it updates in place (``self.h.copy_(h)``,
a ring of past frames ``self.ring.copy_(window[..., 1:])``) is compiled as a function of
its inputs and its state (``passes.aten.LiftState``): each buffer becomes an input read
and an output written, quantized with one scale and zero point for both, so the int8 value
written back is the one read on the next call (nothing requantized round the loop). The
lowered program then makes each pair a mutable buffer again (``passes.edge.StateAsBuffers``):
planned memory the device runtime keeps between ``execute`` calls, initialised from the
program. This value carries which buffers they are from export to the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch


@dataclass(frozen=True)
class StateTensor:
    """One state buffer: its name in the model, its initial value (float, as the model
    registered it), and once quantized its int8 encoding (``scale``, ``zero_point``)."""

    name: str
    initial: torch.Tensor = field(repr=False, compare=False)
    scale: float | None = None
    zero_point: int | None = None
    dtype: str = "float32"
    """The element type the program keeps it in: ``int8`` when quantized, else float."""

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.initial.shape)

    @property
    def nbytes(self) -> int:
        return self.initial.numel() * getattr(torch, self.dtype).itemsize

    def encoded_initial(self) -> torch.Tensor:
        """The initial value as the program stores it (int8 in its encoding, or float)."""
        if self.dtype != "int8":
            return self.initial.detach().clone().float()
        q = torch.round(self.initial.double() / self.scale) + self.zero_point
        return q.clamp(-128, 127).to(torch.int8)

    def as_dict(self) -> dict:
        out = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
               "bytes": self.nbytes}
        if self.scale is not None:
            out.update(scale=self.scale, zero_point=self.zero_point)
        return out


@dataclass(frozen=True)
class ProgramState:
    """The state of a model: its buffers in the order the lifted graph takes them, after
    ``user_inputs`` inputs and ``user_outputs`` outputs."""

    tensors: tuple[StateTensor, ...] = ()
    user_inputs: int = 0
    user_outputs: int = 0

    def __bool__(self) -> bool:
        return bool(self.tensors)

    @property
    def initial(self) -> tuple[torch.Tensor, ...]:
        return tuple(t.initial.detach().clone() for t in self.tensors)

    def with_tensor(self, index: int, **changes) -> "ProgramState":
        tensors = list(self.tensors)
        tensors[index] = replace(tensors[index], **changes)
        return replace(self, tensors=tuple(tensors))

    def stream(self, step, samples) -> list[tuple]:
        """``samples`` (tuples of one call's inputs, in stream order) with the state each call
        reads appended, the state carried by ``step`` (the lifted graph: inputs and state ->
        outputs and the new state) from the initial value."""
        state, out = self.initial, []
        with torch.no_grad():
            for sample in samples:
                out.append((*sample, *state))
                result = step(*sample, *state)
                state = tuple(t.detach() for t in _flat(result)[self.user_outputs:])
        return out

    def stepper(self, step):
        """A callable taking one call's inputs and returning its user outputs, carrying
        the state between calls as ``step`` (inputs and state -> outputs and new state)
        computes it, from the initial value."""
        holder = [self.initial]

        def call(*inputs):
            outputs = _flat(step(*inputs, *holder[0]))
            holder[0] = tuple(t.detach() for t in outputs[self.user_outputs:])
            return outputs[:self.user_outputs]
        return call

    def as_dicts(self) -> list[dict]:
        return [t.as_dict() for t in self.tensors]


def leaves(value):
    """The items of a (nested) list or tuple of outputs, in order; a single value alone."""
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def _flat(result) -> list:
    return list(leaves(result))
