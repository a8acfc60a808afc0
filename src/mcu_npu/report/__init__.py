"""The compile report: where every compute op runs and why, the partitions, what the NPU
compiler says about them, and how accurate the result is.

It travels in the program's companion file (``firmware.companion``), beside the device
``.pte``; from the ``.pte`` alone, ``mcu-npu report`` prints the device-only report
(``device_only``): target, partitions, kernels, memory and versions, read from the program.

A program compiled with ``io="int8"`` takes and returns int8 tensors; ``io`` then lists each
program input and output (name, shape, dtype, scale, zero point, quant_min, quant_max) so the
firmware can quantize its data (``q = round(x / scale) + zero_point``, clamped to
``[quant_min, quant_max]``) and dequantize the results (``x = scale * (q - zero_point)``). For a
float-I/O program ``io`` is empty (and absent from ``summary``).

Deployment: ``host_only`` is True when an NPU payload is the reference compiler's (the host
emulator runs it, a device runtime refuses it), and the text's first line says so;
``versions`` records what a firmware build must match (ExecuTorch, the ``.pte`` schema
identifier, the NPU compilers' versions, the device runtime's payload format); ``kernels``
lists every operator and delegate the program calls with the library providing it
(``mcu_npu.firmware.kernels_list``), and ``kernel_problems`` each one the target does not provide.
``kernels`` and ``kernel_problems`` are read from the serialized program, so the copy stored
in the companion lacks them and ``load()`` fills them in from the program.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum

from ..errors import ConfigError
from ..graph.macs import node_macs  # noqa: F401  (re-exported: its home is mcu_npu.graph.macs)

STAT_KEYS = ("npu_cycles", "npu_total_cycles", "npu_sram_bytes", "npu_flash_bytes", "macs")
# summary key -> the partition stat it sums, where the two differ: Vela's total cycles
# (memory-bound layers included) beside its compute-only npu_cycles
_STAT_SOURCES = {"npu_total_cycles": "total_cycles"}
LATENCY_KEYS = ("latency_us", "npu_us", "cpu_us")
HOST_ONLY_LINE = ("HOST ONLY: the NPU payloads are the reference compiler's; the host runs "
                  "this program, a device runtime refuses it")
IO_MODES = ("float", "int8")  # compile(io=...): program inputs/outputs float, or the NPU's int8


def check_io(io) -> str:
    """``io`` if it names a program I/O mode, else ConfigError listing the valid ones (here,
    not in ``api``, so the CLI checks ``--io`` without loading the compiler)."""
    if not isinstance(io, str) or io not in IO_MODES:
        raise ConfigError(f"unknown io {io!r}; choose one of: {', '.join(IO_MODES)}")
    return io


class Kernel(str, Enum):
    """What runs a compute op (``OpPlacement.kernel``); the value is what the report's JSON
    holds."""

    NPU = "npu"
    CORTEX_M = "cortex-m"
    """One of ExecuTorch's Cortex-M int8 (CMSIS-NN) kernels, or fused into one."""
    PORTABLE = "portable"
    """One of ExecuTorch's portable kernels (on float or int8 data)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class OpPlacement:
    """One compute op: where it runs (``NPU partition k``, ``Cortex-M int8 kernel`` or
    ``portable float kernel``), by what ``kernel`` and, if not on the NPU, why."""

    node: str
    op: str
    placement: str
    kernel: Kernel  # a Kernel's value is accepted too (a report read back from JSON)
    reason: str = ""
    macs: int = 0
    inputs: tuple[str, ...] = ()
    """The compute ops feeding this one (the placement graph's edges)."""
    ident: str | None = None
    """The ATen node id (``graph.ids.node_id``) the op came from: it links the op to the
    float model's and the quantized reference's nodes (per-layer error)."""
    precision: str = ""
    """The integer type of the op's output activations, "int8" or "int16" ("" when float)."""
    layer: str = ""
    """The model's name of the module the op was called in (``features.3.conv.0``, from
    ``nn_module_stack``); "" for an op of the model's own ``forward``."""
    input_shapes: tuple = ()
    """The shapes of the activations the op reads (weights and constants left out)."""
    output_shape: tuple = ()
    calibration: str = ""
    """The calibration method that set the range of the op's output activation
    (``quantization.calibration``; "fixed" for the kernels' fixed parameters, "" when the
    op has no range of its own: float, or sharing its input's)."""

    def __post_init__(self):
        object.__setattr__(self, "kernel", Kernel(self.kernel))  # ValueError when unknown
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "input_shapes", tuple(tuple(s) for s in self.input_shapes))
        object.__setattr__(self, "output_shape", tuple(self.output_shape))


@dataclass(frozen=True)
class PartitionInfo:
    index: int
    ops: list[str]
    compiler: str
    tflite_ops: list[str]
    stats: dict = field(default_factory=dict)


@dataclass
class Report:
    target: str
    npu_compiler: str
    ops: list[OpPlacement]
    partitions: list[PartitionInfo]
    accuracy: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    io: dict = field(default_factory=dict)  # {"mode": "int8", "inputs": [...], "outputs": [...]}
    host_only: bool = False
    versions: dict = field(default_factory=dict)
    kernels: list[dict] = field(default_factory=list)  # [{"op", "library", "available"}]
    kernel_problems: list[str] = field(default_factory=list)
    memory: dict = field(default_factory=dict)
    """Flash and RAM the program needs against the target's memory regions
    (``estimate.memory.memory_report``); read from the serialized program like ``kernels``."""
    layers: list[dict] = field(default_factory=list)
    """Per-layer error (``estimate.layers.layer_errors``): one row per compute op, the op where
    accuracy is lost first; empty unless accuracy samples were given."""
    precision: dict = field(default_factory=dict)
    """The activation precision asked for (``request``: default and overrides, or "auto")
    and why any op asked to be int16 stays int8 (``kept_int8``: node id -> reason); with
    "auto", ``auto`` records the search (the int8 baseline, each layer raised and what it
    cost, the outcome)."""
    latency: dict = field(default_factory=dict)
    """Whole-model latency estimate (``estimate.latency.estimate_latency``): ``latency_us``, ``npu_us``,
    ``cpu_us`` and one row per executed step."""
    placement: dict = field(default_factory=dict)
    """Where the program lives (``flow.memory``): ``memory`` the placement, ``asked``
    ("auto" or the placement asked for), ``why`` it was chosen and ``tried``: each
    placement considered, with its latency, its need per region and whether it fits."""
    program_io: dict = field(default_factory=dict)
    """The program's inputs and outputs as the firmware sees them, whatever ``io``:
    ``{"inputs": [{"name", "shape", "dtype"}], "outputs": [...]}``."""
    calibration: dict = field(default_factory=dict)
    """How the activation ranges were calibrated (``report.calibration``): the method asked
    for, the tensors each method set, and per tensor the measured quantization error of its
    range and of MinMax's."""
    state: list[dict] = field(default_factory=list)
    """The tensors the program keeps between calls (a model's buffers written in place):
    per tensor its name, shape, dtype, bytes and int8 encoding; where they live is in
    ``memory["state"]``."""
    stream: dict = field(default_factory=dict)
    """A stream's cost (``estimate.stream.stream_budget``): per-call time, state bytes and,
    with ``compile(..., frame_period_ms=)``, the real-time margin at that frame period."""
    device_only: bool = False
    """Read from the device program alone (its companion file absent): no per-op placement,
    accuracy, latency or per-layer error, only what the program holds."""

    @property
    def summary(self) -> dict:
        on_npu = [o for o in self.ops if o.kernel is Kernel.NPU]
        total = len(self.ops)
        s = {
            "target": self.target,
            "npu_compiler": self.npu_compiler,
            "ops_total": total,
            "ops_on_npu": len(on_npu),
            "ops_on_cpu": total - len(on_npu),
            "ops_on_cortex_m": sum(o.kernel is Kernel.CORTEX_M for o in self.ops),
            "partitions": len(self.partitions),
            "npu_ops_fraction": round(len(on_npu) / total, 4) if total else 0.0,
            "macs": sum(o.macs for o in self.ops),
            "npu_macs": sum(o.macs for o in on_npu),
        }
        for key in STAT_KEYS[:-1]:
            stat = _STAT_SOURCES.get(key, key)
            values = [p.stats[stat] for p in self.partitions if stat in p.stats]
            if values and len(values) == len(self.partitions):
                s[key] = sum(values)
        if self.precision or any(o.precision == "int16" for o in self.ops):
            s["int16_ops"] = sum(o.precision == "int16" for o in self.ops)
        s.update({k: self.latency[k] for k in LATENCY_KEYS if k in self.latency})
        s.update(self.memory.get("summary", {}))
        if self.placement.get("memory"):
            s["memory_placement"] = self.placement["memory"]
        s.update(self.accuracy)
        if self.host_only:
            s["host_only"] = True
        if self.io:
            s["io"] = self.io
        if self.state:
            s["state_tensors"] = len(self.state)
            s["state_bytes"] = sum(t["bytes"] for t in self.state)
        if "frame_period_ms" in self.stream:
            s.update(frame_period_ms=self.stream["frame_period_ms"],
                     realtime_margin_us=self.stream["margin_us"],
                     realtime_load=self.stream["load"], real_time=self.stream["real_time"])
        if self.calibration:
            from .calibration import calibration_summary

            s["calibration"] = calibration_summary(self.calibration)
        return s

    # serialization ---------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "target": self.target, "npu_compiler": self.npu_compiler,
            "ops": [asdict(o) for o in self.ops],
            "partitions": [asdict(p) for p in self.partitions],
            "accuracy": self.accuracy, "notes": self.notes, "io": self.io,
            "host_only": self.host_only, "versions": self.versions, "kernels": self.kernels,
            "kernel_problems": self.kernel_problems,
            "memory": self.memory, "latency": self.latency, "layers": self.layers,
            "precision": self.precision, "placement": self.placement,
            "program_io": self.program_io, "calibration": self.calibration,
            "state": self.state, "stream": self.stream, "summary": self.summary,
            **({"device_only": True} if self.device_only else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Report":
        d = json.loads(text)
        return cls(
            target=d["target"], npu_compiler=d["npu_compiler"],
            ops=[OpPlacement(**o) for o in d["ops"]],
            partitions=[PartitionInfo(**p) for p in d["partitions"]],
            accuracy=d.get("accuracy", {}), notes=d.get("notes", []), io=d.get("io") or {},
            host_only=bool(d.get("host_only", False)), versions=d.get("versions") or {},
            kernels=d.get("kernels") or [], kernel_problems=d.get("kernel_problems") or [],
            memory=d.get("memory") or {}, latency=d.get("latency") or {},
            layers=d.get("layers") or [], precision=d.get("precision") or {},
            placement=d.get("placement") or {}, program_io=d.get("program_io") or {},
            calibration=d.get("calibration") or {}, state=d.get("state") or [],
            stream=d.get("stream") or {},
            device_only=bool(d.get("device_only", False)),
        )

    def to_html(self) -> str:
        """The report as one self-contained HTML page (``report.html``)."""
        from .html import render_html

        return render_html(self)

    # text ------------------------------------------------------------------------------
    def __str__(self) -> str:
        s = self.summary
        lines = self.host_only_lines()
        if self.device_only:
            return "\n".join(line.rstrip() for line in lines + self._device_only_lines())
        lines += [
            f"target {s['target']}   NPU compiler {s['npu_compiler']}",
            f"{s['ops_on_npu']}/{s['ops_total']} compute ops on the NPU "
            f"({100 * s['npu_ops_fraction']:.1f}%) in {s['partitions']} partition(s); "
            f"{s['ops_on_cpu']} on the CPU ({s['ops_on_cortex_m']} as Cortex-M int8 kernels)",
        ]
        if s["macs"]:
            lines.append(f"MACs {s['macs']:,} ({s['npu_macs']:,} on the NPU)")
        from .labels import label

        for key in STAT_KEYS[:-1]:
            if key in s:
                lines.append(f"{label(key)} {s[key]:,}{' B' if key.endswith('bytes') else ''}")
        lines += self._latency_lines()
        from .text import stream_lines

        lines += stream_lines(self.stream)
        for key, value in self.accuracy.items():
            lines.append(f"{label(key)} {value:.2f}" if isinstance(value, float)
                         else f"{label(key)} {value}")
        from .advice import accuracy_warning, latency_advice
        from .labels import op_shapes, op_times

        warning = accuracy_warning(self.accuracy)
        lines += [f"WARNING: {warning}"] if warning else []
        lines += [f"what to do: {line}" for line in latency_advice(self)]
        lines += self._precision_lines()
        from .calibration import calibration_lines

        lines += calibration_lines(self.calibration)
        mixed = "int16_ops" in s
        times = op_times(self)
        rows = [("layer", "node", "op", "runs on", *(("bits",) if mixed else ()),
                 "shapes (in -> out)", "est. us", "why not on the NPU")]
        rows += [(o.layer or "(forward)", o.node, o.op, o.placement,
                  *((o.precision,) if mixed else ()), op_shapes(o).replace("\u2192", "->"),
                  f"{times[o.node][0]:,.2f}" if o.node in times else "", o.reason)
                 for o in self.ops]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines.append("")
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1])
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {p}" for p in self.kernel_problems]
        lines += self._io_lines()
        lines += self._state_lines()
        if self.layers:
            from .text import layer_lines

            lines += ["", "per-layer error (largest loss first; dB against the float model)"]
            lines += ["  " + line for line in layer_lines(self.layers)]
        from .text import memory_lines, placement_lines

        lines += memory_lines(self.memory) + placement_lines(self.placement)
        lines += self._kernel_lines()
        lines += self.version_lines()
        return "\n".join(line.rstrip() for line in lines)

    def _device_only_lines(self) -> list[str]:
        """The text of a report read from the device program alone."""
        from .text import memory_lines

        lines = [f"target {self.target}   NPU compiler {self.npu_compiler}",
                 f"{len(self.partitions)} NPU partition(s); read from the device program "
                 f"alone: placement, accuracy, latency and per-layer error are in its "
                 f"companion file (.ptd)"]
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {p}" for p in self.kernel_problems]
        if self.placement.get("memory"):
            lines.append(f"placement: {self.placement['memory']}")
        return lines + memory_lines(self.memory) + self._kernel_lines() + self.version_lines()

    def host_only_lines(self) -> list[str]:
        """The line a report starts with when its NPU payloads run on the host only."""
        return [HOST_ONLY_LINE] if self.host_only else []

    def _precision_lines(self) -> list[str]:
        """What was asked, how many ops run int16, which stay int8 and why, and the search
        of ``precision="auto"``."""
        p = self.precision
        if not p and "int16_ops" not in self.summary:
            return []
        request = p.get("request", {})
        asked = request if isinstance(request, str) else (
            f"default {request.get('default', 'int8')}" + "".join(
                f", {name} {bits}" for name, bits in request.get("overrides", {}).items()))
        lines = [f"precision {asked}: {self.summary['int16_ops']} op(s) with int16 "
                 f"activations"]
        kept = p.get("kept_int8", {})
        by_reason: dict[str, list[str]] = {}
        for node, reason in kept.items():
            by_reason.setdefault(reason, []).append(node)
        for reason, nodes in by_reason.items():
            shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4
                                            else "")
            lines.append(f"  stays int8: {shown}: {reason}")
        from .precision_lines import auto_lines

        return lines + auto_lines(p.get("auto"))

    def _latency_lines(self) -> list[str]:
        """Total latency, its NPU and CPU parts, and the five slowest steps."""
        lat = self.latency
        if "latency_us" not in lat:
            return []
        bound = "; NPU part a lower bound" if lat.get("npu_is_bound") else ""
        lines = [f"latency {lat['latency_us']:,.1f} us = NPU {lat['npu_us']:,.1f} + "
                 f"CPU {lat['cpu_us']:,.1f} us (estimate{bound})"]
        edges = {k: v for k, v in (lat.get("boundary_us") or {}).items() if k != "total"}
        if edges and lat["latency_us"]:
            total = lat["boundary_us"]["total"]
            lines.append(f"  program boundary on the CPU (quantize, transpose): {total:,.1f} us, "
                         f"{100 * total / lat['latency_us']:.0f}% of the latency (" + ", ".join(
                             f"{k} {v:,.1f} us" for k, v in edges.items()) + ")")
        for r in sorted(lat.get("rows", []), key=lambda r: -r["us"])[:5]:
            lines.append(f"  {r['us']:>10,.1f} us  {r['runs_on']:<9} {r['kind']:<15} "
                         f"{r['node']}  [{r['basis']}]")
        return lines

    def _kernel_lines(self) -> list[str]:
        """The kernels the firmware must link, by library."""
        if not self.kernels:
            return []
        lines = ["", "kernels the firmware must link (op, library)"]
        width = max(len(k["op"]) for k in self.kernels)
        for k in self.kernels:
            missing = "" if k.get("available", True) else "  NOT PROVIDED on this target"
            lines.append(f"  {k['op'].ljust(width)}  {k['library']}{missing}")
        return lines

    def version_lines(self) -> list[str]:
        """The versions on record (what a firmware build must match)."""
        v = self.versions
        if not v:
            return []
        lines = ["", "versions"]
        for key in ("executorch", "pte_schema"):
            if key in v:
                lines.append(f"  {key} {v[key]}")
        for name, version in v.get("npu_compilers", {}).items():
            lines.append(f"  npu compiler {name} {version}")
        for key in ("runtime", "delegate_payload", "neutron_payload_versions"):
            if key in v:
                value = v[key]
                text = ", ".join(map(str, value)) if isinstance(value, list) else value
                lines.append(f"  {key} {text}")
        return lines

    def _state_lines(self) -> list[str]:
        """The state the program keeps between calls (nothing for a stateless program)."""
        if not self.state:
            return []
        rows = [("name", "shape", "dtype", "bytes", "scale", "zero_point")]
        for t in self.state:
            rows.append((t["name"], str(tuple(t["shape"])), t["dtype"], f"{t['bytes']:,}",
                         "-" if t.get("scale") is None else f"{t['scale']:.9g}",
                         "-" if t.get("zero_point") is None else str(t["zero_point"])))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        total = sum(t["bytes"] for t in self.state)
        lines = ["", f"state kept between calls: {len(self.state)} tensor(s), {total:,} B in "
                     "the planned RAM (mutable buffers, initialised by the program; "
                     "reset_state() restores them)"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        return lines

    def _io_lines(self) -> list[str]:
        """The int8 program I/O table (nothing for float I/O)."""
        if not self.io:
            return []
        rows = [("", "name", "shape", "dtype", "scale", "zero_point")]
        for kind in ("inputs", "outputs"):
            for i, t in enumerate(self.io.get(kind, [])):
                scale = "-" if t.get("scale") is None else f"{t['scale']:.9g}"
                zero = "-" if t.get("zero_point") is None else str(t["zero_point"])
                rows.append((f"{kind[:-1]} {i}", t["name"], str(tuple(t["shape"])), t["dtype"],
                             scale, zero))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["", f"program I/O {self.io.get('mode', 'int8')} (real = scale * (q - zero_point))"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        return lines
