"""Removes nodes none of whose outputs reach a graph output."""
from __future__ import annotations

from ..ir import Graph


def remove_dead_nodes(graph: Graph) -> int:
    graph.topological_sort()   # the backwards sweep needs producers before consumers
    needed = set(graph.outputs)
    live = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            live.append(node)
            needed.update(i for i in node.inputs if i)
    removed = len(graph.nodes) - len(live)
    graph.nodes = list(reversed(live))
    return removed
