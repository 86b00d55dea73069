"""Fuses an activation into the Conv, Gemm or MatMul that feeds it (the kernels apply it in their
epilogue, while the output tile is still in cache): Relu, Clip(0, 6), Sigmoid, Tanh, HardSwish, Gelu
(erf form and tanh approximation), SiLU (`x * Sigmoid(x)`, two nodes) and QuickGELU (`x * Sigmoid(1.702 x)`,
three nodes: CLIP's activation, also what com.microsoft QuickGelu imports as). MatMul takes one only when its
weight is a constant 2-D matrix (the case its fused kernel handles)."""
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
    if node.op_type == "Gelu":
        return "gelu_tanh" if node.attrs.get("tanh_approximation") else "gelu"
    if node.op_type == "Clip":
        lo = graph.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        hi = graph.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        lo = float(lo) if lo is not None and lo.size == 1 else node.attrs.get("min")
        hi = float(hi) if hi is not None and hi.size == 1 else node.attrs.get("max")
        if lo == 0.0 and hi == 6.0 and all(not i or graph.constant(i) is not None for i in node.inputs[1:]):
            return "relu6"
    return None


def _can_take(graph: Graph, prev: Node | None) -> bool:
    if prev is None or prev.attrs.get("activation"):
        return False
    if prev.op_type in ("Conv", "Gemm"):
        return True
    if prev.op_type == "MatMul":
        w = graph.constant(prev.inputs[1])
        return w is not None and w.ndim == 2
    return False


def _silu(graph: Graph, consumers, src: str) -> tuple[list[Node], str] | None:
    """src read by exactly Sigmoid(src) and Mul(src, that): the two nodes and the Mul's output."""
    users = consumers.get(src, [])
    if len(users) != 2 or src in graph.outputs:
        return None
    sig = next((u for u in users if u.op_type == "Sigmoid"), None)
    mul = next((u for u in users if u.op_type == "Mul"), None)
    if sig is None or mul is None or sorted(mul.inputs) != sorted([src, sig.outputs[0]]):
        return None
    if len(consumers.get(sig.outputs[0], [])) != 1 or sig.outputs[0] in graph.outputs:
        return None
    return [sig, mul], mul.outputs[0]


def _quick_gelu(graph: Graph, consumers, src: str) -> tuple[list[Node], str] | None:
    """src read by exactly Mul(src, 1.702) and Mul(src, Sigmoid(that)): the three nodes and the last output."""
    users = consumers.get(src, [])
    if len(users) != 2 or src in graph.outputs or any(u.op_type != "Mul" or len(u.inputs) != 2 for u in users):
        return None
    for scale, gate in (users, users[::-1]):
        c = scale.inputs[1] if scale.inputs[0] == src else scale.inputs[0]
        alpha = graph.constant(c)
        if alpha is None or alpha.size != 1 or abs(float(alpha.reshape(-1)[0]) - 1.702) > 1e-6 * 1.702:
            continue
        sig_users = consumers.get(scale.outputs[0], [])
        if len(sig_users) != 1 or sig_users[0].op_type != "Sigmoid" or scale.outputs[0] in graph.outputs:
            continue
        sig = sig_users[0]
        if sorted(gate.inputs) != sorted([src, sig.outputs[0]]):
            continue
        if len(consumers.get(sig.outputs[0], [])) != 1 or sig.outputs[0] in graph.outputs:
            continue
        return [scale, sig, gate], gate.outputs[0]
    return None


def fuse_activations(graph: Graph) -> int:
    fused = 0
    consumers = graph.consumers()
    producers = graph.producers()
    for act in list(graph.nodes):
        if act not in graph.nodes:
            continue
        src = act.inputs[0] if act.inputs else ""
        if act.op_type == "Mul" and len(act.inputs) == 2 and not _can_take(graph, producers.get(src)):
            src = act.inputs[1]   # QuickGELU's Mul(1.702, x) or Mul(sigmoid, x)
        if not src or graph.tensors[src].dtype != np.float32:
            continue
        prev = producers.get(src)
        if not _can_take(graph, prev) or len(prev.outputs) != 1:
            continue
        kind = _activation(graph, act)
        if kind is not None and len(consumers.get(src, [])) == 1 and src not in graph.outputs:
            dead, out = [act], act.outputs[0]
        elif act.op_type == "Sigmoid" and (silu := _silu(graph, consumers, src)) is not None:
            kind, (dead, out) = "silu", silu
        elif act.op_type == "Mul" and (quick := _quick_gelu(graph, consumers, src)) is not None:
            kind, (dead, out) = "quick_gelu", quick
        else:
            continue
        prev.attrs["activation"] = kind
        prev.outputs = [out]
        for node in dead:
            graph.nodes.remove(node)
        fused += 1
        consumers = graph.consumers()
        producers = graph.producers()
    return fused
