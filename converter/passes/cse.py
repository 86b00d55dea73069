"""Common sub-expression elimination: a node with the same operator, inputs and attributes as an earlier one
computes the same values, so its readers read the earlier node's outputs instead. Exporters repeat shape
arithmetic (Shape -> Gather -> Unsqueeze per use) and casts of the same mask in every layer. Nodes with
sub-graphs (If, Loop, Scan) are left alone, and so is a node whose outputs are graph outputs (their names
are the model's interface)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node


# Operators whose repeated evaluation may differ: never merged.
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"}


class _Incomparable(Exception):
    pass


def _attr_key(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    if isinstance(value, type):
        return ("dtype", np.dtype(value).str)
    if isinstance(value, (str, int, float, bool, np.generic)) or value is None:
        return value
    raise _Incomparable   # an attribute we cannot compare (a sub-graph): never merged


def _key(node: Node):
    if node.op_type in _NONDETERMINISTIC:
        return None
    try:
        return node.op_type, tuple(node.inputs), len(node.outputs), _attr_key(node.attrs)
    except _Incomparable:
        return None


def eliminate_common_subexpressions(graph: Graph) -> int:
    merged = 0
    seen: dict = {}
    for node in list(graph.nodes):   # topological order: a merge makes later duplicates' inputs equal
        key = _key(node)
        if key is None:
            continue
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
            continue
        if any(o in graph.outputs for o in node.outputs if o):
            continue
        graph.nodes.remove(node)
        for mine, theirs in zip(node.outputs, earlier.outputs):
            if mine:
                graph.replace_uses(mine, theirs)
        merged += 1
    return merged
