"""Groups of member nodes, exactly as torch.fx's ``CapabilityBasedPartitioner`` proposes them
(single-node partitions allowed, horizontal fusion on), with reachability held as integer
bitsets.

torch's partitioner tries, at every node, to merge every partition into one, and checks each
attempt for a cycle by walking every node downstream of the partitions' users: quadratic in
the graph, 1.5 s of the plan of a 1,000-node LSTM with its linear layers on the CPU, and run
at least twice per compile where ops fall back (the placement, the plan of the program
lowered). Here the same attempts, in the same order and with the same bookkeeping (its
record of which partitions each one reaches, stale entries included), decide by ANDing one
integer per user and per partition, so the groups, and the programs made from them, are
the same; ``tests/partition/test_grouping.py`` compares the two on random graphs and the
models' own.
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from typing import Collection, Iterable

from torch.fx import Graph, Node


def propose_groups(graph: Graph, members: Collection[Node]) -> list[set[Node]]:
    """The partitions ``CapabilityBasedPartitioner(gm, <members>,
    allows_single_node_partition=True).propose_partitions()`` returns for ``graph``, as node
    sets in the same order."""
    return _Proposal(list(graph.nodes), members).run()


class _Proposal:
    """One ``propose_partitions`` run; nodes by their index in graph order."""

    def __init__(self, nodes: list[Node], members: Collection[Node]):
        self.nodes = nodes
        index = {n: i for i, n in enumerate(nodes)}
        self.members = {index[n] for n in members if n in index}
        self.users = [[index[u] for u in n.users] for n in nodes]
        # reach[i]: node i and every node downstream of it, one bit each
        self.reach = [0] * len(nodes)
        for i in range(len(nodes) - 1, -1, -1):
            bits = 1 << i
            for u in self.users[i]:
                bits |= self.reach[u]
            self.reach[i] = bits
        self.assignment: dict[int, int] = {}  # node -> partition id
        self.partition_nodes: dict[int, set[int]] = {}  # live partitions, in creation order
        self.mask: dict[int, int] = {}  # partition id -> its nodes' bits
        self.reaches: dict[int, set[int]] = defaultdict(set)  # torch's partition_map
        self.order: dict[int, int] = {}  # partition id -> least reversed-topological order
        self.partition_users: dict[int, set[int]] = {}

    def run(self) -> list[set[Node]]:
        ids = itertools.count()
        for position in range(len(self.nodes) - 1, -1, -1):
            candidates: dict[int, None] = {}
            if position in self.members and position not in self.assignment:
                pid = next(ids)
                self.order[pid] = pid
                self._create(position, pid)
                candidates[pid] = None
            for pid, _ in sorted(self.order.items(), key=operator.itemgetter(1)):
                candidates[pid] = None
            pending = list(candidates)
            if len(pending) > 1:
                self_id = pending[0]
                for other_id in pending[1:]:
                    self_id = self._merge(self_id, other_id)
        self._tuple_outputs_with_producers()
        return [{self.nodes[i] for i in members}
                for members in self.partition_nodes.values() if members]

    def _downstream(self, users: Iterable[int]) -> int:
        bits = 0
        for u in users:
            bits |= self.reach[u]
        return bits

    def _partitions_reached(self, bits: int, sources: tuple[int, ...]) -> set[int]:
        """torch's ``downstream_partitions``: the partitions holding a node of ``bits`` (the
        users' ``_downstream``), and every partition those reach, without ``sources``."""
        found: set[int] = set()
        for pid, mask in self.mask.items():
            if mask & bits:
                found.add(pid)
                found.update(self.reaches[pid])
        found.difference_update(sources)
        return found

    def _create(self, node: int, pid: int) -> None:
        self.assignment[node] = pid
        self.partition_nodes[pid] = {node}
        self.mask[pid] = 1 << node
        self.partition_users[pid] = set(self.users[node])
        self.reaches[pid].update(
            self._partitions_reached(self._downstream(self.users[node]), (pid,)))

    def _merge(self, self_id: int, other_id: int) -> int:
        """torch's ``maybe_merge_partition``: the id the two go on under, merged unless that
        would make a cycle."""
        merged = self.mask[self_id] | self.mask[other_id]
        users = {u for u in self.partition_users[self_id] | self.partition_users[other_id]
                 if not merged >> u & 1}
        bits = self._downstream(users)
        if bits & merged:
            return self_id
        for pid, mask in self.mask.items():
            if mask & bits:
                reached = self.reaches[pid]
                if self_id in reached or other_id in reached:
                    return self_id
        keep, removed = self_id, other_id
        if len(self.partition_nodes[self_id]) < len(self.partition_nodes[other_id]):
            keep, removed = other_id, self_id
        moved = self.partition_nodes.pop(removed)
        self.partition_nodes[keep] |= moved
        for node in moved:
            self.assignment[node] = keep
        self.mask[keep] = merged
        del self.mask[removed]
        self.order[keep] = min(self.order[keep], self.order.pop(removed))
        self.reaches[keep] = self.reaches[keep] | self.reaches.pop(removed)
        self.partition_users[keep] = users
        del self.partition_users[removed]
        self.reaches[keep].update(self._partitions_reached(bits, (keep, removed)))
        self.reaches[keep].discard(keep)
        self.reaches[keep].discard(removed)
        return keep

    def _tuple_outputs_with_producers(self) -> None:
        """torch's last step: the readers of a node read only through ``getitem`` join that
        node's partition (none: no partition), repeated until nothing moves."""
        while True:
            moves: dict[int, int | None] = {}
            for i, node in enumerate(self.nodes):
                if all(u.op == "call_function" and u.target is operator.getitem
                       for u in node.users):
                    pid = self.assignment.get(i)
                    for u in self.users[i]:
                        if self.assignment.get(u) != pid:
                            moves[u] = pid
            if not moves:
                return
            for node, pid in moves.items():
                old = self.assignment.pop(node, None)
                if old is not None:
                    self.partition_nodes[old].discard(node)
                    self.mask[old] &= ~(1 << node)
                if pid is not None:
                    self.assignment[node] = pid
                    self.partition_nodes[pid].add(node)
                    self.mask[pid] |= 1 << node
