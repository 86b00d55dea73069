"""Small queries the pattern-matching passes share."""
from __future__ import annotations

from ..ir import Graph, Node


def scalar(graph: Graph, name: str) -> float | None:
    """The value of a one-element constant, or None."""
    v = graph.constant(name)
    if v is None or v.size != 1:
        return None
    return float(v.reshape(-1)[0])


def close(value: float | None, want: float, tol: float) -> bool:
    """value is within tol (relative, at least absolute) of want."""
    return value is not None and abs(value - want) <= tol * max(1.0, abs(want))


def other_operand(node: Node, name: str) -> str | None:
    """The operand of a binary node that is not `name` (None when both are `name`)."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    a, b = node.inputs
    if a == b:
        return None
    return b if a == name else a


def single_use(graph: Graph, consumers, name: str) -> bool:
    """`name` is read by exactly one node and is not a graph output."""
    return len(consumers.get(name, [])) == 1 and name not in graph.outputs


class PatternMatcher:
    """The producer and consumer maps a pattern pass queries; rebuild it after each rewrite."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()

    def only_reader(self, name: str) -> Node | None:
        """The single node reading `name`, if it is a graph-internal value read exactly once."""
        readers = self.consumers.get(name, [])
        if len(readers) != 1 or name in self.graph.outputs:
            return None
        return readers[0]
