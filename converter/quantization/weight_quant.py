"""Weight storage compression, applied after the graph passes: --fp16=on (float32 constants stored as
float16) and WEIGHT_QUANT (MatMul/Gemm/Conv/Gather weights stored as int8 or int4 codes with scales).
The runtime decodes them to float32 when it loads the model."""
from __future__ import annotations

import numpy as np

from ..ir import Graph
from . import gptq
from .config import QuantConfig
from .encoding import decode, quantize, to_float16

F32 = np.dtype(np.float32)
FP16_MIN_ELEMENTS = 16       # scalars and tiny vectors (epsilons, shapes as floats) stay float32


def apply_fp16(graph: Graph) -> list[str]:
    """Stores float32 constants of 16+ elements as float16; a constant with a value beyond float16's range
    (for example a -3.4e38 mask fill) stays float32. Returns the names stored as float16."""
    done = []
    for name, t in graph.tensors.items():
        if not t.is_constant or t.stored is not None or t.data.dtype != F32 or t.data.size < FP16_MIN_ELEMENTS:
            continue
        if np.abs(t.data).max(initial=0.0) > 65504.0:
            continue
        t.stored = to_float16(t.data)
        t.data = decode(t.stored, t.data.shape)   # the values the runtime will read back
        done.append(name)
    return done


def _weight_axes(node, index: int, rank: int) -> tuple[int, int] | None:
    """(channel axis, reduction axis) of a weight input, or None when that input is not a weight."""
    if node.op_type == "MatMul" and index == 1 and rank >= 2:
        return rank - 1, rank - 2
    if node.op_type == "MoE" and index >= 2 and rank == 2:
        return 1, 0   # an expert's [K, N] matrix, like a MatMul's
    if node.op_type == "Gemm" and index == 1 and rank == 2:
        return (0, 1) if node.attrs.get("trans_b") else (1, 0)
    if node.op_type == "Conv" and index == 1 and rank >= 3:
        return 0, 1
    if node.op_type == "Gather" and index == 0 and rank == 2 and int(node.attrs.get("axis", 0)) == 0:
        return 0, 1   # embedding rows
    return None


def apply_weight_quant(graph: Graph, cfg: QuantConfig, ops: frozenset[str] | None = None) -> list[str]:
    """Quantises eligible weights (of `ops` nodes only, when given); returns their names. Per channel (one scale
    per output channel) unless per_channel=false; with group_size, blocks of that many values along the
    reduction axis per channel. algorithm=GPTQ then re-chooses the codes of each weight one layer reads
    (gptq.py) on that layer's calibration inputs."""
    skip = set(cfg.skip_quant_node)
    uses: dict[str, list[tuple[object, int]]] = {}
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name:
                uses.setdefault(name, []).append((node, i))
    chosen = []
    for name, t in graph.tensors.items():
        if not t.is_constant or t.stored is not None or t.data.dtype != F32 or name not in uses:
            continue
        axes = [_weight_axes(node, i, t.data.ndim) for node, i in uses[name]]
        if ops is not None and any(node.op_type not in ops for node, _ in uses[name]):
            continue
        if any(a is None for a in axes) or any(node.name in skip for node, _ in uses[name]):
            continue   # also read as something other than a weight, or a node the user excluded
        channel_axis, reduce_axis = axes[0]
        if t.data.size < cfg.min_quant_weight_size or t.data.shape[channel_axis] < cfg.min_quant_weight_channel:
            continue
        chosen.append((name, channel_axis, reduce_axis))
    gptq_layers, nearest = [], []
    for name, channel_axis, reduce_axis in chosen:
        t = graph.tensors[name]
        if not cfg.per_channel:
            layout = (-1, 0)
        elif cfg.group_size and t.data.shape[reduce_axis] > cfg.group_size:
            layout = (reduce_axis, cfg.group_size)
        else:
            layout = (channel_axis, 0)
        node = uses[name][0][0]
        if cfg.algorithm == "GPTQ" and len(uses[name]) == 1 and gptq.supported(node, t.data):
            gptq_layers.append((node, name, layout))
        else:
            nearest.append((name, layout))
    reference = gptq.reference_inputs(graph, cfg, gptq_layers) if gptq_layers else {}
    for name, layout in nearest:   # first: the GPTQ layers' calibration runs then see them quantised
        t = graph.tensors[name]
        t.stored = quantize(t.data, cfg.bit_num, *layout, cfg.symmetric)
        t.data = decode(t.stored, t.data.shape)   # the values the runtime will read back
    if gptq_layers:
        gptq.quantize_layers(graph, cfg, gptq_layers, reference)
    return [name for name, _, _ in chosen]
