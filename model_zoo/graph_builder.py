"""The common part of model_zoo's graph builders: nodes and constants in the converter's IR, checkpoint tensors
checked against the shapes the config implies and kept deferred (read when the writer stores them, with the
StoragePlan of the chosen weight format), and the fused linear layer (bias, activation, residual and multiplier in
one MatMul) every family uses."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.deferred import DeferredArray, StoragePlan, take_rows
from converter.ir import ConverterError, Graph, Node, Tensor

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)


class GraphBuilder:
    """`weights`: arrays by name or a converter.frontends.checkpoint.Checkpoint; `weight_format`: float32, bfloat16,
    float16, int8 (a scale per output index) or int4 (blocks of `group_size` along the reduction axis)."""

    def __init__(self, name: str, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                 group_size: int = 32):
        self.w, self.g = weights, Graph(name=name)
        self.weight_format, self.group_size = weight_format, group_size

    def value(self, hint: str, dtype=F32) -> str:
        name = self.g.unique_name(hint)
        self.g.tensors[name] = Tensor(name, dtype, None)
        return name

    def node(self, op: str, inputs: list[str], attrs: dict | None = None, hint: str = "", dtype=F32) -> str:
        out = self.value(hint or op.lower(), dtype)
        while inputs and not inputs[-1]:
            inputs = inputs[:-1]   # omitted trailing optional inputs
        self.g.nodes.append(Node(self.g.unique_name(f"{hint or op}_node"), op, inputs, [out], attrs or {}))
        return out

    def const(self, hint: str, value: np.ndarray) -> str:
        return self.g.add_constant(hint, np.require(value, requirements="C"))   # (ascontiguousarray makes 0-d 1-d)

    def _check(self, name: str, shape: tuple[int, ...] | None, got: tuple[int, ...]) -> None:
        if shape is not None and tuple(got) != tuple(shape):
            where = getattr(self.w, "description", "the weights")
            raise ConverterError(f"tensor '{name}' in {where} has shape {list(got)}, the config implies {list(shape)}")

    def weight(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A small tensor (norm, bias), read now as float32."""
        if name not in self.w:
            raise ConverterError(f"the checkpoint ({getattr(self.w, 'description', 'weights')}) has no tensor '{name}'")
        value = np.asarray(self.w[name], dtype=np.float32)
        self._check(name, shape, value.shape)
        return value

    def source(self, name: str, shape: tuple[int, ...], index: int | None = None) -> DeferredArray:
        """A checkpoint tensor (or its slice `index`), read when written."""
        if name not in self.w:
            raise ConverterError(f"the checkpoint ({getattr(self.w, 'description', 'weights')}) has no tensor '{name}'")
        if hasattr(self.w, "deferred"):
            d = self.w.deferred(name, index)
        else:
            array = np.asarray(self.w[name])
            d = DeferredArray.of(array if index is None else array[index], name)
        self._check(name if index is None else f"{name}[{index}]", shape, d.shape)
        return d

    def stored(self, hint: str, values: DeferredArray, reduce_axis: int) -> str:
        """A matrix constant with the storage of `weight_format`: int8 a scale per output index, int4 blocks of
        group_size along the reduction axis (per output index where that axis is no longer than a block)."""
        name = self.g.unique_name(hint)
        self.g.tensors[name] = Tensor(name, F32, list(values.shape), values)
        fmt, other = self.weight_format, 1 - reduce_axis
        if fmt in ("bfloat16", "float16"):
            self.g.tensors[name].stored = StoragePlan(fmt)
        elif fmt == "int8":
            self.g.tensors[name].stored = StoragePlan("int", 8, other)
        elif fmt == "int4":
            blocked = values.shape[reduce_axis] > self.group_size
            self.g.tensors[name].stored = StoragePlan("int", 4, reduce_axis if blocked else other,
                                                      self.group_size if blocked else 0)
        return name

    def matmul_weight(self, hint: str, values: DeferredArray) -> str:
        return self.stored(hint, values, reduce_axis=0)   # [K, N]: N output columns

    def linear(self, x: str, prefix: str, hint: str, n_in: int, n_out: int, activation: str | None = None,
               residual: str = "", multiplier: str = "") -> str:
        """x @ W^T (+ bias), then the activation, the residual and the multiplier, in one MatMul."""
        w, attrs = self.linear_weight(f"{hint}_w", self.source(prefix + ".weight", (n_out, n_in)))
        bias = ""
        if prefix + ".bias" in self.w:
            bias = self.const(f"{hint}_b", self.weight(prefix + ".bias", (n_out,)))
        if activation:
            attrs["activation"] = activation
        return self.node("MatMul", [x, w, bias, residual, multiplier], attrs, hint=hint)

    def rows_linear(self, x: str, prefix: str, hint: str, n_in: int, n_out_all: int, rows: np.ndarray,
                    activation: str | None = None, multiplier: str = "") -> str:
        """x @ W[rows]^T (+ bias[rows]): a product with some of a projection's output rows (Qwen3.5's interleaved
        query / gate heads, a GEGLU's two halves)."""
        src = self.source(prefix + ".weight", (n_out_all, n_in))
        w, attrs = self.linear_weight(f"{hint}_w", take_rows(src, rows))
        bias = ""
        if prefix + ".bias" in self.w:
            bias = self.const(f"{hint}_b", self.weight(prefix + ".bias", (n_out_all,))[rows])
        if activation:
            attrs["activation"] = activation
        return self.node("MatMul", [x, w, bias, "", multiplier], attrs, hint=hint)

    def linear_weight(self, hint: str, values: DeferredArray) -> tuple[str, dict]:
        """A Linear layer's weight [out, in] as MatMul's B, and the MatMul attributes it needs: float32 weights are
        stored as the checkpoint holds them (MatMul b_transposed: the rows are copied, nothing is transposed while
        converting, and the runtime packs them at load as it packs any weight); stored compressed, as [in, out]
        (the layout the compressed products read)."""
        if self.weight_format == "float32":
            return self.stored(hint, values, reduce_axis=1), {"b_transposed": True}
        return self.matmul_weight(hint, values.T), {}

    def mha(self, inputs: list[str], heads: int, hint: str, scale: float = 0.0, causal: bool = False) -> str:
        """The fused Attention op over rows of [batch, tokens, heads x dim] (BSND): inputs q, k, v and an optional
        additive mask / bias; scale 0 is 1 / sqrt(dim)."""
        return self.node("Attention", list(inputs), {"q_num_heads": heads, "kv_num_heads": heads, "scale": scale,
                                                     "is_causal": causal, "q_layout": "BSND", "k_layout": "BSND",
                                                     "v_layout": "BSND", "out_layout": "BSND"}, hint=hint)

    def w_shape(self, name: str) -> tuple[int, ...]:
        if hasattr(self.w, "info"):
            return self.w.info(name).shape
        return tuple(np.shape(self.w[name]))

    def rename(self, old: str, new: str) -> str:
        """Gives a value its public name (a graph output's); returns it."""
        if new in self.g.tensors:
            raise ValueError(f"a value is already named {new!r}")
        t = self.g.tensors.pop(old)
        t.name = new
        self.g.tensors[new] = t
        for n in self.g.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
            n.outputs = [new if o == old else o for o in n.outputs]
        self.g.outputs[:] = [new if o == old else o for o in self.g.outputs]   # in place: callers may hold the list
        return new

    def input(self, name: str, shape: list[int], dtype=F32) -> str:
        self.g.tensors[name] = Tensor(name, dtype, shape)
        self.g.inputs.append(name)
        return name
