"""Recognises RMSNorm written out as elementary ops and replaces it with one `RMSNormalization` node:

    x * 1/sqrt(mean(x^2) + eps) [* weight]      (Qwen2, Llama, Mistral: Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul)
    x / sqrt(mean(x^2) + eps) [* weight]        (... Sqrt, Div)
    x * (1 / sqrt(mean(x^2) + eps)) [* weight]  (T5: ... Sqrt, Div(1, .), Mul)
    x * (mean(x^2) + eps) ^ -0.5 [* weight]     (Pow -0.5 in place of Sqrt + Reciprocal)

with x^2 as `Pow(x, 2)` or `Mul(x, x)`, the mean over the trailing axes (keepdims) and the weight a constant
that broadcasts to the normalised shape only. It fires only when every intermediate has no other reader,
the constants are what they must be (to 1e-6 relative), the mean covers exactly the trailing axes, and x is
float32. (float16/bfloat16 graphs are lowered to float32 compute before this pass, so they qualify; a graph
still computing in reduced precision would have rounding points the float32 kernel does not reproduce.)
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node

_TOL = 1e-6


def _scalar(graph: Graph, name: str) -> float | None:
    v = graph.constant(name)
    if v is None or v.size != 1:
        return None
    return float(v.reshape(-1)[0])


def _close(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= _TOL * max(1.0, abs(want))


def _other(node: Node, name: str) -> str | None:
    """The operand of a binary node that is not `name` (None when both are `name`)."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    a, b = node.inputs
    if a == b:
        return None
    return b if a == name else a


class _Matcher:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.consumers = graph.consumers()
        self.producers = graph.producers()

    def only_reader(self, name: str) -> Node | None:
        """The single node reading `name`, if it is a graph-internal value read exactly once."""
        readers = self.consumers.get(name, [])
        if len(readers) != 1 or name in self.graph.outputs:
            return None
        return readers[0]

    def square_of(self, node: Node) -> str | None:
        """x when node computes x^2 (Pow(x, 2) or Mul(x, x))."""
        if node.op_type == "Pow" and len(node.inputs) == 2 and _close(_scalar(self.graph, node.inputs[1]), 2.0):
            return node.inputs[0]
        if node.op_type == "Mul" and len(node.inputs) == 2 and node.inputs[0] == node.inputs[1]:
            return node.inputs[0]
        return None

    def trailing_axis(self, reduce: Node, rank: int) -> int | None:
        """The first normalised axis when the ReduceMean keeps dims and covers exactly the trailing ones."""
        if not reduce.attrs.get("keepdims", True) or len(reduce.inputs) < 2:
            return None
        axes = self.graph.constant(reduce.inputs[1])
        if axes is None or axes.size == 0:
            return None
        norm = sorted({int(a) % rank for a in axes.reshape(-1)})
        if norm != list(range(norm[0], rank)):
            return None
        return norm[0]

    def match(self, mean: Node) -> tuple[str, int, float, str | None, list[Node], str] | None:
        """From a ReduceMean: (x, axis, eps, weight or None, nodes to remove, output name)."""
        g = self.graph
        square = self.producers.get(mean.inputs[0])
        if square is None or self.only_reader(mean.inputs[0]) is not mean:
            return None
        x = self.square_of(square)
        t = g.tensors.get(x) if x else None
        if t is None or t.dtype != np.float32 or t.shape is None:
            return None
        axis = self.trailing_axis(mean, len(t.shape))
        if axis is None:
            return None
        add = self.only_reader(mean.outputs[0])
        eps = _scalar(g, _other(add, mean.outputs[0]) or "") if add is not None and add.op_type == "Add" else None
        if eps is None or not eps >= 0.0:
            return None
        dead = [square, mean, add]
        step = self.only_reader(add.outputs[0])
        if step is None:
            return None
        if step.op_type == "Sqrt":          # x / sqrt(.) or x * reciprocal(sqrt(.))
            dead.append(step)
            nxt = self.only_reader(step.outputs[0])
            if nxt is not None and nxt.op_type == "Div" and nxt.inputs == [x, step.outputs[0]]:
                normed = nxt
            elif nxt is not None and (nxt.op_type == "Reciprocal" or (
                    nxt.op_type == "Div" and nxt.inputs[1] == step.outputs[0] and _close(_scalar(g, nxt.inputs[0]), 1.0))):
                dead.append(nxt)
                normed = self.only_reader(nxt.outputs[0])
                if normed is None or normed.op_type != "Mul" or _other(normed, nxt.outputs[0]) != x:
                    return None
            else:
                return None
        elif step.op_type == "Pow" and step.inputs[0] == add.outputs[0] and _close(_scalar(g, step.inputs[1]), -0.5):
            normed = self.only_reader(step.outputs[0])
            dead.append(step)
            if normed is None or normed.op_type != "Mul" or _other(normed, step.outputs[0]) != x:
                return None
        else:
            return None
        dead.append(normed)
        out, weight = normed.outputs[0], None
        scale_node = self.only_reader(out)
        if scale_node is not None and scale_node.op_type == "Mul":
            w = _other(scale_node, out)
            value = g.constant(w) if w else None
            norm_shape = list(t.shape[axis:])
            if value is not None and value.dtype == np.float32 and self._broadcasts_within(value.shape, norm_shape):
                weight = w
                dead.append(scale_node)
                out = scale_node.outputs[0]
        return x, axis, eps, weight, dead, out

    @staticmethod
    def _broadcasts_within(shape: tuple[int, ...], norm_shape: list) -> bool:
        """Whether a weight of `shape` broadcasts to the normalised dims without touching the others."""
        if len(shape) > len(norm_shape) and any(d != 1 for d in shape[: len(shape) - len(norm_shape)]):
            return False
        tail = shape[-len(norm_shape):] if norm_shape else ()
        return all(d == 1 or (isinstance(n, int) and n == d) for d, n in zip(tail[::-1], norm_shape[::-1]))


def fuse_rms_norm(graph: Graph) -> int:
    fused = 0
    for mean in [n for n in graph.nodes if n.op_type == "ReduceMean"]:
        if mean not in graph.nodes:
            continue
        m = _Matcher(graph).match(mean)
        if m is None:
            continue
        x, axis, eps, weight, dead, out = m
        norm_shape = graph.tensors[x].shape[axis:]
        if weight is None:
            if not all(isinstance(d, int) and d > 0 for d in norm_shape):
                continue   # the kernel needs a scale; without a static shape there is none to make
            weight = graph.add_constant(f"{mean.name}_ones", np.ones(norm_shape, np.float32))
        elif graph.constant(weight).ndim > len(norm_shape):   # leading 1s beyond the normalised dims
            value = graph.constant(weight)
            weight = graph.add_constant(f"{weight}_norm", value.reshape(value.shape[value.ndim - len(norm_shape):]))
        first = min(graph.nodes.index(n) for n in dead)
        for node in dead:
            graph.nodes.remove(node)
        name = mean.name.rsplit("/", 1)[0] + "/RMSNormalization" if "/" in mean.name else mean.name + "_rmsnorm"
        graph.nodes.insert(first, Node(name=name, op_type="RMSNormalization", inputs=[x, weight], outputs=[out],
                                       attrs={"axis": axis, "epsilon": eps}))
        fused += 1
    return fused
