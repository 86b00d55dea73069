"""Fuses an activation into the Conv or Gemm that feeds it (the kernels apply it in their epilogue,
while the output tile is still in cache): Relu, Clip(0, 6), Sigmoid, Tanh, HardSwish."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node


def _activation(graph: Graph, node: Node) -> str | None:
    if node.op_type == "Relu":
        return "relu"
    if node.op_type in ("Sigmoid", "Tanh"):
        return node.op_type.lower()
    if node.op_type == "HardSwish":
        return "hard_swish"
    if node.op_type == "Clip":
        lo = graph.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        hi = graph.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        lo = float(lo) if lo is not None and lo.size == 1 else node.attrs.get("min")
        hi = float(hi) if hi is not None and hi.size == 1 else node.attrs.get("max")
        if lo == 0.0 and hi == 6.0 and all(not i or graph.constant(i) is not None for i in node.inputs[1:]):
            return "relu6"
    return None


def fuse_activations(graph: Graph) -> int:
    fused = 0
    consumers = graph.consumers()
    producers = graph.producers()
    for act in list(graph.nodes):
        kind = _activation(graph, act)
        if kind is None or graph.tensors[act.inputs[0]].dtype != np.float32:
            continue
        src = act.inputs[0]
        prev = producers.get(src)
        if (prev is None or prev.op_type not in ("Conv", "Gemm") or prev.attrs.get("activation")
                or len(consumers.get(src, [])) != 1 or src in graph.outputs):
            continue
        prev.attrs["activation"] = kind
        prev.outputs = [act.outputs[0]]
        graph.nodes.remove(act)
        fused += 1
        consumers = graph.consumers()
        producers = graph.producers()
    return fused
