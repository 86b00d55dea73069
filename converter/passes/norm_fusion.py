"""Recognises LayerNorm and RMSNorm written out as elementary ops and replaces each with one node.

LayerNorm (PyTorch below opset 17, Keras, hand-written modules), into `LayerNormalization`:

    d = x - mean(x);  d / sqrt(mean(d^2) + eps) [* scale] [+ bias]

RMSNorm, into `RMSNormalization`:

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
from .pattern_utils import PatternMatcher, close
from .pattern_utils import other_operand as _other
from .pattern_utils import scalar as _scalar

_TOL = 1e-6


def _close(value: float | None, want: float) -> bool:
    return close(value, want, _TOL)


class _Matcher(PatternMatcher):
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

    def mean_square(self, mean: Node) -> tuple[str, Node, int] | None:
        """(v, square node, first axis) when `mean` is ReduceMean(v^2) over v's trailing axes, read once."""
        square = self.producers.get(mean.inputs[0])
        if square is None or self.only_reader(mean.inputs[0]) is not mean:
            return None
        v = self.square_of(square)
        t = self.graph.tensors.get(v) if v else None
        if t is None or t.dtype != np.float32 or t.shape is None:
            return None
        axis = self.trailing_axis(mean, len(t.shape))
        return None if axis is None else (v, square, axis)

    def normalised(self, var: Node, v: str) -> tuple[float, list[Node], Node] | None:
        """From the mean-square node `var`: (eps, nodes, last node) of v / sqrt(var + eps), in any of the
        exported forms (Div by Sqrt; Mul by Reciprocal(Sqrt), by Div(1, Sqrt) or by Pow(., -0.5))."""
        g = self.graph
        add = self.only_reader(var.outputs[0])
        eps = _scalar(g, _other(add, var.outputs[0]) or "") if add is not None and add.op_type == "Add" else None
        if eps is None or not eps >= 0.0:
            return None
        nodes = [add]
        step = self.only_reader(add.outputs[0])
        if step is None:
            return None
        if step.op_type == "Sqrt":
            nodes.append(step)
            nxt = self.only_reader(step.outputs[0])
            if nxt is not None and nxt.op_type == "Div" and nxt.inputs == [v, step.outputs[0]]:
                return eps, nodes + [nxt], nxt
            if nxt is None or not (nxt.op_type == "Reciprocal" or (
                    nxt.op_type == "Div" and nxt.inputs[1] == step.outputs[0] and _close(_scalar(g, nxt.inputs[0]), 1.0))):
                return None
            nodes.append(nxt)
            inv = nxt
        elif step.op_type == "Pow" and step.inputs[0] == add.outputs[0] and _close(_scalar(g, step.inputs[1]), -0.5):
            nodes.append(step)
            inv = step
        else:
            return None
        normed = self.only_reader(inv.outputs[0])
        if normed is None or normed.op_type != "Mul" or _other(normed, inv.outputs[0]) != v:
            return None
        return eps, nodes + [normed], normed

    def affine(self, node: Node, op: str, norm_shape: list) -> tuple[str, Node] | None:
        """(constant, node) when the only reader of node's output is `op` with a float32 constant that
        broadcasts within the normalised dims (a per-feature scale or shift)."""
        nxt = self.only_reader(node.outputs[0])
        if nxt is None or nxt.op_type != op:
            return None
        c = _other(nxt, node.outputs[0])
        value = self.graph.constant(c) if c else None
        if value is None or value.dtype != np.float32 or not self._broadcasts_within(value.shape, norm_shape):
            return None
        return c, nxt

    def match_rms(self, mean: Node) -> tuple[str, int, float, list[str | None], list[Node], str] | None:
        """From the ReduceMean of x^2: (x, axis, eps, [weight or None], nodes to remove, output name)."""
        ms = self.mean_square(mean)
        if ms is None:
            return None
        x, square, axis = ms
        tail = self.normalised(mean, x)
        if tail is None:
            return None
        eps, nodes, last = tail
        dead = [square, mean] + nodes
        weight = self.affine(last, "Mul", list(self.graph.tensors[x].shape[axis:]))
        if weight is not None:
            dead.append(weight[1])
            last = weight[1]
        return x, axis, eps, [weight[0] if weight else None], dead, last.outputs[0]

    def match_layer(self, mean: Node) -> tuple[str, int, float, list[str | None], list[Node], str] | None:
        """From the ReduceMean of x: (x, axis, eps, [scale or None, bias or None], nodes, output name) of
        d = x - mean(x); d / sqrt(mean(d^2) + eps) [* scale] [+ bias]."""
        g = self.graph
        x = mean.inputs[0]
        t = g.tensors.get(x)
        if t is None or t.dtype != np.float32 or t.shape is None or mean.outputs[0] in g.outputs:
            return None
        axis = self.trailing_axis(mean, len(t.shape))
        readers = self.consumers.get(mean.outputs[0], [])
        if axis is None or len(readers) != 1 or readers[0].op_type != "Sub" or readers[0].inputs != [x, mean.outputs[0]]:
            return None
        sub = readers[0]
        d = sub.outputs[0]
        d_readers = self.consumers.get(d, [])
        if d in g.outputs or len(d_readers) != 2:
            return None
        square = next((n for n in d_readers if self.square_of(n) == d), None)
        var = self.only_reader(square.outputs[0]) if square is not None else None
        if var is None or var.op_type != "ReduceMean" or self.mean_square(var) is None or self.mean_square(var)[2] != axis:
            return None
        tail = self.normalised(var, d)
        if tail is None or tail[2] not in d_readers:
            return None
        eps, nodes, last = tail
        dead = [mean, sub, square, var] + nodes
        norm_shape = list(t.shape[axis:])
        params: list[str | None] = [None, None]
        scale = self.affine(last, "Mul", norm_shape)
        if scale is not None:
            params[0], last = scale[0], scale[1]
            dead.append(last)
        shift = self.affine(last, "Add", norm_shape)
        if shift is not None:
            params[1], last = shift[0], shift[1]
            dead.append(last)
        return x, axis, eps, params, dead, last.outputs[0]

    @staticmethod
    def _broadcasts_within(shape: tuple[int, ...], norm_shape: list) -> bool:
        """Whether a weight of `shape` broadcasts to the normalised dims without touching the others."""
        if len(shape) > len(norm_shape) and any(d != 1 for d in shape[: len(shape) - len(norm_shape)]):
            return False
        tail = shape[-len(norm_shape):] if norm_shape else ()
        return all(d == 1 or (isinstance(n, int) and n == d) for d, n in zip(tail[::-1], norm_shape[::-1]))


def _parameter(graph: Graph, name: str | None, norm_shape: list, fill: float, hint: str) -> str | None:
    """A scale/bias input of the normalised shape's rank: `name` trimmed of leading 1s, or a constant of
    `fill` when absent (None when that needs a shape that is not static)."""
    if name is None:
        if not all(isinstance(d, int) and d > 0 for d in norm_shape):
            return None
        return graph.add_constant(hint, np.full(norm_shape, fill, np.float32))
    value = graph.constant(name)
    if value.ndim > len(norm_shape):
        return graph.add_constant(f"{name}_norm", value.reshape(value.shape[value.ndim - len(norm_shape):]))
    return name


def _fuse(graph: Graph, op_type: str, match) -> int:
    fused = 0
    matcher = _Matcher(graph)   # producer/consumer maps, rebuilt only after a rewrite
    for mean in [n for n in graph.nodes if n.op_type == "ReduceMean"]:
        if mean not in graph.nodes:
            continue
        m = match(matcher, mean)
        if m is None:
            continue
        x, axis, eps, params, dead, out = m
        norm_shape = graph.tensors[x].shape[axis:]
        scale = _parameter(graph, params[0], norm_shape, 1.0, f"{mean.name}_ones")
        if scale is None:
            continue   # the kernels need a scale; without a static shape there is none to make
        inputs = [x, scale]
        if len(params) > 1 and params[1] is not None:
            inputs.append(_parameter(graph, params[1], norm_shape, 0.0, f"{mean.name}_zeros"))
        first = min(graph.nodes.index(n) for n in dead)
        for node in dead:
            graph.nodes.remove(node)
        name = (mean.name.rsplit("/", 1)[0] + "/" if "/" in mean.name else mean.name + "_") + op_type
        graph.nodes.insert(first, Node(name=name, op_type=op_type, inputs=inputs, outputs=[out],
                                       attrs={"axis": axis, "epsilon": eps}))
        fused += 1
        matcher = _Matcher(graph)
    return fused


def fuse_rms_norm(graph: Graph) -> int:
    return _fuse(graph, "RMSNormalization", _Matcher.match_rms)


def fuse_layer_norm(graph: Graph) -> int:
    return _fuse(graph, "LayerNormalization", _Matcher.match_layer)
