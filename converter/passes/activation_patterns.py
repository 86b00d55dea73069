"""Recognises GELU exported as elementary ops, `x * 0.5 * (1 + erf(x / sqrt 2))` in the operand orders
PyTorch and transformers emit, and replaces it with one `Gelu` node (which activation_fusion can then move
into the producing MatMul/Gemm/Conv); and its tanh approximation (GPT-2's `gelu_new`,
`0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`) with one `Gelu` with tanh_approximation. It checks the constants (to 1e-6 relative) and that no intermediate
value has another reader. SiLU (`x * sigmoid(x)`) is matched by activation_fusion directly."""
from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node
from .pattern_utils import other_operand as _other
from .pattern_utils import scalar as _scalar
from .pattern_utils import single_use as _single_use

_TOL = 1e-6


def _half_x_times_one_plus(graph: Graph, consumers, producers, x: str, f: Node,
                           dead: list[Node]) -> tuple[str, list[Node], str] | None:
    """The shared tail of both GELU forms: 0.5 * x * (1 + f) in the operand orders exporters write,
    from f's node. Returns (x, nodes to remove, output name)."""
    if not _single_use(graph, consumers, f.outputs[0]):
        return None
    (add,) = consumers[f.outputs[0]]
    one = _other(add, f.outputs[0]) if add.op_type == "Add" else None
    if one is None or _scalar(graph, one) is None or abs(_scalar(graph, one) - 1.0) > _TOL:
        return None
    if not _single_use(graph, consumers, add.outputs[0]):
        return None
    (mul1,) = consumers[add.outputs[0]]
    if mul1.op_type != "Mul":
        return None
    partner = _other(mul1, add.outputs[0])
    if partner == x:
        # x * (1 + f) then * 0.5
        if not _single_use(graph, consumers, mul1.outputs[0]):
            return None
        (mul2,) = consumers[mul1.outputs[0]]
        half = _other(mul2, mul1.outputs[0]) if mul2.op_type == "Mul" else None
        if half is None or _scalar(graph, half) is None or abs(_scalar(graph, half) - 0.5) > _TOL:
            return None
        return x, dead + [add, mul1, mul2], mul2.outputs[0]
    # (x * 0.5) * (1 + f)
    halved = producers.get(partner) if partner else None
    if halved is None or halved.op_type != "Mul" or not _single_use(graph, consumers, partner):
        return None
    h = _other(halved, x)
    if h is None or _scalar(graph, h) is None or abs(_scalar(graph, h) - 0.5) > _TOL:
        return None
    return x, dead + [add, halved, mul1], mul1.outputs[0]


def _scaled_by(graph: Graph, node: Node | None, want: float) -> str | None:
    """v when node is Mul(v, c) or Mul(c, v) with the constant c == want (to _TOL relative)."""
    if node is None or node.op_type != "Mul" or len(node.inputs) != 2:
        return None
    for v, c in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        value = _scalar(graph, c)
        if value is not None and abs(value - want) <= _TOL * abs(want):
            return v
    return None


def _match_gelu(graph: Graph, consumers, producers, erf: Node) -> tuple[str, list[Node], str] | None:
    """From an Erf node: (x, nodes to remove, output name) of x * 0.5 * (1 + erf(x / sqrt2))."""
    scaled = producers.get(erf.inputs[0])
    if scaled is None or scaled.op_type not in ("Div", "Mul") or not _single_use(graph, consumers, erf.inputs[0]):
        return None
    x = scaled.inputs[0]
    c = _scalar(graph, scaled.inputs[1])
    if scaled.op_type == "Mul" and c is None:   # constant first
        x, c = scaled.inputs[1], _scalar(graph, scaled.inputs[0])
    want = math.sqrt(2) if scaled.op_type == "Div" else 1 / math.sqrt(2)
    if c is None or abs(c - want) > _TOL * want:
        return None
    return _half_x_times_one_plus(graph, consumers, producers, x, erf, [scaled, erf])


def _match_tanh_gelu(graph: Graph, consumers, producers, tanh: Node) -> tuple[str, list[Node], str] | None:
    """From a Tanh node: the tanh approximation (GPT-2's gelu_new),
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    outer = producers.get(tanh.inputs[0])
    inner = _scaled_by(graph, outer, math.sqrt(2 / math.pi))
    add = producers.get(inner) if inner else None
    if (add is None or add.op_type != "Add" or not _single_use(graph, consumers, tanh.inputs[0])
            or not _single_use(graph, consumers, inner)):
        return None
    for x, cubic_term in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        coef = producers.get(cubic_term)
        cube_name = _scaled_by(graph, coef, 0.044715)
        cube = producers.get(cube_name) if cube_name else None
        if cube is None or not _single_use(graph, consumers, cubic_term) or not _single_use(graph, consumers, cube_name):
            continue
        if cube.op_type == "Pow" and cube.inputs[0] == x and _scalar(graph, cube.inputs[1]) == 3.0:
            return _half_x_times_one_plus(graph, consumers, producers, x, tanh, [cube, coef, add, outer, tanh])
    return None


def fuse_gelu(graph: Graph) -> int:
    fused = 0
    consumers, producers = graph.consumers(), graph.producers()   # rebuilt only after a rewrite
    for f in [n for n in graph.nodes if n.op_type in ("Erf", "Tanh")]:
        if f not in graph.nodes:
            continue
        tanh_form = f.op_type == "Tanh"
        m = (_match_tanh_gelu if tanh_form else _match_gelu)(graph, consumers, producers, f)
        if m is None or graph.tensors[m[0]].dtype != np.float32:
            continue
        x, dead, out = m
        first = min(graph.nodes.index(n) for n in dead)
        for node in dead:
            graph.nodes.remove(node)
        graph.nodes.insert(min(first, len(graph.nodes)),
                           Node(name=f.name.rsplit("/", 1)[0] + "/Gelu" if "/" in f.name else f.name + "_gelu",
                                op_type="Gelu", inputs=[x], outputs=[out], attrs={"tanh_approximation": tanh_form}))
        fused += 1
        consumers, producers = graph.consumers(), graph.producers()
    return fused
