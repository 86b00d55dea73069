"""Folds the gating multiply of a gated linear unit into the MatMul that produces one of its operands.

SwiGLU (Llama, Qwen2, Mistral: `down(silu(gate(x)) * up(x))`) and GeGLU reach this pass as two MatMuls, the gate's
with its activation already in its epilogue (activation_fusion), and a `Mul` of their outputs. The Mul becomes the
fifth input of the other MatMul (format 1.9), which the GEMM multiplies into each output tile after its bias,
addend and activation, while the tile is in registers: one pass over the MLP's widest tensor less.

It fires when the MatMul has a constant 2-D weight (the fused kernel's case), its output is read by the Mul only,
both are float32 and the two operands provably have the same shape (static and equal, the same dims by the
exporter's symbolic names, or two products of one input by weights of one shape): the multiplier does not
broadcast. A MatMul without an activation is preferred (the up projection), so the gate keeps its activation in
its own epilogue.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node


def _same_shape(graph: Graph, a: str, b: str) -> bool:
    ta, tb = graph.tensors.get(a), graph.tensors.get(b)
    if ta is None or tb is None or ta.shape is None or tb.shape is None or len(ta.shape) != len(tb.shape):
        return False
    if all(d >= 0 for d in ta.shape) and ta.shape == tb.shape:
        return True
    sa, sb = graph.symbolic_shapes.get(a), graph.symbolic_shapes.get(b)
    return (sa is not None and sb is not None and len(sa) == len(sb) and None not in sa and sa == sb
            and all(x == y or -1 in (x, y) for x, y in zip(ta.shape, tb.shape)))


def _twin_products(graph: Graph, producers, a: str, b: str) -> bool:
    """Whether a and b are MatMuls of the same input by constant weights of one 2-D shape, each with at most a 1-D
    bias: their shapes are equal whatever the input's (a decoder graph built for any number of tokens, whose
    activations' shapes are not inferred)."""
    ma, mb = producers.get(a), producers.get(b)
    if ma is None or mb is None or ma.op_type != "MatMul" or mb.op_type != "MatMul" or ma.inputs[0] != mb.inputs[0]:
        return False
    wa, wb = graph.constant(ma.inputs[1]), graph.constant(mb.inputs[1])
    if wa is None or wb is None or wa.ndim != 2 or wa.shape != wb.shape:
        return False
    for mm in (ma, mb):
        if len(mm.inputs) > 3:
            return False
        if len(mm.inputs) == 3 and mm.inputs[2]:
            bias = graph.constant(mm.inputs[2])
            if bias is None or bias.ndim > 1 or bias.size not in (1, wa.shape[1]):
                return False
    return True


def _foldable(graph: Graph, consumers, producers, product: str, mul: Node) -> Node | None:
    mm = producers.get(product)
    if mm is None or mm.op_type != "MatMul" or len(mm.inputs) > 4 or len(mm.outputs) != 1:
        return None
    w = graph.constant(mm.inputs[1])
    if w is None or w.ndim != 2 or consumers.get(product) != [mul] or product in graph.outputs:
        return None
    return mm


def fuse_gated_linear_units(graph: Graph) -> int:
    fused = 0
    consumers, producers = graph.consumers(), graph.producers()
    for mul in [n for n in graph.nodes if n.op_type == "Mul"]:
        if len(mul.inputs) != 2 or mul.inputs[0] == mul.inputs[1]:
            continue
        if any(graph.tensors[i].dtype != np.float32 for i in mul.inputs):
            continue
        if not _same_shape(graph, *mul.inputs) and not _twin_products(graph, producers, *mul.inputs):
            continue
        candidates = []
        for product, other in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
            mm = _foldable(graph, consumers, producers, product, mul)
            if mm is not None:
                candidates.append((bool(mm.attrs.get("activation")), mm, other))
        if not candidates:
            continue
        _, mm, other = min(candidates, key=lambda c: c[0])
        mm.inputs = list(mm.inputs) + [""] * (4 - len(mm.inputs)) + [other]
        mm.outputs = list(mul.outputs)
        graph.nodes.remove(mul)
        fused += 1
        consumers, producers = graph.consumers(), graph.producers()
    if fused:
        graph.topological_sort()
    return fused
