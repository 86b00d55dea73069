"""Rewrites a MatMul whose inner dimension is 1 (an outer product, as rotary embeddings compute
`inv_freq[..., None] @ positions[..., None, :]`) as a broadcasting Mul: every output is one product, so the
result is bit-identical and no GEMM is set up for it. Needs both operands of rank >= 2 with a static inner
dim of 1 and no fused epilogue."""
from __future__ import annotations

from ..ir import Graph


def rewrite_unit_k_matmul(graph: Graph) -> int:
    rewritten = 0
    for node in graph.nodes:
        if node.op_type != "MatMul" or len(node.inputs) != 2 or node.attrs.get("activation"):
            continue
        a, b = (graph.tensors.get(name) for name in node.inputs)
        if a is None or b is None or a.shape is None or b.shape is None or len(a.shape) < 2 or len(b.shape) < 2:
            continue
        if a.shape[-1] != 1 or b.shape[-2] != 1:
            continue
        node.op_type = "Mul"
        node.attrs = {}
        rewritten += 1
    return rewritten
