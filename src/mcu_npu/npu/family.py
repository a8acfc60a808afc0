"""``NpuFamily``: what one NPU family brings to the flow, read by the code that would otherwise
branch on the family. Each family package under ``npu/`` (``ethos_u``, ``neutron``) defines
one as ``FAMILY``; ``npu.families`` registers them. ``docs/adding_an_npu.md`` walks through
writing one.

Every field but ``adapter`` and ``compiler_version`` is read by the host runtime or the
checks of a written ``.pte`` too, so a family package's ``__init__`` and the modules it loads
import no compiler; the adapter is imported when it is first asked for.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Callable, Mapping


def installed_version(*distributions: str) -> str:
    """The version of the first of ``distributions`` that is installed, else "unknown"."""
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def no_payload_problems(data: bytes, inputs, outputs, target) -> list[str]:
    """A family whose payload format has nothing to check beyond its I/O records."""
    return []


def no_reference_meta(model) -> dict:
    """A family whose runtime copies delegate data as it lies: nothing to record."""
    return {}


@dataclass(frozen=True)
class NpuFamily:
    """One NPU family: its device runtime, compiler, payload format and the rules by which its
    runtime hands delegate tensors to the NPU."""

    kind: str
    """The ``NpuSpec.kind`` value of its NPUs (``targets.NpuKind`` for the built-in ones)."""
    backend_id: str
    """The id its device runtime registers its ExecuTorch backend under: what a ``.pte``
    names as the delegates' backend (e.g. ``EthosUBackend``)."""
    compiler: str
    """The ``npu_compiler`` name of its vendor compiler (``NpuSpec.vendor_compiler``)."""
    adapter: Callable[[], type]
    """The vendor compiler's adapter class (``npu.base.NpuCompiler``), imported when called."""
    compiler_version: Callable[[], str]
    """The installed vendor compiler's version, "unknown" when absent."""
    install_hint: str
    """How a user installs the vendor compiler (one clause: "install ... (pip install ...)")."""
    input_count: Callable[[bytes, Mapping[str, bytes]], int]
    """How many leading delegate arguments its runtime takes as inputs, from a payload and
    the program's named data."""
    npu_tensors: Callable[[bytes, object], "dict | None"]
    """(payload, the partition's ``TFLiteModel`` or None when it is not at hand) ->
    {"inputs": [(count, elem_size)], "outputs": [...]}: the NPU tensors as its runtime reads
    them; None when they are in the graph and it is not at hand."""
    input_problem: Callable[[int, object, int, object], "str | None"]
    """(index, dtype, element count, ``device.delegate_io.NpuTensor``) -> why its runtime
    refuses that tensor as NPU input ``index`` (None: it takes it)."""
    output_problem: Callable[[int, object, int, object], "str | None"]
    """The same for an output."""
    runtime_record: Callable[[list], dict]
    """What its device runtime must read, for the report's versions record."""
    memory_figures: Callable[[bytes], dict]
    """Flash parts and per-call scratch of one payload (``estimate.memory.payload_figures``)."""
    payload_problems: Callable[[bytes, list, list, object], list] = no_payload_problems
    """(payload, input tensors, output tensors, target) -> why its runtime or driver would
    refuse the payload itself, for ``mcu-npu check`` (the I/O rules are checked apart)."""
    reference_meta: Callable[[object], dict] = no_reference_meta
    """What a reference payload (``npu.reference``) records beside the graph so the host
    copies delegate data as this runtime would (Neutron: its format flags)."""
    operator_check: Callable[[object, object], dict] | None = None
    """(partition ``TFLiteModel``, target) -> graph node name -> why the vendor compiler would
    not put that node's operators on the NPU, for a compiler that decides on its own
    (``NpuSpec.compiler_checks_operators``; Ethos-U: what Vela refuses)."""
    argument_formats: Callable[[bytes], "tuple[list[int], list[int]] | None"] | None = None
    """For a runtime that transposes flagged tensors (``NpuSpec.runtime_transposes_io``):
    (input flags, output flags) of a payload in delegate argument order, None when it
    records none."""
    debug_graphs: Callable[[bytes, object], dict] | None = None
    """(partition graph, target placed in its memory) -> {file suffix: bytes}: graphs
    ``--export-partitions`` writes beside a partition's TFLite graph (Ethos-U: Vela's
    optimised graph)."""

    @property
    def backend_class_name(self) -> str:
        """The name of this project's ExecuTorch backend class for the family: its own, so an
        upstream backend named like the device id cannot take over its partitions."""
        return f"McuNpu{self.backend_id}"
