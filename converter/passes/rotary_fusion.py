"""Recognises rotary position embedding written out as elementary ops and replaces it with one `RotaryEmbedding`.

transformers' Llama, Qwen2, Mistral, Phi and GPT-NeoX (`apply_rotary_pos_emb` with `rotate_half`) export, for
q or k of shape (B, N, S, D):

    x * cos + concat(-x[..., D/2:], x[..., :D/2]) * sin        (Mul, Slice, Slice, Neg, Concat, Mul, Add)

where cos and sin are (B or 1, 1, S, D) tables built as `cat(freqs, freqs)` (each half the same angles). The
fused node reads the first half of each table, (B or 1, S, D/2), which a Slice and a Squeeze cut once per table
(shared by every layer's q and k). It fires only when:
- x is float32 with a known rank 4 and a static, even last dim (reduced-precision graphs are lowered to float32
  compute before the passes run, so their rounding points are already float32's);
- the two Slices cut exactly [0, D/2) and [D/2, D) of the last axis with step 1, and the Neg, Concat and Mul
  results have no other reader;
- each table broadcasts over the heads (dim 1 is 1) and has last dim D, and its two halves are provably equal:
  it comes from `Concat(f, f)` on the last axis through ops that act per element or add leading axes (Cos, Sin,
  Cast to float32, Mul/Div by a scalar constant, Unsqueeze), or it is a constant whose halves are equal.

GPT-J's interleaved form on x of shape (B, S, N, D) (heads third) fuses too:

    x * cos + flatten(stack(-x[..., 1::2], x[..., ::2])) * sin    (Slice, Slice, Neg, Unsqueeze x2, Concat, Reshape)

with (B or 1, S, 1, D) tables exported from `repeat_interleave(t[:, :, None], 2, -1)` (Unsqueeze [2, 4], Expand
[1, 1, 1, 1, 2], Reshape), whose source t (B or 1, S, D/2) the fused node reads directly, or constant tables with
equal pairs. x is viewed as (B, S, N * D) for the operator's 3-D form (static N and D), the result viewed back.
Anything else (a table with unequal halves or pairs, other slices, a shared intermediate) is left as it is.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Tensor
from .pattern_utils import PatternMatcher
from .pattern_utils import scalar as _scalar

_BIG = 2 ** 62


class _Matcher(PatternMatcher):
    def ints(self, name: str) -> list[int] | None:
        v = self.graph.constant(name) if name else None
        return None if v is None else [int(i) for i in np.asarray(v).reshape(-1)]

    def last_axis_range(self, node: Node, rank: int, dim: int, step: int = 1) -> tuple[int, int] | None:
        """[start, end) of a Slice with this step along the last axis of a rank-`rank` tensor of last dim `dim`."""
        if node.op_type != "Slice" or len(node.inputs) < 3:
            return None
        starts, ends = self.ints(node.inputs[1]), self.ints(node.inputs[2])
        axes = self.ints(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else [0]
        steps = self.ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else [1]
        if None in (starts, ends, axes, steps) or len(starts) != 1 or len(ends) != 1 or len(axes) != 1:
            return None
        if axes[0] not in (-1, rank - 1) or steps != [step]:
            return None
        s, e = starts[0], min(ends[0], _BIG)
        s, e = s + dim if s < 0 else s, e + dim if e < 0 else e
        return min(max(s, 0), dim), min(max(e, 0), dim)

    def equal_halves(self, name: str, dim: int, depth: int = 0) -> bool:
        """The last axis of `name` (of size dim) holds the same values in both halves."""
        value = self.graph.constant(name)
        if value is not None:
            return value.shape[-1] == dim and np.array_equal(value[..., :dim // 2], value[..., dim // 2:])
        node = self.producers.get(name)
        if node is None or depth > 12:
            return False
        t = self.graph.tensors.get(name)
        rank = len(t.shape) if t is not None and t.shape is not None else None
        if node.op_type == "Concat" and rank is not None and node.attrs.get("axis") in (-1, rank - 1):
            return len(node.inputs) == 2 and node.inputs[0] == node.inputs[1]
        if node.op_type in ("Cos", "Sin", "Identity") or (
                node.op_type == "Cast" and np.dtype(node.attrs.get("to")) == np.float32):
            return self.equal_halves(node.inputs[0], dim, depth + 1)
        if node.op_type in ("Mul", "Div") and len(node.inputs) == 2:
            for v, c in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
                if _scalar(self.graph, c) is not None and (node.op_type == "Mul" or c == node.inputs[1]):
                    return self.equal_halves(v, dim, depth + 1)
            return False
        if node.op_type == "Unsqueeze" and rank is not None:
            axes = self.ints(node.inputs[1]) if len(node.inputs) > 1 else node.attrs.get("axes")
            return axes is not None and all(a % rank != rank - 1 for a in axes) and \
                self.equal_halves(node.inputs[0], dim, depth + 1)
        return False

    def table(self, name: str, shape: list[int]) -> bool:
        """A cos/sin operand that broadcasts over the heads of x (shape) and has equal halves."""
        t = self.graph.tensors.get(name)
        if t is None or t.shape is None or len(t.shape) != 4 or t.dtype != np.float32:
            return False
        b, n, s, d = t.shape
        return (n == 1 and d == shape[3] and b in (1, -1, shape[0]) and (s == shape[2] or -1 in (s, shape[2]))
                and self.equal_halves(name, d))

    def match(self, add: Node) -> tuple[str, str, str, list[Node], bool] | None:
        """From an Add: (x, cos, sin, nodes to remove, interleaved) of x * cos + rotate_half(x) * sin, or of
        x * cos + rotate_every_two(x) * sin (then cos and sin are already the (B or 1, S, D/2) tables)."""
        if add.op_type != "Add" or len(add.inputs) != 2:
            return None
        for first, second in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
            m1, m2 = self.producers.get(first), self.producers.get(second)
            if m1 is None or m2 is None or m1.op_type != "Mul" or m2.op_type != "Mul":
                continue
            for r, sin in ((m2.inputs[0], m2.inputs[1]), (m2.inputs[1], m2.inputs[0])):
                found = self.rotate_half(r)
                interleaved = found is None
                if interleaved:
                    found = self.rotate_every_two(r)
                if found is None:
                    continue
                x, dead = found
                if x not in m1.inputs or m1.inputs[0] == m1.inputs[1]:
                    continue
                cos = m1.inputs[1] if m1.inputs[0] == x else m1.inputs[0]
                if self.only_reader(first) is not add or self.only_reader(second) is not add:
                    continue
                if self.only_reader(r) is not m2:
                    continue
                shape = self.graph.tensors[x].shape
                if interleaved:
                    tables = (self.pair_table(cos, shape), self.pair_table(sin, shape))
                    if None in tables:
                        continue
                    return x, tables[0], tables[1], dead + [m1, m2, add], True
                if not (self.table(cos, shape) and self.table(sin, shape)):
                    continue
                return x, cos, sin, dead + [m1, m2, add], False
        return None

    def rotate_half(self, name: str) -> tuple[str, list[Node]] | None:
        """(x, nodes) when name = Concat(Neg(x[..., D/2:]), x[..., :D/2]) on the last axis of a 4-D float32 x."""
        cat = self.producers.get(name)
        if cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2:
            return None
        neg, low = self.producers.get(cat.inputs[0]), self.producers.get(cat.inputs[1])
        if neg is None or low is None or neg.op_type != "Neg":
            return None
        high = self.producers.get(neg.inputs[0])
        if high is None or high.op_type != "Slice" or low.op_type != "Slice" or high.inputs[0] != low.inputs[0]:
            return None
        x = low.inputs[0]
        t = self.graph.tensors.get(x)
        if t is None or t.dtype != np.float32 or t.shape is None or len(t.shape) != 4:
            return None
        d = t.shape[3]
        if d <= 0 or d % 2 or cat.attrs.get("axis") not in (-1, 3):
            return None
        if self.last_axis_range(low, 4, d) != (0, d // 2) or self.last_axis_range(high, 4, d) != (d // 2, d):
            return None
        for v, reader in ((cat.inputs[0], cat), (cat.inputs[1], cat), (neg.inputs[0], neg)):
            if self.only_reader(v) is not reader:
                return None
        return x, [high, neg, low, cat]


    def rotate_every_two(self, name: str) -> tuple[str, list[Node]] | None:
        """(x, nodes) when name = flatten(stack(-x[..., 1::2], x[..., ::2])) of a (B, S, N, D) float32 x with
        static N and D (GPT-J's rotate_every_two: Slice, Slice, Neg, Unsqueeze, Unsqueeze, Concat, Reshape)."""
        flat = self.producers.get(name)
        if flat is None or flat.op_type != "Reshape":
            return None
        cat = self.producers.get(flat.inputs[0])
        if cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2:
            return None
        ups = [self.producers.get(i) for i in cat.inputs]
        if any(u is None or u.op_type != "Unsqueeze" for u in ups):
            return None
        neg, even = self.producers.get(ups[0].inputs[0]), self.producers.get(ups[1].inputs[0])
        odd = self.producers.get(neg.inputs[0]) if neg is not None and neg.op_type == "Neg" else None
        if odd is None or even is None or odd.op_type != "Slice" or even.op_type != "Slice":
            return None
        x = even.inputs[0]
        t = self.graph.tensors.get(x)
        if odd.inputs[0] != x or t is None or t.dtype != np.float32 or t.shape is None or len(t.shape) != 4:
            return None
        n, d = t.shape[2], t.shape[3]
        out = self.graph.tensors.get(name)
        if n <= 0 or d <= 0 or d % 2 or out is None or out.shape != t.shape or cat.attrs.get("axis") not in (-1, 4):
            return None
        if any(self.ints(u.inputs[1]) not in ([-1], [4]) for u in ups):
            return None
        if self.last_axis_range(even, 4, d, 2) != (0, d) or self.last_axis_range(odd, 4, d, 2) != (1, d):
            return None
        chain = [(cat.inputs[0], cat), (cat.inputs[1], cat), (flat.inputs[0], flat), (neg.inputs[0], neg),
                 (ups[0].inputs[0], ups[0]), (ups[1].inputs[0], ups[1])]
        if any(self.only_reader(v) is not reader for v, reader in chain):
            return None
        return x, [odd, neg, even, ups[0], ups[1], cat, flat]

    def pair_table(self, name: str, shape: list[int]) -> str | None:
        """For a (B or 1, S, 1, D) table of x (B, S, N, D) whose pairs (2i, 2i + 1) provably hold the same value:
        the (B or 1, S, D/2) table of the pairs. Either `repeat_interleave(t[:, :, None], 2, -1)` as exported
        (Reshape(Expand(Unsqueeze(t, [2, 4]), [1, 1, 1, 1, 2]))), or a constant with equal pairs."""
        t = self.graph.tensors.get(name)
        if t is None or t.shape is None or len(t.shape) != 4 or t.dtype != np.float32:
            return None
        b, s, one, d = t.shape
        if one != 1 or d != shape[3] or b not in (1, -1, shape[0]) or not (s == shape[1] or -1 in (s, shape[1])):
            return None
        value = self.graph.constant(name)
        if value is not None:
            if not np.array_equal(value[..., 0::2], value[..., 1::2]):
                return None
            return self.graph.add_constant(f"{name}_pairs", np.ascontiguousarray(value[:, :, 0, 0::2]))
        flat = self.producers.get(name)
        grow = self.producers.get(flat.inputs[0]) if flat is not None and flat.op_type == "Reshape" else None
        up = self.producers.get(grow.inputs[0]) if grow is not None and grow.op_type == "Expand" else None
        if up is None or up.op_type != "Unsqueeze" or self.ints(grow.inputs[1]) != [1, 1, 1, 1, 2]:
            return None
        axes = self.ints(up.inputs[1]) if len(up.inputs) > 1 else None
        src = self.graph.tensors.get(up.inputs[0])
        if axes is None or sorted(a % 5 for a in axes) != [2, 4] or src is None or src.shape is None:
            return None
        if len(src.shape) != 3 or src.shape[2] != d // 2 or src.dtype != np.float32:
            return None
        return up.inputs[0]


def _half_table(graph: Graph, table: str, halves: dict[str, str]) -> tuple[str, list[Node]]:
    """(B or 1, S, D/2) from a (B or 1, 1, S, D) table: Slice of the first half, Squeeze of the head axis."""
    if table in halves:
        return halves[table], []
    b, _, s, d = graph.tensors[table].shape
    cut = graph.unique_name(f"{table}_half")
    graph.tensors[cut] = Tensor(cut, np.dtype(np.float32), [b, 1, s, d // 2])
    out = graph.unique_name(f"{table}_rotary")
    graph.tensors[out] = Tensor(out, np.dtype(np.float32), [b, s, d // 2])
    c = lambda hint, v: graph.add_constant(f"{table}_{hint}", np.array(v, np.int64))  # noqa: E731
    nodes = [Node(f"{table}/RotaryHalf", "Slice", [table, c("h0", [0]), c("h1", [d // 2]), c("ax", [-1])], [cut]),
             Node(f"{table}/RotarySqueeze", "Squeeze", [cut, c("heads", [1])], [out])]
    halves[table] = out
    return out, nodes


def fuse_rotary_embedding(graph: Graph) -> int:
    fused = 0
    m = _Matcher(graph)
    halves: dict[str, str] = {}
    for add in [n for n in graph.nodes if n.op_type == "Add"]:
        if add not in graph.nodes:
            continue
        found = m.match(add)
        if found is None:
            continue
        x, cos, sin, dead, interleaved = found
        at = min(graph.nodes.index(n) for n in dead)
        new_nodes: list[Node] = []
        tables = [cos, sin]
        if not interleaved:
            tables = []
            for t in (cos, sin):
                half, nodes = _half_table(graph, t, halves)
                new_nodes += nodes
                tables.append(half)
        for node in dead:
            graph.nodes.remove(node)
        name = add.name.rsplit("/", 1)[0] + "/RotaryEmbedding" if "/" in add.name else add.name + "_rotary"
        attrs = {"interleaved": interleaved, "num_heads": 0, "rotary_embedding_dim": 0}
        if interleaved:   # (B, S, N, D): the operator's 3-D form (B, S, N * D) with num_heads, as a view
            b, s, n, d = graph.tensors[x].shape
            flat_in, flat_out = graph.unique_name(f"{x}_heads_merged"), graph.unique_name(f"{add.outputs[0]}_merged")
            graph.tensors[flat_in] = Tensor(flat_in, np.dtype(np.float32), [b, s, n * d])
            graph.tensors[flat_out] = Tensor(flat_out, np.dtype(np.float32), [b, s, n * d])
            merge = graph.add_constant(f"{name}_merge", np.array([0, 0, -1], np.int64))
            split = graph.add_constant(f"{name}_split", np.array([0, 0, n, d], np.int64))
            attrs["num_heads"] = n
            new_nodes += [Node(f"{name}_merge", "Reshape", [x, merge], [flat_in]),
                          Node(name, "RotaryEmbedding", [flat_in] + tables, [flat_out], attrs),
                          Node(f"{name}_split", "Reshape", [flat_out, split], list(add.outputs))]
        else:
            new_nodes.append(Node(name, "RotaryEmbedding", [x] + tables, list(add.outputs), attrs))
        at = min(at, len(graph.nodes))
        graph.nodes[at:at] = new_nodes
        fused += 1
        m = _Matcher(graph)
    if fused:
        graph.topological_sort()
    return fused
