"""Recognises scaled dot-product attention written as MatMul / Softmax / MatMul and replaces it with one
`Attention` node (the fused tile-by-tile kernel: no [queries x keys] matrix in memory).

The exported forms it reads (BERT, ViT, Whisper, GPT-2, Qwen2/Llama from `transformers`, hand-written modules):

    scores = MatMul(Q [* c1], K^T [* c2]) [* c3 | / c3] [+ mask]     (the mask may be MatMul's fused addend)
    p      = Softmax(scores, axis=-1)  [then Where(IsNaN(p), 0, p)]  (PyTorch's guard for fully masked rows)
    out    = MatMul(p, V)

with c1..c3 scalar constants (folded into the scale), Q as Transpose(q, [0, 2, 1, 3]) of a [B, S, N, D]
tensor or a [B, N, S, D] tensor, K^T as Transpose(k, [0, 2, 3, 1]) (BSND k) or Transpose(k, [0, 1, 3, 2])
(BNSD k) or any [B, N, D, L] tensor, V likewise. Grouped-query heads written as repeat_kv
(Unsqueeze(kv, 2) -> Expand -> Reshape merging the kv and repeat dims) read the un-repeated tensor when the
declared symbolic shapes prove the repeat. When the output's only reader is Transpose(out, [0, 2, 1, 3]), the
node writes that [B, S, N, Dv] layout itself and the Transpose goes.

It fires only on float32 tensors of known rank 4, a softmax over the last axis, scalar constant scales, a
mask of rank <= 4, and intermediates (scores, probabilities) that nothing else reads. The guard, when
present, becomes the node's `zero_masked_rows` (rows with every score -inf give 0, as the guard makes them).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .pattern_utils import PatternMatcher, other_operand, scalar
from .shape_expressions import rank_of, shape_dims

_BSND_TO_BNSD = [0, 2, 1, 3]


class _Matcher(PatternMatcher):
    def readers(self, name: str) -> list[Node]:
        return [] if name in self.graph.outputs else self.consumers.get(name, [])

    def is_float32_rank4(self, name: str) -> bool:
        t = self.graph.tensors.get(name)
        return t is not None and t.dtype == np.float32 and rank_of(self.graph, name) == 4

    def strip_scale(self, name: str) -> tuple[str, float]:
        """(x, c) when `name` is Mul(x, c) with a scalar constant c (else (name, 1))."""
        node = self.producers.get(name)
        if node is not None and node.op_type == "Mul":
            for x in node.inputs:
                c = scalar(self.graph, other_operand(node, x) or "")
                if c is not None and self.graph.constant(x) is None:
                    return x, c
        return name, 1.0

    def transposed_from(self, name: str, perm: list[int]) -> str | None:
        node = self.producers.get(name)
        if node is None or node.op_type != "Transpose" or [int(p) for p in node.attrs.get("perm") or []] != perm:
            return None
        return node.inputs[0] if self.is_float32_rank4(node.inputs[0]) else None

    def unrepeated_kv(self, name: str) -> str:
        """kv when `name` is repeat_kv(kv): Reshape(Expand(Unsqueeze(kv, [2]), [b, n, r, s, d]), [b, n * r, s, d]),
        proven by the declared symbolic shapes; else `name`."""
        g, sym = self.graph, self.graph.symbolic_shapes
        reshape = self.producers.get(name)
        if reshape is None or reshape.op_type != "Reshape":
            return name
        expand = self.producers.get(reshape.inputs[0])
        if expand is None or expand.op_type != "Expand":
            return name
        unsq = self.producers.get(expand.inputs[0])
        if unsq is None or unsq.op_type != "Unsqueeze" or len(unsq.inputs) < 2:
            return name
        axes = g.constant(unsq.inputs[1])
        kv = unsq.inputs[0]
        if axes is None or [int(a) for a in axes.reshape(-1)] != [2] or not self.is_float32_rank4(kv):
            return name
        kv_s, ex_s, out_s = sym.get(kv), sym.get(expand.outputs[0]), sym.get(name)
        if kv_s is None or ex_s is None or out_s is None or len(kv_s) != 4 or len(ex_s) != 5 or len(out_s) != 4:
            return name
        if any(d is None for d in kv_s + ex_s + out_s):
            return name
        b, n, s, d = kv_s
        r = ex_s[2]
        if ex_s != [b, n, r, s, d] or not isinstance(n, int) or not isinstance(r, int):
            return name
        if out_s != [b, n * r, s, d]:
            return name
        return kv

    def key(self, kt: str, unrepeat: bool) -> tuple[str, str, bool] | None:
        """(k, layout, un-repeated) of the K^T operand [B, N, D, L]."""
        k = self.transposed_from(kt, [0, 2, 3, 1])
        if k is not None:
            return k, "BSND", False
        k = self.transposed_from(kt, [0, 1, 3, 2])
        if k is not None:
            kv = self.unrepeated_kv(k) if unrepeat else k
            return kv, "BNSD", kv != k
        return (kt, "BNDS", False) if self.is_float32_rank4(kt) else None

    def rows_operand(self, x: str, unrepeat: bool) -> tuple[str, str, bool]:
        """(tensor, layout, un-repeated) of a [B, N, S, D] operand read in place: the BSND tensor under its head
        transpose; with `unrepeat`, the key/value heads under a repeat_kv."""
        kv = self.unrepeated_kv(x) if unrepeat else x
        src = self.transposed_from(kv, _BSND_TO_BNSD)
        return (src, "BSND", kv != x) if src is not None else (kv, "BNSD", kv != x)

    @staticmethod
    def output_dim_facts(pv: Node, probs: str, scores: str, q_scaled: str, q4: str, q: str, q_layout: str, v_in: str,
                         v: str, v_layout: str) -> list[set]:
        """For each dim of the attention output [B, N, S, Dv]: dims of other tensors of the pattern known to be
        equal to it (by what attention computes), as (tensor, axis) references."""
        out = pv.outputs[0]
        rows = [out, probs, scores, q_scaled, q4]          # [B, N, S, .]: the queries' side
        facts = [{(t, 0) for t in rows}, {(t, 1) for t in rows}, {(t, 2) for t in rows}, {(out, 3), (v_in, 3)}]
        if q_layout == "BSND":
            facts[0].add((q, 0))
            facts[1].add((q, 2))
            facts[2].add((q, 1))
        facts[3].add((v, 3))                                # Dv is the last dim in both layouts
        return facts

    def reshape_reading_own_shape(self, x: str) -> Node | None:
        """The Reshape reading x when x's other readers are Shape nodes that only compute that Reshape's target
        (`x.view(x.size(0), ...)`): they die with it (listed in self.target_nodes)."""
        self.target_nodes = []
        readers = self.readers(x)
        reshapes = [r for r in readers if r.op_type == "Reshape" and r.inputs[0] == x]
        if len(reshapes) != 1 or x in self.graph.outputs:
            return None
        reshape = reshapes[0]
        cone, stack = set(), [reshape.inputs[1]]   # the nodes computing the target
        while stack:
            node = self.producers.get(stack.pop())
            if node is not None and id(node) not in cone:
                cone.add(id(node))
                stack.extend(i for i in node.inputs if i)
        for r in readers:
            if r is reshape:
                continue
            if r.op_type != "Shape" or id(r) not in cone:
                return None
            front, seen = list(r.outputs), {id(r)}   # everything downstream of the Shape stays inside the cone
            self.target_nodes.append(r)
            while front:
                t = front.pop()
                if t in self.graph.outputs:
                    return None
                for c in self.consumers.get(t, []):
                    if c is reshape:
                        if c.inputs[0] == t:
                            return None
                        continue
                    if id(c) not in cone:
                        return None
                    if id(c) not in seen:
                        seen.add(id(c))
                        self.target_nodes.append(c)
                        front.extend(c.outputs)
        return reshape

    def keeps_shape(self, reshape: Node, facts: list[set]) -> bool:
        """The Reshape's target is provably the shape its input already has."""
        dims = shape_dims(self.graph, self.producers, reshape.inputs[1])
        if dims is None or len(dims) != 4 or sum(1 for d in dims if d == -1) > 1:
            return False
        return all(d == -1 or d in facts[i] for i, d in enumerate(dims))

    def match(self, softmax: Node) -> dict | None:
        g = self.graph
        if softmax.attrs.get("coerce_2d") or len(softmax.inputs) != 1:
            return None
        scores = softmax.inputs[0]
        rank = rank_of(g, scores)
        if rank != 4 or int(softmax.attrs.get("axis", -1)) not in (-1, 3):
            return None
        dead: list[Node] = [softmax]
        # Mask added after the product (when not already fused into it as an addend).
        mask, scale = None, 1.0
        node = self.producers.get(scores)
        if node is not None and node.op_type == "Add" and self.only_reader(scores) is softmax:
            left = self.producers.get(node.inputs[0])
            x = node.inputs[0] if left is not None and left.op_type in ("MatMul", "Mul", "Div") else node.inputs[1]
            mask = other_operand(node, x)
            if mask is None:
                return None
            dead.append(node)
            scores, node = x, self.producers.get(x)
        # Scale applied to the product.
        if node is not None and node.op_type in ("Mul", "Div") and self.only_reader(scores) is (dead[-1]):
            c = scalar(g, node.inputs[1])
            x = node.inputs[0]
            if c is None and node.op_type == "Mul":
                c, x = scalar(g, node.inputs[0]), node.inputs[1]
            if c is None or c == 0.0:
                return None
            scale *= c if node.op_type == "Mul" else 1.0 / c
            dead.append(node)
            scores, node = x, self.producers.get(x)
        if node is None or node.op_type != "MatMul" or node.attrs.get("activation"):
            return None
        if self.only_reader(scores) is not dead[-1]:
            return None
        qk = node
        if len(qk.inputs) > 2 and qk.inputs[2]:
            return None   # a bias on the scores: not attention
        if len(qk.inputs) > 3 and qk.inputs[3]:
            if mask is not None or scale != 1.0 or any(n.op_type in ("Mul", "Div") for n in dead):
                return None   # a second mask, or a scale applied to (Q K^T + mask): not this operator's order
            mask = qk.inputs[3]
        dead.append(qk)
        if mask is not None:
            mt = g.tensors.get(mask)
            mrank = rank_of(g, mask)
            if mt is None or mt.dtype not in (np.float32, np.bool_) or mrank is None or mrank > 4:
                return None

        # Probabilities, with PyTorch's NaN guard.
        probs = softmax.outputs[0]
        readers = self.readers(probs)
        zero_masked_rows = False
        if len(readers) == 2 and {r.op_type for r in readers} == {"IsNaN", "Where"}:
            isnan = next(r for r in readers if r.op_type == "IsNaN")
            where = next(r for r in readers if r.op_type == "Where")
            zero = scalar(g, where.inputs[1])
            if where.inputs[0] != isnan.outputs[0] or where.inputs[2] != probs or zero != 0.0 or \
                    self.only_reader(isnan.outputs[0]) is not where:
                return None
            dead += [isnan, where]
            probs = where.outputs[0]
            zero_masked_rows = True
        pv = self.only_reader(probs)
        if pv is None or pv.op_type != "MatMul" or pv.inputs[0] != probs or len(pv.inputs) != 2 or \
                pv.attrs.get("activation"):
            return None
        dead.append(pv)

        q_scaled, kt_scaled, v_in = qk.inputs[0], qk.inputs[1], pv.inputs[1]
        q4, c1 = self.strip_scale(q_scaled)
        kt, c2 = self.strip_scale(kt_scaled)
        scale *= c1 * c2
        if scale == 0.0 or not np.isfinite(scale):
            return None
        if not all(self.is_float32_rank4(x) for x in (q4, kt, v_in, pv.outputs[0])):
            return None
        q, q_layout, _ = self.rows_operand(q4, unrepeat=False)
        key, value = self.key(kt, unrepeat=True), self.rows_operand(v_in, unrepeat=True)
        if key is not None and key[2] != value[2]:   # K and V must agree on the head count
            key, value = self.key(kt, unrepeat=False), self.rows_operand(v_in, unrepeat=False)
        if key is None:
            return None
        k, k_layout, _ = key
        v, v_layout, _ = value
        # Output straight into the [B, S, N, Dv] layout when a head transpose is all that reads it (possibly
        # through a Reshape to the shape the output already has).
        out, out_layout = pv.outputs[0], "BNSD"
        self.target_nodes = []
        reader = self.only_reader(out) or self.reshape_reading_own_shape(out)
        facts = self.output_dim_facts(pv, probs, scores, q_scaled, q4, q, q_layout, v_in, v, v_layout)
        if reader is not None and reader.op_type == "Reshape" and self.keeps_shape(reader, facts):
            after = self.only_reader(reader.outputs[0])
            if after is not None and after.op_type == "Transpose" and \
                    [int(p) for p in after.attrs.get("perm") or []] == _BSND_TO_BNSD:
                dead += [reader, after] + [n for n in getattr(self, "target_nodes", []) if n not in dead]
                out, out_layout = after.outputs[0], "BSND"
        elif reader is not None and reader.op_type == "Transpose" and \
                [int(p) for p in reader.attrs.get("perm") or []] == _BSND_TO_BNSD:
            dead.append(reader)
            out, out_layout = reader.outputs[0], "BSND"
        return {"inputs": [q, k, v] + ([mask] if mask is not None else []), "output": out, "dead": dead,
                "attrs": {"scale": float(scale), "is_causal": False, "q_layout": q_layout, "k_layout": k_layout,
                          "v_layout": v_layout, "out_layout": out_layout, "zero_masked_rows": zero_masked_rows},
                "name": pv.name}


def fuse_attention(graph: Graph) -> int:
    fired = 0
    for softmax in [n for n in graph.nodes if n.op_type == "Softmax"]:
        if softmax not in graph.nodes:
            continue
        m = _Matcher(graph).match(softmax)
        if m is None:
            continue
        dead_ids = {id(n) for n in m["dead"]}
        graph.nodes = [n for n in graph.nodes if id(n) not in dead_ids]
        graph.nodes.append(Node(m["name"] + "/Attention", "Attention", m["inputs"], [m["output"]], m["attrs"]))
        fired += 1
    if fired:
        graph.topological_sort()
    return fired
