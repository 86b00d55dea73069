"""Merges the Q, K and V projections of a fused Attention into one GEMM.

After attention fusion, BERT/ViT/Whisper/GPT-2/Qwen2 attention reads

    q = Reshape(MatMul(x, Wq [, bq]), [B, S, Hq, D])      (likewise k with Hkv heads, v with Hkv heads)
    Attention(q, k, v [, mask])                          (all three in BSND layout)

which becomes

    qkv = MatMul(x, [Wq | Wk | Wv] [, [bq | bk | bv]])    (one [B, S, (Hq + 2 Hkv) D] product)
    Attention(qkv, -, -, [, mask])                        (packed: Q, K, V read in place from qkv's rows)

One wide GEMM packs x once instead of three times and keeps more columns per thread. It fires only when the
three projections read the same 3-D float32 input, have constant 2-D weights (and constant biases, or none),
no other epilogue, no other readers, and each Reshape provably splits only the last dim: its target is
[d0, d1, H, D] with H and D constants and d0, d1 the projection's own first two dims (same declared symbol or
size). With the output in BSND layout, the Attention's readers must all be Reshapes, since a packed Attention
writes [B, S, Hq * Dv] instead of [B, S, Hq, Dv].
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .shape_expressions import shape_dims


def _dim_identity(graph: Graph, ref) -> int | str | None:
    """What is known about one dim: a static size or a declared symbol (None: nothing)."""
    if isinstance(ref, int):
        return ref if ref > 0 else None
    tensor, axis = ref
    sym = graph.symbolic_shapes.get(tensor)
    if sym is not None and axis < len(sym) and sym[axis] is not None:
        return sym[axis]
    shape = graph.tensors[tensor].shape if tensor in graph.tensors else None
    if shape is not None and axis < len(shape) and shape[axis] >= 0:
        return shape[axis]
    return None


class _Merger:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()

    def only_reader(self, name: str, node: Node) -> bool:
        return name not in self.graph.outputs and [id(n) for n in self.consumers.get(name, [])] == [id(node)]

    def projection(self, name: str, attention: Node) -> dict | None:
        """The (Reshape, MatMul, input, weight, bias, heads, head size) behind one BSND operand."""
        g = self.graph
        reshape = self.producers.get(name)
        if reshape is None or reshape.op_type != "Reshape" or not self.only_reader(name, attention):
            return None
        mm = self.producers.get(reshape.inputs[0])
        if mm is None or mm.op_type != "MatMul" or mm.attrs.get("activation") or not self.only_reader(mm.outputs[0], reshape):
            return None
        if len(mm.inputs) > 3 and mm.inputs[3]:
            return None
        x, w = mm.inputs[0], g.constant(mm.inputs[1])
        bias = g.constant(mm.inputs[2]) if len(mm.inputs) > 2 and mm.inputs[2] else None
        if w is None or w.ndim != 2 or w.dtype != np.float32 or (len(mm.inputs) > 2 and mm.inputs[2] and bias is None):
            return None
        dims = shape_dims(g, self.producers, reshape.inputs[1])
        if dims is None or len(dims) != 4 or not isinstance(dims[3], int) or dims[3] <= 0:
            return None
        size = dims[3]
        heads = w.shape[1] // size if dims[2] == -1 else dims[2]   # view(b, s, -1, head_dim)
        if not isinstance(heads, int) or heads <= 0 or heads * size != w.shape[1]:
            return None
        out = mm.outputs[0]
        # The Reshape keeps the product's first two dims: each is proven equal, or is the one -1 left once the
        # other dims are (view(b, -1, heads, head_dim)).
        proven = [_dim_identity(g, (out, axis)) is not None and _dim_identity(g, dims[axis]) == _dim_identity(
            g, (out, axis)) for axis in (0, 1)]
        inferred = [dims[axis] == -1 and dims[2] != -1 and proven[1 - axis] for axis in (0, 1)]
        if not all(p or i for p, i in zip(proven, inferred)):
            return None
        return {"reshape": reshape, "matmul": mm, "x": x, "w": w, "bias": bias, "heads": heads, "size": size}

    def merge(self, attention: Node) -> bool:
        g = self.graph
        a = attention.attrs
        if len(attention.inputs) < 3 or not all(attention.inputs[:3]) or \
                (a.get("q_layout"), a.get("k_layout"), a.get("v_layout")) != ("BSND", "BSND", "BSND"):
            return False
        if len(attention.inputs) > 4 or len(attention.outputs) > 1:   # a KV cache appends K and V as given
            return False
        parts = [self.projection(n, attention) for n in attention.inputs[:3]]
        if any(p is None for p in parts) or len({id(p["matmul"]) for p in parts}) != 3:
            return False
        q, k, v = parts
        x = q["x"]
        t = g.tensors.get(x)
        if k["x"] != x or v["x"] != x or t is None or t.dtype != np.float32 or t.shape is None or len(t.shape) != 3:
            return False
        if not (q["size"] == k["size"] == v["size"]) or k["heads"] != v["heads"] or q["heads"] % k["heads"]:
            return False
        if len({p["w"].shape[0] for p in parts}) != 1:
            return False
        out = attention.outputs[0]
        if a.get("out_layout") == "BSND" and (out in g.outputs or not all(
                r.op_type == "Reshape" and r.inputs[0] == out for r in self.consumers.get(out, []))):
            return False
        weight = np.concatenate([p["w"] for p in parts], axis=1)
        inputs = [x, g.add_constant(q["matmul"].name + "_qkv_weight", weight)]
        if any(p["bias"] is not None for p in parts):
            bias = np.concatenate([p["bias"] if p["bias"] is not None else np.zeros(p["w"].shape[1], np.float32)
                                   for p in parts])
            inputs.append(g.add_constant(q["matmul"].name + "_qkv_bias", bias.astype(np.float32)))
        packed = g.unique_name(q["matmul"].outputs[0] + "_qkv")
        g.tensors[packed] = type(t)(packed, np.dtype(np.float32), [t.shape[0], t.shape[1], weight.shape[1]])
        merged = Node(q["matmul"].name + "_qkv", "MatMul", inputs, [packed], {})
        dead = {id(p[key]) for p in parts for key in ("reshape", "matmul")}
        g.nodes = [n for n in g.nodes if id(n) not in dead]
        g.nodes.insert(g.nodes.index(attention), merged)
        attention.inputs = [packed, "", ""] + attention.inputs[3:]
        attention.attrs = {**a, "q_num_heads": q["heads"], "kv_num_heads": k["heads"]}
        return True


def merge_qkv_projections(graph: Graph) -> int:
    """Run after dead-code removal: shape computations attention fusion left unread still read the projections."""
    fired = 0
    for node in [n for n in graph.nodes if n.op_type == "Attention"]:
        if _Merger(graph).merge(node):
            fired += 1
    return fired
