"""Evaluates nodes whose inputs are all constants (including Shape of a static-shaped tensor, so
shape sub-graphs collapse when input shapes are fixed)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Tensor
from ..ops import evaluate

# Folding must not blow up the file: an Expand of a scalar to a huge shape stays a node.
MAX_FOLDED_ELEMENTS = 1 << 22


def _static_shape(t: Tensor | None) -> list[int] | None:
    if t is None or t.shape is None or any(d < 0 for d in t.shape):
        return None
    return t.shape


def fold_constants(graph: Graph) -> int:
    graph.topological_sort()
    folded = 0
    kept = []
    for node in graph.nodes:
        values = [graph.constant(i) if i else None for i in node.inputs]
        if node.op_type == "Shape" and values and values[0] is None:
            shape = _static_shape(graph.tensors.get(node.inputs[0]))
            if shape is not None:   # only the shape matters; broadcast_to allocates nothing
                values = [np.broadcast_to(np.uint8(0), shape)]
        if any(v is None for v, name in zip(values, node.inputs) if name):
            kept.append(node)
            continue
        try:
            outs = evaluate(node, values)
        except Exception:   # an op the evaluator cannot do on these values: leave it to the runtime
            outs = None
        if outs is None or sum(o.size for o in outs) > MAX_FOLDED_ELEMENTS:
            kept.append(node)
            continue
        for name, value in zip(node.outputs, outs):
            if not name:
                continue
            dtype = graph.tensors[name].dtype
            value = np.asarray(value.astype(dtype, copy=False), order="C")
            graph.tensors[name] = Tensor(name, value.dtype, list(value.shape), value)
        folded += 1
    graph.nodes = kept
    return folded
