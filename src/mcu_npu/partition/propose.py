"""Proposing NPU partitions and refining them: the supported nodes with their quantize /
dequantize nodes grouped into connected, acyclic partitions (``propose``), and every proposed
partition converted and, where the NPU compiler checks operators on its own (Vela), checked
by it, until all convert and the compiler accepts them (``refine``). ``plan.plan_program``
runs both; the partitioner applies the plan."""

from __future__ import annotations

import operator
from typing import Iterable, Mapping

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from ..upstream.private import FakeTensor
from ..errors import ConfigError, ConversionError, McuNpuError, NpuCompilerError, first_line
from ..npu.families import families
from ..targets import Target
from ..tflite import convert
from ..tflite.ops_aliases import DEQUANTIZE, DEQUANTIZE_PER_CHANNEL, QUANTIZE
from .grouping import propose_groups
from .subgraph import nearest_upstream, partition_view
from .support import Rejection, SupportAnalysis, VerdictCategory

# the ATen ops behind the Edge views and copies the converter turns into aliases
PASS_THROUGH_OPS = {torch.ops.aten.view_copy.default, torch.ops.aten.squeeze_copy.dims,
                    torch.ops.aten.squeeze_copy.dim, torch.ops.aten.squeeze_copy.default,
                    torch.ops.aten.unsqueeze_copy.default, torch.ops.aten.alias_copy.default,
                    torch.ops.aten.clone.default,
                    torch.ops.dim_order_ops._clone_dim_order.default,
                    torch.ops.dim_order_ops._to_dim_order_copy.default}


def cluster_members(analysis: SupportAnalysis) -> set[Node]:
    """Supported compute nodes plus the quantize, dequantize, tuple-access and constant
    nodes that belong with them, and the dequantize-quantize pairs that requantize one
    member's output for another."""
    members = {n for n in analysis.verdicts if analysis.supported(n)}
    nodes = list(analysis.graph.nodes)
    for node in reversed(nodes):  # dequantize / constant paths: every user is a member
        if node.op != "call_function" or node in members or node in analysis.verdicts:
            continue
        if node.target in DEQUANTIZE + DEQUANTIZE_PER_CHANNEL or analysis.is_constant(node):
            if node.users and all(u in members for u in node.users):
                members.add(node)
    for node in nodes:  # quantize / getitem reading a member's result
        if node.op != "call_function" or node in members:
            continue
        src = node.args[0] if node.args else None
        if (node.target in QUANTIZE or node.target is operator.getitem) and src in members:
            members.add(node)
    # a requantize between members (int16 <-> int8), or of an integer program input to the
    # NPU's int8 (``passes.edge.TakeIntegerInput``): a QUANTIZE op
    for node in nodes:
        if node.op == "call_function" and node.target in DEQUANTIZE and node not in members \
                and node.args and (node.args[0] in members or
                                   _integer_input(node.args[0], analysis)) and node.users and \
                all(u.target in QUANTIZE and u.users and all(d in members for d in u.users)
                    for u in node.users):
            members.add(node)
            members.update(node.users)
    return members


def _integer_input(node, analysis: SupportAnalysis) -> bool:
    """A program input (not a weight) holding integer data."""
    val = node.meta.get("val") if isinstance(node, Node) else None
    return node.op == "placeholder" and not analysis.is_constant(node) and \
        isinstance(val, torch.Tensor) and not val.dtype.is_floating_point


_QDQ = set(QUANTIZE) | set(DEQUANTIZE) | set(DEQUANTIZE_PER_CHANNEL)


def is_pass_through(node: Node) -> bool:
    """A view or copy: in the NPU's graph an alias of its input, no data computed."""
    return node.op == "call_function" and getattr(node.target, "_op", None) in PASS_THROUGH_OPS


def _without_pass_throughs(members: set[Node]) -> set[Node]:
    """A group's ``members`` without the views and copies whose data comes from outside the
    group and also leaves it (with the quantize and dequantize around them). Such an output is
    the partition's input under another shape: the NPU has nothing to compute for it and
    Vela drops it from the command stream's outputs, so the partition would return fewer
    tensors than the program expects. The CPU takes it as a view."""
    def source(n: Node) -> Node:  # the value a chain of views and Q/DQ reads
        while n.op == "call_function" and (n.target in _QDQ or is_pass_through(n)) \
                and n.args and isinstance(n.args[0], Node):
            n = n.args[0]
        return n

    def escapes(n: Node) -> bool:
        return any(u not in members or (u.target in _QDQ and escapes(u)) for u in n.users)

    changed = True
    while changed:
        changed = False
        for node in [n for n in members if is_pass_through(n)]:
            if source(node) not in members and escapes(node):
                drop = {node} | {u for u in node.users if u.target in QUANTIZE}
                drop |= {a for a in node.all_input_nodes if a.target in _QDQ
                         and all(u not in members or u in drop for u in a.users)}
                members -= drop
                changed = True
    return members


def single_group(nodes: list[Node], members: set[Node]) -> list[Node] | None:
    """The members as one group when they are connected and convex (no path leaves the
    members and comes back), checked in one pass over the graph; else None.

    The common case (the whole model on the NPU, e.g. an unrolled recurrent network with
    thousands of nodes) then costs linear time instead of the general partitioner's merging.
    """
    group = [n for n in nodes if n in members and n.op == "call_function"]
    inside = set(group)
    parent = {n: n for n in group}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    outside_reach: set[Node] = set()  # non-members reachable from a member
    for node in nodes:
        preds = node.all_input_nodes
        if node in inside:
            for p in preds:
                if p in outside_reach:
                    return None  # a path leaves the members and comes back
                if p in inside:
                    parent[root(p)] = root(node)
        elif any(p in inside or p in outside_reach for p in preds):
            outside_reach.add(node)
    roots = {root(n) for n in group}
    return group if len(roots) == 1 else None


def propose(program: ExportedProgram, analysis: SupportAnalysis) -> list[list[Node]]:
    """Connected, acyclic groups of member nodes holding at least one compute node, in
    graph order."""
    members = cluster_members(analysis)
    group = single_group(list(program.graph.nodes), members)
    groups = [group] if group is not None else general_groups(program, members)
    groups = [[n for n in g if n in kept] for g in groups
              for kept in [quantized_on_the_cpu_side(_without_pass_throughs(set(g)),
                                                     analysis.is_constant)]]
    return [g for g in groups if any(n in analysis.verdicts for n in g)]


def quantized_on_the_cpu_side(members: set[Node], is_constant) -> set[Node]:
    """A group's ``members`` without the quantize nodes that read a value computed outside
    the group (a weight the partition owns, ``is_constant`` placeholder, folds into int8 data
    instead). Such a quantize would make the partition's input the float value it reads, and
    neither device runtime converts a delegate input (``EthosUBackend.cpp`` refuses a float
    tensor, ``NeutronBackend.cpp`` hands its bytes on): the CPU quantizes instead, and the
    partition reads the int8 result."""
    def reads_outside(n: Node) -> bool:
        src = n.args[0] if n.args else None
        return isinstance(src, Node) and src not in members and \
            not (src.op == "placeholder" and is_constant(src))

    return {n for n in members
            if not (n.op == "call_function" and n.target in QUANTIZE and reads_outside(n))}


def general_groups(program: ExportedProgram, members: set[Node]) -> list[list[Node]]:
    """Connected, acyclic groups of ``members`` in graph order, as torch.fx's
    capability-based partitioner proposes them (any shape of member set;
    ``grouping.propose_groups``)."""
    graph = program.graph_module.graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    groups = _outputs_with_their_producers(propose_groups(graph, members), order)
    groups = [sorted(g, key=order.__getitem__) for g in groups if g]
    return sorted(groups, key=lambda g: order[g[0]])


def _outputs_with_their_producers(groups: list[set[Node]], order: dict) -> list[set[Node]]:
    """Each tuple access and quantize moved into the group of the node it reads.

    The capability-based partitioner merges greedily from the graph's end, so the quantize of
    one output of a split can join its readers' group while the split cannot (another of its
    outputs reaches those readers through the CPU): the split's group would then return a float
    tensor the NPU cannot write. A node all of whose inputs are in one group adds no path
    between groups when it joins that group, so no cycle appears."""
    where = {n: g for g in groups for n in g}
    for node in sorted(where, key=order.__getitem__):  # a getitem before its quantize
        src = node.args[0] if node.args else None
        if (node.target is operator.getitem or node.target in QUANTIZE) and \
                src in where and where[src] is not where[node]:
            where[node].discard(node)
            where[src].add(node)
            where[node] = where[src]
    return groups


def compiler_check(target: Target):
    """The NPU compiler's own operator check for ``target``, if it has one
    (``NpuFamily.operator_check``). Whatever it raises is an ``NpuCompilerError``: a check
    that fails moves the partition it was asked about to the CPU, never fails the compile."""
    if not target.npu.compiler_checks_operators:
        return None
    check = next((f.operator_check for f in families()
                  if f.compiler == target.npu.vendor_compiler), None)
    if check is None:
        raise ConfigError(f"{target.name}: the {target.npu.vendor_compiler!r} compiler checks "
                          "operators, but mcu-npu has no way to ask it")

    def checked(model, target):
        try:
            return check(model, target)
        except McuNpuError:
            raise
        except Exception as exc:  # noqa: BLE001  (a vendor compiler raises any type)
            raise NpuCompilerError(f"{type(exc).__name__}: {first_line(exc)}",
                                   tool=target.npu.vendor_compiler) from exc
    return checked


def refine(program: ExportedProgram, target: Target, excluded: Iterable[str] = (),
           npu_compiler: str = "auto", placement=None,
           rejected: Mapping[str, Rejection] | None = None) -> dict[str, Rejection]:
    """Convert every proposed partition, and ask the NPU compiler's own check about it where
    it has one, until all convert and the compiler accepts them; returns node name -> why
    each other node was moved to the CPU (``rejected``, nodes already moved, included).

    A node whose conversion fails (the converter names it) or that the compiler refuses is
    moved to the CPU with the error or the compiler's reason, and the rest is partitioned
    again; where a failure names no compute node of the partition, the whole partition
    moves. Every round moves at least one node, so this settles: the NPU side never fails a
    compile.

    Needs the program's real weights: ExecuTorch hands partitioners a copy whose constants
    are fake, so plan the Edge program before ``to_backend`` (``partition.plan``;
    ``mcu_npu.compile`` does).
    """
    return settle(program, target, excluded, npu_compiler, placement, rejected)[0]


def settle(program: ExportedProgram, target: Target, excluded: Iterable[str] = (),
           npu_compiler: str = "auto", placement=None,
           rejected: Mapping[str, Rejection] | None = None):
    """``refine``'s rounds: (the nodes moved to the CPU and why, the support analysis and
    the groups of the last round, in which every partition converted)."""
    uses_vendor = npu_compiler in ("auto", target.npu.vendor_compiler)
    check = compiler_check(target) if uses_vendor else None
    rejected = dict(rejected or {})
    while True:
        analysis = SupportAnalysis(program, target, excluded, rejected, placement)
        groups = propose(program, analysis)
        found: dict[str, Rejection] = {}
        for group in groups:
            view = partition_view(program, group)
            if any(isinstance(t, FakeTensor) for t in view.state_dict.values()):
                if check is None:  # converted with real weights when delegated
                    continue
                raise ConfigError(
                    f"{target.name}: plan the Edge program before to_backend "
                    "(NpuPartitioner(plan=mcu_npu.partition.plan.plan_program(edge_program, "
                    "target))) so the NPU compiler can check partitions with real weights")
            found.update(group_rejections(view, group, analysis, target, check,
                                          program=program))
        if not found:
            return rejected, analysis, groups
        rejected.update(found)


def group_rejections(view: ExportedProgram, group: list[Node], analysis: SupportAnalysis,
                     target: Target, check=None, *,
                     program: ExportedProgram | None = None) -> dict[str, Rejection]:
    """The compute nodes of ``group`` (converted as ``view``) that leave the NPU: the node
    its conversion fails at, else those the compiler's ``check`` refuses. Never empty when
    something failed: a failure that names no compute node of the group moves them all.
    Where the compiler fails on the whole partition without naming an operator, each compute
    node is checked alone (in ``program``, the one ``view`` is cut from) to find the ones it
    fails on."""
    compute = [n for n in group if n in analysis.verdicts and analysis.supported(n)]
    try:
        model = convert(view, target)
    except ConversionError as exc:
        why = Rejection(f"converting it for the NPU failed: {first_line(exc)}",
                        VerdictCategory.CONVERSION)
        return {n.name: why for n in _culprits([exc.node], group, compute) or compute}
    try:
        refused = check(model, target) if check is not None else {}
    except NpuCompilerError as exc:
        failing = _failing_alone(program, group, compute, target, check) if program else []
        why = Rejection(f"the NPU compiler failed on it: {first_line(exc)}",
                        VerdictCategory.NPU_COMPILER)
        return {n.name: why for n in failing or compute}
    found = {}
    for name, reason in refused.items():
        for node in _culprits([name], group, compute):
            found[node.name] = Rejection(reason, VerdictCategory.NPU_COMPILER)
    if refused and not found:
        reason = "; ".join(f"{k}: {v}" for k, v in refused.items())
        found = {n.name: Rejection(reason, VerdictCategory.NPU_COMPILER) for n in compute}
    return found


def _failing_alone(program: ExportedProgram, group: list[Node], compute: list[Node],
                   target: Target, check) -> list[Node]:
    """The nodes of ``compute`` the compiler's ``check`` fails on when each is compiled alone
    (with the quantize and dequantize nodes of ``group`` around it)."""
    members = set(group)
    failing = []
    for node in compute:
        around = {a for a in node.all_input_nodes if a in members}
        around |= {u for u in node.users if u in members}
        around |= {u for a in list(around) if a in node.users for u in a.users if u in members}
        alone = [n for n in group if n is node or n in around]
        try:
            check(convert(partition_view(program, alone), target), target)
        except NpuCompilerError:
            failing.append(node)
        except ConversionError:
            continue  # not convertible cut this way: no verdict on the node from this
    return failing


def _culprits(names, group: list[Node], compute: list[Node]) -> list[Node]:
    """The compute nodes of ``compute`` behind the nodes ``names`` of ``group`` (a quantize,
    a tuple access or a view behind a failure is the compute node that made its input)."""
    wanted = set(names)
    starts = [n for n in group if n.name in wanted]
    return nearest_upstream(starts, set(compute), set(group))
