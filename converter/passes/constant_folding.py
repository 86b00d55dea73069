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


def _product(dims) -> int:
    n = 1
    for d in dims:
        n *= max(int(d), 0)
    return n


def _output_elements(node, values: list) -> int | None:
    """The element count an operator that can grow small constants into a large tensor would produce, computed from
    its inputs before anything is allocated (None: not such an operator, or not known here)."""
    op = node.op_type
    try:
        if op == "Expand":
            target = [int(d) for d in np.asarray(values[1]).reshape(-1)]
            a = list(np.shape(values[0]))
            rank = max(len(a), len(target))
            a, target = [1] * (rank - len(a)) + a, [1] * (rank - len(target)) + target
            return _product(max(x, y) if min(x, y) != 0 else 0 for x, y in zip(a, target))
        if op == "Tile":
            return _product(d * int(r) for d, r in zip(np.shape(values[0]), np.asarray(values[1]).reshape(-1)))
        if op == "ConstantOfShape":
            return _product(np.asarray(values[0]).reshape(-1))
        if op == "Range":
            start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in values[:3])
            return max(int(np.ceil((limit - start) / delta)), 0) if delta else None
        if op == "OneHot":
            return int(np.size(values[0])) * int(np.asarray(values[1]).reshape(-1)[0])
        if op == "Pad" and len(values) > 1 and values[1] is not None:
            pads = [int(p) for p in np.asarray(values[1]).reshape(-1)]
            rank = np.ndim(values[0])
            if len(pads) == 2 * rank:
                return _product(d + pads[i] + pads[i + rank] for i, d in enumerate(np.shape(values[0])))
        if op in _BROADCASTING:   # elementwise: the broadcast of the operands' shapes ([50000, 1] * [1, 50000])
            return _product(np.broadcast_shapes(*(np.shape(v) for v in values if v is not None)))
        if op == "MatMul" and len(values) == 2:
            a, b = list(np.shape(values[0])), list(np.shape(values[1]))
            if len(a) >= 2 and len(b) >= 2:
                batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
                return _product(list(batch) + [a[-2], b[-1]])
        if op == "Gemm" and len(values) >= 2:
            attrs = node.attrs
            a, b = np.shape(values[0]), np.shape(values[1])
            return int(a[0 if not attrs.get("transA") else 1]) * int(b[1 if not attrs.get("transB") else 0])
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return None


# Operators whose output is the broadcast of their inputs: small constants can broadcast to a huge result.
_BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Mean", "Sum", "Where", "Equal", "Greater",
                 "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "BitShift", "PRelu",
                 "BitwiseAnd", "BitwiseOr", "BitwiseXor"}


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
        grown = _output_elements(node, values)
        if grown is not None and grown > MAX_FOLDED_ELEMENTS:   # checked before NumPy allocates it
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
