"""Reads shape tensors built at run time (Concat of constants, Shape, Slice, Gather, Unsqueeze) as lists of dims,
each an int or a reference (tensor, axis) to a dim of some tensor. Exporters compute Reshape targets this way;
passes use it to prove what a Reshape does without knowing the sizes."""
from __future__ import annotations

from ..ir import Graph, Node

DimRef = tuple[str, int]
Dim = int | DimRef


def rank_of(graph: Graph, name: str) -> int | None:
    t = graph.tensors.get(name)
    if t is not None and t.shape is not None:
        return len(t.shape)
    sym = graph.symbolic_shapes.get(name)
    return None if sym is None else len(sym)


def _const_ints(graph: Graph, name: str) -> list[int] | None:
    v = graph.constant(name) if name else None
    if v is None or v.ndim > 1 or v.dtype.kind not in "iu":
        return None
    return [int(x) for x in v.reshape(-1)]


def shape_dims(graph: Graph, producers: dict[str, Node], name: str, _depth: int = 0) -> list[Dim] | None:
    """The elements of the 1-D integer tensor `name`, or None when they cannot be read. A 0-d value (a
    Gather of one dim) is returned as a one-element list."""
    if _depth > 16:
        return None
    const = _const_ints(graph, name)
    if const is not None:
        return const
    node = producers.get(name)
    if node is None:
        return None

    def sub(i: int) -> list[Dim] | None:
        return shape_dims(graph, producers, node.inputs[i], _depth + 1) if i < len(node.inputs) else None

    op = node.op_type
    if op == "Shape":
        rank = rank_of(graph, node.inputs[0])
        if rank is None:
            return None
        start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
        dims = list(range(rank))[start:None if end is None else int(end)]
        return [(node.inputs[0], d) for d in dims]
    if op == "Concat":
        out: list[Dim] = []
        for i in range(len(node.inputs)):
            part = sub(i)
            if part is None:
                return None
            out += part
        return out
    if op == "Slice":
        data = sub(0)
        starts, ends = _const_ints(graph, node.inputs[1]), _const_ints(graph, node.inputs[2])
        axes = _const_ints(graph, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else [0]
        steps = _const_ints(graph, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else [1]
        if data is None or starts is None or ends is None or axes not in ([0], [-1]) or steps != [1]:
            return None
        if len(starts) != 1 or len(ends) != 1:
            return None
        return data[starts[0]:ends[0]]   # Python slicing clamps like ONNX Slice for step 1
    if op == "Gather":
        data, idx = sub(0), _const_ints(graph, node.inputs[1])
        if data is None or idx is None or len(idx) != 1 or int(node.attrs.get("axis", 0)) != 0:
            return None
        i = idx[0]
        return [data[i]] if -len(data) <= i < len(data) else None
    if op in ("Unsqueeze", "Squeeze", "Cast"):
        return sub(0)   # 0-d <-> 1-d of one dim; int64 casts of dims
    return None
