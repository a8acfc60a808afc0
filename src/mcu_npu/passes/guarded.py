"""Our passes never fail a compile: a pass that raises leaves the graph as it was before it,
and the compile goes on without that rewrite; the report says which pass failed and why
(``PASS_FAILURES_KEY`` on the graph module's meta, notes in the report).

Errors of the project's own (``McuNpuError``: a model the flow refuses on purpose, such as an
LSTM with ``proj_size``) still propagate: they are verdicts, not failures."""

from __future__ import annotations

import operator

from torch.fx import Graph, GraphModule

from ..upstream.private import copy_calling
from ..errors import McuNpuError, first_line

PASS_FAILURES_KEY = "mcu_npu_pass_failures"
"""Graph-module meta key: one line per pass that raised and was skipped."""


def run_passes(passes, model: GraphModule) -> GraphModule:
    """``model`` rewritten by each of ``passes`` in turn (an fx ``PassBase`` returning a
    ``PassResult`` or None); one that raises is skipped, its failure recorded. The graph is
    copied once, before the first pass: a pass that fails (rarely) is undone by making the
    graph again from that copy with the passes before it (they are deterministic), rather
    than by copying the graph before every pass, which on an unrolled recurrent graph cost
    more than the passes themselves."""
    start, done, failed = _snapshot(model), [], []
    for p in passes:
        try:
            result = p(model)
        except McuNpuError:
            raise
        except Exception as exc:  # noqa: BLE001  (a pass may fail on any type)
            failed.append(pass_failure(type(p).__name__, exc))
            model = _replayed(start, done)
            continue
        model = result.graph_module if result is not None else model
        done.append(p)
    for line in failed:
        record_failure(model, line)
    return model


def _replayed(start, done) -> GraphModule:
    """The graph module ``start`` (a ``_snapshot``) holds, rewritten again by ``done``."""
    graph, attrs, meta = start
    fresh = Graph()
    copy_calling(graph, fresh)
    fresh.output(fresh.graph_copy(graph, {}))
    (old,), (new,) = [[n for n in g.nodes if n.op == "output"] for g in (graph, fresh)]
    new.meta = dict(old.meta)
    model = GraphModule(dict(attrs), fresh, "GraphModule")
    model.meta.update(meta)
    for p in done:
        result = p(model)
        model = result.graph_module if result is not None else model
    return model


def pass_failure(name: str, exc: BaseException) -> str:
    """The report's line for pass ``name`` failing with ``exc``."""
    return f"pass {name} failed and was skipped ({type(exc).__name__}: {first_line(exc)}); the compile went on " \
           "without its rewrite"


def record_failure(model: GraphModule, line: str) -> None:
    model.meta.setdefault(PASS_FAILURES_KEY, []).append(line)


def failures(model) -> list[str]:
    """The failures recorded on ``model`` (a graph module), oldest first."""
    return list(getattr(model, "meta", {}).get(PASS_FAILURES_KEY, []))


def _snapshot(model: GraphModule):
    """(a copy of the graph, the attributes it reads, the module's meta): what is needed to
    make ``model`` again as it is now, whatever a pass edits in place."""
    graph = Graph()
    copy_calling(model.graph, graph)  # an export's pytree calling form
    graph.output(graph.graph_copy(model.graph, {}))
    (old,), (new,) = [[n for n in g.nodes if n.op == "output"] for g in (model.graph, graph)]
    new.meta = dict(old.meta)
    attrs = {n.target: operator.attrgetter(n.target)(model)
             for n in model.graph.nodes if n.op == "get_attr"}
    meta = dict(model.meta)
    meta[PASS_FAILURES_KEY] = failures(model)
    return graph, attrs, meta
