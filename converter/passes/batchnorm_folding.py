"""Folds an inference BatchNormalization into the Conv or Gemm that feeds it (constant weights)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph


def _bn_affine(graph: Graph, bn) -> tuple[np.ndarray, np.ndarray] | None:
    params = [graph.constant(i) for i in bn.inputs[1:5]]
    if len(params) != 4 or any(p is None for p in params):
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    a = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
    return a, bias - mean * a


def fold_batchnorm(graph: Graph) -> int:
    folded = 0
    consumers = graph.consumers()
    producers = graph.producers()
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization":
            continue
        src = bn.inputs[0]
        prev = producers.get(src)
        if prev is None or len(consumers.get(src, [])) != 1 or src in graph.outputs:
            continue
        affine = _bn_affine(graph, bn)
        if affine is None:
            continue
        a, b = affine
        if prev.op_type == "Conv":
            w = graph.constant(prev.inputs[1])
            if w is None or w.dtype != np.float32 or w.shape[0] != a.size:
                continue
            old_bias = graph.constant(prev.inputs[2]) if len(prev.inputs) > 2 and prev.inputs[2] else None
            if len(prev.inputs) > 2 and prev.inputs[2] and old_bias is None:
                continue
            new_w = (w.astype(np.float64) * a.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            base = old_bias.astype(np.float64) if old_bias is not None else 0.0
            new_b = (base * a + b).astype(np.float32)
        elif prev.op_type == "Gemm":
            w = graph.constant(prev.inputs[1])
            trans_b = prev.attrs.get("trans_b", False)
            out_dim = None if w is None else (w.shape[0] if trans_b else w.shape[1])
            if w is None or w.dtype != np.float32 or out_dim != a.size:
                continue
            c = graph.constant(prev.inputs[2]) if len(prev.inputs) > 2 and prev.inputs[2] else None
            if len(prev.inputs) > 2 and prev.inputs[2] and c is None:
                continue
            if c is not None and c.size not in (1, a.size):
                continue   # a per-row C is not a per-column bias
            alpha, beta = prev.attrs.get("alpha", 1.0), prev.attrs.get("beta", 1.0)
            scale = a.reshape(-1, 1) if trans_b else a.reshape(1, -1)
            new_w = (w.astype(np.float64) * scale * alpha).astype(np.float32)
            base = (c.astype(np.float64).reshape(-1) * beta) if c is not None else 0.0
            new_b = (np.broadcast_to(base, a.shape) * a + b).astype(np.float32)
            prev.attrs["alpha"], prev.attrs["beta"] = 1.0, 1.0
        else:
            continue
        prev.inputs = [prev.inputs[0], graph.add_constant(f"{prev.name}_w_bn", new_w),
                       graph.add_constant(f"{prev.name}_b_bn", new_b)]
        # The conv now writes the BN's output tensor directly.
        out = bn.outputs[0]
        prev.outputs = [out]
        graph.tensors[out].dtype = np.dtype(np.float32)
        graph.nodes.remove(bn)
        folded += 1
        consumers = graph.consumers()
        producers = graph.producers()
    return folded
