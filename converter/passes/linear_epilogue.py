"""Folds what follows a constant-weight MatMul into it: `MatMul(x, W) + b` takes `b` as its bias input
(the kernel adds it in the GEMM epilogue), and a following per-column scale `* s` (ConvNeXt's layer scale,
a folded BatchNorm) is multiplied into W's columns and the bias. Fires only for a constant 2-D W, a
constant b / s of N values broadcast along the last dim, and single-reader intermediates."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node


def _per_column(graph: Graph, name: str, n: int) -> np.ndarray | None:
    """A constant that broadcasts as one value per last-dim column: shape (N,), (1,...,1,N) or a scalar."""
    v = graph.constant(name)
    if v is None or v.dtype != np.float32:
        return None
    if v.size == 1:
        return np.full(n, v.reshape(-1)[0], np.float32)
    if v.shape[-1] != n or v.size != n:
        return None
    return v.reshape(n)


def _follower(graph: Graph, consumers, node: Node, op: str) -> tuple[Node, str] | None:
    """The single reader of node's output when it is `op` with a constant other operand."""
    out = node.outputs[0]
    users = consumers.get(out, [])
    if len(users) != 1 or out in graph.outputs or users[0].op_type != op or len(users[0].inputs) != 2:
        return None
    nxt = users[0]
    other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
    return (nxt, other) if other != out else None


def fold_linear_epilogues(graph: Graph) -> int:
    fired = 0
    for mm in [n for n in graph.nodes if n.op_type == "MatMul"]:
        w = graph.constant(mm.inputs[1])
        if w is None or w.ndim != 2 or w.dtype != np.float32 or mm.attrs.get("activation"):
            continue
        n = w.shape[1]
        consumers = graph.consumers()
        bias = graph.constant(mm.inputs[2]) if len(mm.inputs) > 2 and mm.inputs[2] else None
        # x @ W + b
        if bias is None and (f := _follower(graph, consumers, mm, "Add")) is not None:
            add, other = f
            b = _per_column(graph, other, n)
            out_rank = len(graph.tensors[mm.outputs[0]].shape or [])
            b_rank = len(graph.tensors[other].shape or [])
            if b is not None and b_rank <= max(out_rank, 1):   # must not add batch dims
                bias = b.copy()
                mm.inputs = [mm.inputs[0], mm.inputs[1], graph.add_constant(f"{mm.name}_bias", bias)]
                mm.outputs = [add.outputs[0]]
                graph.nodes.remove(add)
                fired += 1
                consumers = graph.consumers()
        # (x @ W + b) * s  ->  x @ (W s) + b s
        if (f := _follower(graph, consumers, mm, "Mul")) is not None:
            mul, other = f
            s = _per_column(graph, other, n)
            out_rank = len(graph.tensors[mm.outputs[0]].shape or [])
            if s is not None and len(graph.tensors[other].shape or []) <= max(out_rank, 1):
                mm.inputs = list(mm.inputs)
                mm.inputs[1] = graph.add_constant(f"{mm.name}_scaled_weight", (w * s).astype(np.float32))
                if bias is not None:
                    mm.inputs[2] = graph.add_constant(f"{mm.name}_scaled_bias", (bias * s).astype(np.float32))
                mm.outputs = [mul.outputs[0]]
                graph.nodes.remove(mul)
                fired += 1
    return fired
