"""Memory placement: where the program lives (``targets.PLACEMENTS``), asked for or chosen
from the target's memory map, and the program lowered and serialized for it.

``"auto"`` keeps the lowest whole-model latency among the placements whose program fits
every region of the map, compiling only what it must compare:

- the first placement (``sram`` where the target has it: the program beside its buffers in
  the SRAM the NPU reads fastest) is lowered and serialized whole; when the model's
  constants alone are larger than that SRAM it cannot win, and ``flash`` goes first (one
  lowering instead of two for a model too large for SRAM);
- every other one is estimated by compiling the first's NPU partition graphs again with the
  NPU compiler in that placement's memory mode (Vela's cycles, scratch and fast scratch):
  the graphs, the CPU part and the program's size do not depend on it;
- ``dedicated-sram`` is left out when ``sram`` fits: with program and arena off-chip and the
  SRAM a cache, it is never faster than everything in SRAM;
- only a winner other than the first is lowered again (from the same Edge program: lowering
  leaves it as it was, the tests compare the result with a compile asking for the winner),
  and its exact figures decide.

None fitting, the placement with the smallest shortfall is kept, and the memory check then
warns (or raises ``MemoryFitError`` with ``strict``) naming it. The report's ``placement``
says what was chosen, why, and every placement tried with its latency and fit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch

from ..errors import stage
from ..partition.plan import Plan
from ..report import Report
from ..estimate.memory import memory_report
from ..targets import Target
from .int8_io import int8_io
from .lower import lower
from .output_parts import record_split, split_outputs
from .report import op_facts, write_report
from .serialize import serialize
from .state import state_as_buffers


@dataclass
class Lowered:
    """One placement lowered and serialized: the target placed, the Edge program and its
    plan, the report, the device ``.pte`` and its host data, the memory figures."""

    target: Target
    edge: object
    decided: Plan
    report: Report
    buffer: bytes
    host_data: dict[str, bytes]
    memory: dict
    debug: object = None
    """The emitter's debug maps (``serialize.DebugMaps``), for an ETRecord."""

    @property
    def fits(self) -> bool:
        return bool(self.memory.get("summary", {}).get("memory_fits", True))

    @property
    def shortfall(self) -> int:
        return shortfall(self.memory)

    @property
    def latency_us(self) -> float:
        return float(self.report.latency.get("latency_us", float("inf")))

    def row(self) -> dict:
        """The report's line for this placement."""
        out = {"memory": self.target.placement, "compiled": True,
               "fits": self.fits, "regions": {r["name"]: r["need"]
                                              for r in self.memory.get("regions", [])}}
        if "latency_us" in self.report.latency:
            out["latency_us"] = self.report.latency["latency_us"]
        if self.shortfall:
            out["shortfall"] = self.shortfall
        return out


def lower_placed(edge, decided: Plan, target: Target, io, precision, choice) -> Lowered:
    """``edge`` lowered, given int8 I/O, reported and serialized for ``target`` (placed)."""
    facts = op_facts(edge)  # before lowering: the delegates keep only their interfaces
    edge, decided = lower(edge, replace(decided, target=target), target)
    state = state_as_buffers(edge, getattr(io, "state", None))  # before the outputs split
    split = split_outputs(edge)
    edge, io_params = int8_io(edge, io)
    report = write_report(decided, edge, target, io_params, precision, choice, facts)
    report.state = state.as_dicts() if state else []
    record_split(report, split)
    buffer, host_data, debug = serialize(edge)
    with stage("checking the program against the target's memory"):
        memory = memory_report(buffer, target, report)
    return Lowered(target, edge, decided, report, buffer, host_data, memory, debug)


@dataclass
class Estimate:
    """A placement judged from another's lowering: its latency, memory and report row."""

    target: Target
    latency_us: float
    memory: dict
    fits: bool
    shortfall: int

    def row(self) -> dict:
        return {"memory": self.target.placement, "compiled": True, "estimated": True,
                "fits": self.fits, "latency_us": self.latency_us,
                "regions": {r["name"]: r["need"] for r in self.memory.get("regions", [])},
                **({"shortfall": self.shortfall} if self.shortfall else {})}


def estimate(first: Lowered, target: Target) -> Estimate:
    """``first``'s program judged in ``target``'s placement: its vendor partitions compiled
    again by the NPU family's compiler in that placement (Vela's memory mode) for their
    cycles and scratch; the rest as ``first``."""
    from ..device.payload import find_host_graph, is_container, unpack_reference
    from ..npu.families import family
    from ..runtime.pte import Program

    report = copy.deepcopy(first.report)
    program = Program(first.buffer)._pte.program
    payloads = [bytes(program.backend_delegate_data[d.processed.index].data)
                for plan in program.execution_plan for d in plan.delegates]
    scratch_change, compiler = 0, family(target.npu.kind).adapter()()
    for k, payload in enumerate(payloads):
        graph = None if is_container(payload) else find_host_graph(first.host_data, payload)
        if graph is None or target.npu.vela is None or k >= len(report.partitions):
            continue  # the reference payload: the memory mode changes nothing
        artifact = compiler.compile(unpack_reference(graph)[0], target)
        old = report.partitions[k].stats
        scratch_change = max(scratch_change, int(artifact.stats.get("scratch_bytes", 0))
                             - int(old.get("scratch_bytes", 0)))
        report.partitions[k] = replace(report.partitions[k],
                                       stats={**old, **artifact.stats})
    latency = _with_npu_rows(first.report.latency, report)
    memory = memory_report(first.buffer, target, report)
    for r in memory.get("regions", []):  # Vela's arena (NPU scratch) in that mode
        if "ram" in r["holds"] and scratch_change:
            r["need"] += scratch_change
            if "margin" in r:
                r["margin"] -= scratch_change
                r["fits"] = r["margin"] >= 0
    checked = [r for r in memory.get("regions", []) if "fits" in r]
    return Estimate(target, latency, memory, all(r["fits"] for r in checked),
                    shortfall(memory))


def shortfall(memory: dict) -> int:
    """Bytes missing over every region of ``memory`` (a memory report) the program does not
    fit; 0 when it fits."""
    return sum(max(0, -r["margin"]) for r in memory.get("regions", []) if "margin" in r)


def _with_npu_rows(latency: dict, report: Report) -> float:
    """The whole-model latency of ``latency``'s rows with each NPU partition's row timed
    from ``report``'s partition stats (Vela's total cycles at its clock); the CPU rows as
    they are (rounded as the report keeps them)."""
    if "latency_us" not in latency:
        return float("inf")
    total = 0.0
    for row in latency.get("rows", []):
        us = row["us"]
        words = row["node"].split()
        if row["runs_on"] == "npu" and words[:2] == ["npu", "partition"] and len(words) == 3:
            stats = report.partitions[int(words[2])].stats
            if "total_cycles" in stats and stats.get("clock_hz"):
                us = stats["total_cycles"] / stats["clock_hz"] * 1e6
        total += us
    return round(total, 3)


_AUTO_ORDER = ("sram", "flash", "dedicated-sram")
"""The placements ``auto`` compares, in the order it tries (and reports) them."""


def lower_in_memory(edge, decided: Plan, target: Target, memory: str, io, precision,
                    choice) -> Lowered:
    """The program lowered for ``memory`` ("auto" or one of the target's placements), the
    report's ``placement`` filled in."""
    if memory != "auto":
        chosen = lower_placed(edge, decided, target.placed(memory), io, precision, choice)
        chosen.report.placement = {"memory": memory, "asked": memory,
                                   "why": "asked for", "tried": [chosen.row()]}
        return chosen
    order = [p for p in _AUTO_ORDER if p in target.placements]
    if order[:2] == ["sram", "flash"] and _too_large_for(edge, target.placed("sram")):
        order[:2] = ["flash", "sram"]
    with stage(f"placing the program in {order[0]}"):
        first = lower_placed(edge, decided, target.placed(order[0]), io, precision, choice)
    judged: list = [first]
    rows = [first.row()]
    for placement in order[1:]:
        if placement == "dedicated-sram" and any(
                j.target.placement == "sram" and j.fits for j in judged):
            rows.append({"memory": placement, "compiled": False,
                         "why": "not compiled: sram fits, and a program all in SRAM is "
                                "never slower than one cached from off-chip memory"})
            continue
        with stage(f"estimating the program in {placement}"):
            judged.append(estimate(first, target.placed(placement)))
        rows.append(judged[-1].row())
    fitting = [j for j in judged if j.fits]
    best = min(fitting, key=lambda j: j.latency_us) if fitting else \
        min(judged, key=lambda j: j.shortfall)
    chosen = first
    if best is not first:
        with stage(f"placing the program in {best.target.placement}"):
            again = lower_placed(edge, decided, best.target, io, precision, choice)
        rows = [again.row() if row.get("memory") == best.target.placement else row
                for row in rows]
        if again.fits or not first.fits:
            chosen = again
    if fitting:
        why = "the lowest latency that fits" if len(fitting) > 1 else (
            "the only placement that fits" if len(judged) > 1
            else "the only placement compared")
    else:
        why = "nothing fits: the smallest shortfall"
    rows.sort(key=lambda row: _AUTO_ORDER.index(row["memory"]))
    chosen.report.placement = {"memory": chosen.target.placement, "asked": "auto",
                               "why": why, "tried": rows}
    return chosen


def _too_large_for(edge, target: Target) -> bool:
    """The constants of Edge program ``edge`` alone exceed the region ``target`` keeps the
    program in (False where that region's size is the board's choice)."""
    region = target.region_for("program")
    return region is not None and region.size_bytes is not None \
        and _constant_bytes(edge) > region.size_bytes


def _constant_bytes(edge) -> int:
    """Bytes of the constants (weights, biases, quantization tables) of the Edge program
    ``edge``: what any placement must store, before the NPU compiler packs its share."""
    ep = edge.exported_program()
    tensors = [*ep.state_dict.values(), *ep.constants.values()]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
