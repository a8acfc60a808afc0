"""Whether a compiled program can run on its board, said at compile time: host-only payloads
(the reference NPU compiler's), kernels the target's libraries lack, and the versions a
firmware build must match.

``compile()`` warns about each problem (``UserWarning``); with ``deployable=True`` (CLI:
``--require-deployable``) the first one is a ``NotDeployableError`` instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import McuNpuError, warn_user
from ..graph.delegate_call import is_delegate_call
from ..npu.family import installed_version

HOST_ONLY_COMPILER = "reference"


class NotDeployableError(McuNpuError):
    """The program would not run on the board (host-only payloads, a missing kernel)."""


def pte_schema_identifier() -> str:
    """The flatbuffer file identifier of ExecuTorch's program schema (``program.fbs``), which
    a ``.pte`` carries at bytes 4..8 and the runtime checks."""
    import executorch

    for root in executorch.__path__:
        for rel in ("exir/_serialize/program.fbs", "schema/program.fbs"):
            path = Path(root) / rel
            if path.is_file():
                m = re.search(r'file_identifier\s+"([^"]+)"', path.read_text())
                if m:
                    return m.group(1)
    return "unknown"


def compiler_version(name: str) -> str:
    """The installed version of an NPU compiler adapter's tool."""
    from ..npu.families import families

    if name == HOST_ONLY_COMPILER:
        return installed_version("mcu-npu", "mcu_npu")
    return next((f.compiler_version() for f in families() if f.compiler == name), "unknown")


def runtime_expectations(target, payloads: list[bytes]) -> dict:
    """What the target's device runtime must read: the payload format (and, for Neutron, the
    payload versions found in ``payloads``), from its NPU family (``NpuFamily.runtime_record``)."""
    from ..device.payload import VERSION, is_container
    from ..npu.families import family

    if not payloads:  # no delegate: nothing for an NPU runtime to read
        return {}
    if any(is_container(p) for p in payloads):
        return {"delegate_payload": f"mcu-npu container v{VERSION} (host emulator only; "
                                    "device runtimes refuse it)"}
    return family(target.npu.kind).runtime_record(payloads)


def versions_record(target, compilers: list[str], payloads: list[bytes]) -> dict:
    """The versions a firmware build must match, for the report."""
    return {
        "executorch": installed_version("executorch"),
        "pte_schema": pte_schema_identifier(),
        "npu_compilers": {c: compiler_version(c) for c in compilers},
        **runtime_expectations(target, payloads),
    }


def edge_payloads(edge) -> list[bytes]:
    """The processed bytes of every delegate of an Edge program manager, in call order."""
    out = []
    for method in edge.methods:
        gm = edge.exported_program(method).graph_module
        for node in gm.graph.nodes:
            if is_delegate_call(node):
                out.append(bytes(getattr(gm, node.args[0].target).processed_bytes))
    return out


def how_to_deploy(target) -> str:
    """What gives a deployable program for ``target``."""
    from ..npu.compilers import vendor_compilers
    from ..npu.families import families
    from ..targets import get_target, targets

    vendor = target.npu.vendor_compiler
    hint = next((f.install_hint for f in families() if f.compiler == vendor),
                f"install the {vendor} compiler")
    install = f"{hint} so npu_compiler=\"auto\" uses it"
    others, vendors = [], vendor_compilers()
    for name in targets():
        other = get_target(name)
        cls = vendors.get(other.npu.vendor_compiler)
        if name != target.name and cls is not None and cls().available():
            others.append(name)
    alt = f", or pick a target whose NPU compiler is installed ({', '.join(others)})" \
        if others else ""
    return (f"{install}{alt}, or keep every op on the CPU "
            "(operators_not_to_delegate=[\"*\"], CLI: --exclude '*')")


def host_only_message(report, target) -> str:
    return (f"target {report.target}: the NPU partitions were compiled by the reference "
            "compiler, so this program runs on the host only (the device runtime refuses "
            f"its payloads); for a deployable program, {how_to_deploy(target)}")


def check(report, target, deployable: bool) -> None:
    """Warn about each reason ``report``'s program would fail on the board, or raise
    ``NotDeployableError`` for the first one when ``deployable``."""
    problems = []
    if report.host_only:
        problems.append(host_only_message(report, target))
    problems += [f"target {report.target}: {p}; the firmware cannot run this program"
                 for p in report.kernel_problems]
    if deployable and problems:
        raise NotDeployableError(problems[0])
    for p in problems:
        warn_user(p)
