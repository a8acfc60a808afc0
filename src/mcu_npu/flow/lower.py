"""Lower: the NPU partitions of the plan delegated, and on a target with Cortex-M kernels the
rest lowered to them. The NPU side never fails the compile: what the NPU compiler or the
Cortex-M lowering fails on stays on the CPU, with the error as its reason."""

from __future__ import annotations

import copy
from dataclasses import replace

from ..backend.cortex_m import cortex_m_core, lower_to_cortex_m
from ..backend.boundary import refused_calls
from ..backend.delegate import (COMPUTE_NODES, compute_nodes, keep_interfaces_only,
                                use_device_ids)
from ..errors import McuNpuError, PartitionError, stage, stage_error
from ..partition import NpuPartitioner
from ..partition.plan import Plan, PlanOptions, plan_program
from ..partition.support import Rejection, VerdictCategory
from ..passes.edge.order import PORTABLE_LINEAR, REFRESH_STRIDES
from ..passes.guarded import pass_failure
from .place import exclude_hint

DELEGATING = "delegating to the NPU"
"""The stage that delegates (``errors.stage``)."""


def cpu_hint(op: str) -> str:
    """What to do when the Cortex-M lowering cannot take ``op``."""
    op = op or "the op"
    return (f"{op} stays on the CPU, and ExecuTorch's Cortex-M lowering cannot take it in this "
            f"form: change how the model uses {op} (e.g. its input's rank or layout), or "
            "report it")


def plan_edge(edge, target, decided: Plan | PlanOptions) -> Plan:
    """The plan of the Edge program about to be lowered: ``decided`` when it describes that
    program, else the program planned now (with the placement the composed quantizer
    stamped on it). Planned here, on the real weights, because ExecuTorch hands
    partitioners a copy with fake ones."""
    with stage(DELEGATING, exclude_hint):
        program = edge.exported_program()
        if isinstance(decided, Plan):
            if decided.describes(program):
                return decided
            return replace(plan_program(program, target, decided.options),
                           portable=decided.portable)
        return plan_program(program, target, decided)


def lower(edge, plan: Plan, target=None):
    """(Edge program manager, the plan it was lowered with): the NPU partitions of ``plan``
    (``plan_edge``) delegated and, on a target with a Cortex-M CPU, the rest on its int8
    kernels.

    The NPU side never fails the compile: a partition its NPU compiler fails on is planned
    again with its nodes on the CPU, and where ExecuTorch's Cortex-M lowering fails the CPU
    ops run as portable kernels; the report gives each such node the error as its reason.
    A linear layer left to the portable kernels becomes the ops they have
    (``DecomposePortableLinear``)."""
    plan = _strides_refreshed(edge, plan)
    while True:
        lowered, plan = _delegated(edge, plan)
        core = cortex_m_core(target) if target is not None else None
        if core is not None:
            with stage("lowering to the Cortex-M kernels", cpu_hint):
                before = copy.deepcopy(lowered)
                try:
                    lowered = lower_to_cortex_m(lowered, core)
                except Exception as exc:  # noqa: BLE001  (ExecuTorch's passes raise any type)
                    why = stage_error("lowering to the Cortex-M kernels", exc)
                    lowered, plan = before, _all_portable(plan, str(why).splitlines()[0])
            # The Cortex-M lowering rewrites the CPU ops around the partitions (it drops a
            # quantize it takes for a constant's): a call it leaves the device refusing
            # moves its partition to the CPU, as one refused before it does.
            with stage(DELEGATING, exclude_hint):
                refused = refused_partitions(lowered, plan.target.npu.kind)
                if refused:
                    plan = _moved(edge, plan, refused)
                    continue
        break
    edge = lowered
    with stage(DELEGATING):
        for method in edge.methods:
            for decompose in PORTABLE_LINEAR.passes:
                decompose()(edge.exported_program(method))
            use_device_ids(edge.exported_program(method))
    return edge, plan


def _delegated(edge, plan: Plan):
    """(``edge`` with the NPU partitions of ``plan`` delegated, only their interfaces kept;
    the plan they settled on): a partition the NPU compiler fails on, or whose call the
    device runtime would refuse, is planned again on the CPU."""
    while True:
        with stage(DELEGATING, exclude_hint):
            try:
                delegated = edge.to_backend(NpuPartitioner(plan=plan))
            except PartitionError as exc:
                if not exc.nodes:
                    raise
                why = Rejection(f"the NPU compiler failed on its partition: {exc}",
                                VerdictCategory.NPU_COMPILER)
                plan = _replanned(edge, plan, {n: why for n in exc.nodes})
                continue
            refused = refused_partitions(delegated, plan.target.npu.kind)
            if not refused:
                break
            plan = _moved(edge, plan, refused)
    with stage(DELEGATING, exclude_hint):
        for method in delegated.methods:
            keep_interfaces_only(delegated.exported_program(method))
    return delegated, plan


def _moved(edge, plan: Plan, refused: dict[str, Rejection]) -> Plan:
    """``plan`` made again with the nodes of the ``refused`` partitions on the CPU; raises
    when they are there already (nothing left to move)."""
    if set(refused) <= set(plan.compiler_rejections):
        raise RuntimeError(next(iter(refused.values())).reason)
    return _replanned(edge, plan, refused)


def _strides_refreshed(edge, plan: Plan) -> Plan:
    """``RefreshStrides`` (``passes.edge.order.REFRESH_STRIDES``) on every method; where it
    fails, ``plan`` made again with every compute node on the CPU (a partition converted
    from stale strides could read its input transposed), the failure as their reason."""
    try:
        for method in edge.methods:
            for refresh in REFRESH_STRIDES.passes:
                refresh()(edge.exported_program(method))
    except McuNpuError:
        raise
    except Exception as exc:  # noqa: BLE001  (fake propagation raises any type)
        why = Rejection(pass_failure("RefreshStrides", exc).replace(
            "the compile went on without its rewrite", "no op goes to the NPU"),
            VerdictCategory.CONVERSION)
        return _replanned(edge, plan, {n.node: why for n in plan.nodes})
    return plan


def refused_partitions(edge, kind) -> dict[str, Rejection]:
    """Edge node name -> why, for the compute nodes of each partition whose delegate call
    the device runtime would refuse (``backend.boundary``): they move to the CPU. A
    boundary the plan made right never gets here; this keeps a program the device refuses
    from being written whatever the cause."""
    found = {}
    for method in edge.methods:
        for lowered, problems in refused_calls(edge.exported_program(method), kind):
            why = Rejection(f"the device runtime would refuse its partition: {problems[0]}",
                            VerdictCategory.CONVERSION)
            names = ((lowered.meta or {}).get(COMPUTE_NODES)
                     or compute_nodes(lowered.original_module))
            found.update({n: why for n in names or (lowered.backend_id,)})
    return found


def _replanned(edge, plan: Plan, rejected: dict[str, Rejection]) -> Plan:
    """``plan`` made again with the ``rejected`` nodes on the CPU."""
    rejected = {**plan.compiler_rejections, **rejected}
    return replace(plan_program(edge.exported_program(), plan.target, plan.options,
                                rejected=rejected), portable=plan.portable)


def _all_portable(plan: Plan, why: str) -> Plan:
    """``plan`` with every CPU node on portable kernels, for ``why``."""
    portable = dict(plan.portable)
    for n in plan.nodes:
        if n.partition is None and n.ident is not None:
            planned = portable.get(n.ident)
            portable[n.ident] = f"{planned}; {why}" if planned else f"portable kernels: {why}"
    return replace(plan, portable=portable)
