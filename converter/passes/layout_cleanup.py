"""Removes the data-movement chains exporters leave behind:

- Transpose then Transpose: one Transpose with the composed permutation, or nothing when it is the identity;
- Reshape then Reshape: the second reads the first's input (when its shape has no 0 "copy this dim" entry,
  which would refer to the intermediate);
- Cast then Cast: when the first is lossless for its input (float16 -> float32, int8 -> int32, ...), the
  second casts the original directly, or disappears when it casts back to the original type;
- Reshape(x, [-1, m, n]) -> Transpose [0, 2, 1] -> Reshape back to x's leading dims + [n, m] (how the dynamo
  exporter writes `x.transpose(-2, -1)` inside a batched MatMul): one Transpose of x's last two dims, proven
  from the shape expressions (both targets built from Shape(x)).

The first node of a pair stays while something else reads it (dead_code removes it otherwise). A node whose
output is a graph output is never removed, so the model's outputs keep their names.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .shape_expressions import rank_of, shape_dims

# dtype -> types that hold every one of its values exactly
_LOSSLESS = {
    np.dtype(np.bool_): {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                                np.uint64, np.float16, np.float32, np.float64)},
    np.dtype(np.int8): {np.dtype(t) for t in (np.int16, np.int32, np.int64, np.float16, np.float32, np.float64)},
    np.dtype(np.uint8): {np.dtype(t) for t in (np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
                                               np.float16, np.float32, np.float64)},
    np.dtype(np.int16): {np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64)},
    np.dtype(np.uint16): {np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64)},
    np.dtype(np.int32): {np.dtype(t) for t in (np.int64, np.float64)},
    np.dtype(np.uint32): {np.dtype(t) for t in (np.int64, np.uint64, np.float64)},
    np.dtype(np.float16): {np.dtype(t) for t in (np.float32, np.float64)},
    np.dtype(np.float32): {np.dtype(np.float64)},
}


def _lossless(src: np.dtype, dst: np.dtype) -> bool:
    if src == dst:
        return True
    if str(src) == "bfloat16":   # ml_dtypes' bfloat16, when present
        return dst in (np.dtype(np.float32), np.dtype(np.float64))
    return dst in _LOSSLESS.get(src, set())


def _drop(graph: Graph, node: Node, source: str) -> bool:
    """Removes `node` (one input, one output), pointing its readers at `source`."""
    out = node.outputs[0]
    if out in graph.outputs:
        return False
    graph.nodes.remove(node)
    graph.replace_uses(out, source)
    return True


def _fold_transposes(graph: Graph, node: Node, first: Node) -> bool:
    p1, p2 = first.attrs.get("perm"), node.attrs.get("perm")
    if p1 is None or p2 is None or len(p1) != len(p2):   # a default (reversing) perm needs a rank: left alone
        return False
    combined = [int(p1[k]) for k in p2]
    if combined == list(range(len(combined))):
        return _drop(graph, node, first.inputs[0])
    node.inputs = [first.inputs[0]]
    node.attrs = {**node.attrs, "perm": combined}
    return True


def _fold_reshapes(graph: Graph, node: Node, first: Node) -> bool:
    shape = graph.constant(node.inputs[1])
    if shape is None or (not node.attrs.get("allowzero") and np.any(shape == 0)):
        return False
    node.inputs = [first.inputs[0], node.inputs[1]]
    return True


def _fold_casts(graph: Graph, node: Node, first: Node) -> bool:
    x = first.inputs[0]
    src, mid = graph.tensors[x].dtype, graph.tensors[first.outputs[0]].dtype
    if src is None or mid is None or not _lossless(np.dtype(src), np.dtype(mid)):
        return False
    if np.dtype(node.attrs["to"]) == np.dtype(src):
        return _drop(graph, node, x)
    node.inputs = [x]
    return True


def _fold_flattened_transpose(graph: Graph, node: Node, producers: dict[str, Node]) -> bool:
    mid = producers.get(node.inputs[0])
    if mid is None or mid.op_type != "Transpose" or [int(p) for p in mid.attrs.get("perm") or []] != [0, 2, 1]:
        return False
    flat = producers.get(mid.inputs[0])
    if flat is None or flat.op_type != "Reshape":
        return False
    x = flat.inputs[0]
    rank = rank_of(graph, x)
    if rank is None or rank < 3:
        return False
    flat_dims = shape_dims(graph, producers, flat.inputs[1])
    back_dims = shape_dims(graph, producers, node.inputs[1])
    static = graph.tensors[x].shape if x in graph.tensors and graph.tensors[x].shape else [-1] * rank

    def is_dim(value, d: int) -> bool:   # a reference to x's dim d, or its size when that is static
        return value == (x, d) or (isinstance(value, int) and value >= 0 and value == static[d])

    if flat_dims is None or back_dims is None or len(flat_dims) != 3 or len(back_dims) != rank:
        return False
    if flat_dims[0] != -1 or not is_dim(flat_dims[1], rank - 2) or not is_dim(flat_dims[2], rank - 1):
        return False
    if not all(is_dim(back_dims[d], d) for d in range(rank - 2)) or not is_dim(back_dims[rank - 2], rank - 1) \
            or not is_dim(back_dims[rank - 1], rank - 2):
        return False
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    node.op_type, node.inputs, node.attrs = "Transpose", [x], {"perm": perm}
    return True


_PAIRS = {"Transpose": _fold_transposes, "Reshape": _fold_reshapes, "Cast": _fold_casts}


def clean_layout(graph: Graph) -> int:
    changed = 0
    progress = True
    while progress:
        progress = False
        # Flattened transposes first: folding their inner Reshape into its producer would hide them.
        producers = graph.producers()
        for node in list(graph.nodes):
            if node.op_type == "Reshape" and _fold_flattened_transpose(graph, node, producers):
                changed, progress = changed + 1, True
                producers = graph.producers()
        for node in list(graph.nodes):
            if node not in graph.nodes or node.op_type not in _PAIRS or node.attrs.get("_identity"):
                continue
            first = producers.get(node.inputs[0])
            if first is None or first.op_type != node.op_type or first.attrs.get("_identity"):
                continue
            if _PAIRS[node.op_type](graph, node, first):
                changed, progress = changed + 1, True
                producers = graph.producers()
    return changed
