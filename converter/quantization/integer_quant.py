"""FULL_QUANT and DYNAMIC_QUANT: MatMul, Gemm and Conv nodes run in 8-bit integer arithmetic (format 1.8, Node.int8).

Each such node gets its weight stored as int8 codes, symmetric per output channel in [-63, 63] (7 bits: the AVX2
kernel's vpmaddubsw pair sums then never saturate, see lite/src/cpu/quantized/qgemm.h) or, with bit_num=4, MatMul/Gemm weights
as int4 codes per channel or in blocks of group_size along the reduction axis (the kernel sums each block in
int32 and scales it in float; Conv weights keep the 7-bit codes), and the quantisation of its float
input to uint8: with FULL_QUANT a fixed scale and zero point chosen from the input's values on the calibration set
(run through the float model in the lite runtime), with DYNAMIC_QUANT from each run's own range. Outputs are
float32, except (FULL_QUANT) a Conv output that only integer Convs read, which the file carries as uint8 codes
(format 1.11, uint8_activations); the graph keeps float at its edges.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node
from ..writer import INT8_COMPUTE
from .bias_correction import correct_bias
from .calibration import observe
from .config import QuantConfig
from .encoding import decode, quantize
from .weight_quant import apply_weight_quant

WEIGHT_QMAX = 63          # the kernels take codes in [-64, 63]
NARROW_QMAX = 31          # integer_weight_bits=6: within [-32, 31] the AVX2 tile sums two depth groups per step
KL_BINS = 2048            # histogram of |x| for activation_quant_method=KL
KL_LEVELS = 128           # quantised levels on each side of zero
OUTLIER_QUANTILE = 1e-4   # REMOVAL_OUTLIER: this fraction of values beyond each end is clipped
# Products of fewer terms stay float32: the integer tile's fixed costs (quantising, packing, dequantising) then
# outweigh its faster multiplies (MobileNetV2's 16- and 24-channel 1x1 layers and 27-tap stem ran 1.05-1.25x
# slower in int8, its 32+-term layers 0.7-0.95x).
MIN_INTEGER_DEPTH = 32
# Except FULL_QUANT's Convs: between integer Convs the codes stay uint8 (rows on VNNI CPUs) with nothing to quantise
# or dequantise, so from 16 terms the integer kernel wins. MobileNetV2 FULL_QUANT at one thread on a Sapphire Rapids
# Xeon: 4.3 -> 3.0 ms on AMX tiles, 4.7 -> 3.2 on the VNNI tiles (LITE_CPU_ISA=avx512), its stem and 16 / 24-channel
# 1x1 layers integer; cosine to float32 over 12 inputs 0.9934 -> 0.9890 (OpenVINO's NNCF int8 0.9905).
MIN_FULL_QUANT_CONV_DEPTH = 16


@dataclasses.dataclass
class Target:
    node: Node
    weight: str
    channel_axis: int


def find_targets(graph: Graph, cfg: QuantConfig) -> list[Target]:
    """The nodes the integer kernels take: MatMul with a 2-D constant weight, Gemm without transposed A,
    scaling or a C other than a bias, Conv 1-D/2-D with group 1 (and with FULL_QUANT 2-D depthwise Convs); weights
    of min_quant_weight_size values and min_quant_weight_channel output channels or more, MIN_INTEGER_DEPTH values
    (FULL_QUANT's Convs MIN_FULL_QUANT_CONV_DEPTH) or more per output (depthwise filters excepted), read by that node
    only, not in skip_quant_node."""
    uses: dict[str, int] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name:
                uses[name] = uses.get(name, 0) + 1
    skip = set(cfg.skip_quant_node)
    targets = []
    for node in graph.nodes:
        if node.name in skip or len(node.inputs) < 2 or not node.inputs[1]:
            continue
        x, w = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
        if x.is_constant or not w.is_constant or w.data.dtype != np.float32 or uses[node.inputs[1]] != 1:
            continue
        if node.op_type == "MatMul" and w.data.ndim == 2:
            if x.shape is not None and len(x.shape) < 2:
                continue   # a vector times a matrix: the integer kernel multiplies rows
            axis = 1
        elif node.op_type == "Gemm" and w.data.ndim == 2:
            a = node.attrs
            if a.get("trans_a") or float(a.get("alpha", 1.0)) != 1.0:
                continue
            if len(node.inputs) > 2 and node.inputs[2]:
                c = graph.tensors[node.inputs[2]]
                n = w.data.shape[0 if a.get("trans_b") else 1]
                if float(a.get("beta", 1.0)) != 1.0 or c.shape is None or int(np.prod(c.shape)) != n or len(c.shape) > 1:
                    continue
            axis = 0 if a.get("trans_b") else 1
        elif node.op_type == "Conv" and w.data.ndim in (3, 4) and int(node.attrs.get("group", 1)) == 1:
            axis = 0
        elif _depthwise(node, w.data) and cfg.quant_type == "FULL_QUANT":
            axis = 0
        else:
            continue
        if w.data.size < cfg.min_quant_weight_size or w.data.shape[axis] < cfg.min_quant_weight_channel:
            continue
        min_depth = (MIN_FULL_QUANT_CONV_DEPTH if node.op_type == "Conv" and cfg.quant_type == "FULL_QUANT"
                     else MIN_INTEGER_DEPTH)
        if w.data.size // w.data.shape[axis] < min_depth and not _depthwise(node, w.data):
            continue
        targets.append(Target(node, node.inputs[1], axis))
    # A depthwise Conv is worth its integer kernel only on the uint8 codes of an integer Conv before it (on a float
    # input it would quantise and transpose the plane first: 2.5x its float kernel's time on MobileNetV2's).
    producers = graph.producers()
    chosen = {id(t.node) for t in targets}
    for t in [t for t in targets if _depthwise(t.node, graph.tensors[t.weight].data)]:
        source = producers.get(t.node.inputs[0])
        if source is None or id(source) not in chosen or _depthwise(source, graph.tensors[source.inputs[1]].data):
            targets.remove(t)
            chosen.discard(id(t.node))
    return targets


def _depthwise(node: Node, w: np.ndarray) -> bool:
    """A 2-D depthwise Conv (one KxK filter per channel): FULL_QUANT runs it on uint8 codes in and out (the integer
    kernels between its neighbours then hand codes over instead of float), whatever its small depth."""
    return (node.op_type == "Conv" and w.ndim == 4 and w.shape[1] == 1 and
            int(node.attrs.get("group", 1)) == w.shape[0] > 1 and len(node.inputs) <= 3 and
            node.attrs.get("activation") in (None, "relu", "relu6"))


def _kl_threshold(values: np.ndarray) -> float:
    """The clipping threshold of |x| whose 128-level quantisation loses the least information (KL divergence
    between the clipped histogram and its quantised form), as TensorRT and MindSpore Lite calibrate."""
    a = np.abs(values)
    amax = float(a.max(initial=0.0))
    if amax == 0.0:
        return 0.0
    hist, edges = np.histogram(a, bins=KL_BINS, range=(0.0, amax))
    hist = hist.astype(np.float64)
    best, best_kl = KL_BINS, np.inf
    for i in range(KL_LEVELS, KL_BINS + 1, 16):
        p = hist[:i].copy()
        p[i - 1] += hist[i:].sum()
        # Quantise the i bins to KL_LEVELS levels, spreading each level's mass over its non-empty bins.
        q = np.zeros(i)
        chunks = np.array_split(np.arange(i), KL_LEVELS)
        for c in chunks:
            nz = hist[c] > 0
            if nz.any():
                q[c[nz]] = hist[c].sum() / nz.sum()
        q[i - 1] = max(q[i - 1], 1e-12) if p[i - 1] > 0 else q[i - 1]
        mask = p > 0
        ps, qs = p / p.sum(), q / max(q.sum(), 1e-12)
        if np.any(qs[mask] == 0):
            continue
        kl = float(np.sum(ps[mask] * np.log(ps[mask] / qs[mask])))
        if kl < best_kl:
            best, best_kl = i, kl
    return float(edges[best])


def activation_range(values: np.ndarray, method: str) -> tuple[float, float]:
    """The float range [lo, hi] a uint8 quantisation of these calibration values should cover."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return 0.0, 0.0
    lo, hi = float(v.min()), float(v.max())
    if method == "REMOVAL_OUTLIER":
        lo, hi = (float(x) for x in np.quantile(v, [OUTLIER_QUANTILE, 1.0 - OUTLIER_QUANTILE]))
    elif method == "KL":
        t = _kl_threshold(v)
        lo, hi = max(lo, -t), min(hi, t)
    return lo, hi


def uint8_params(lo: float, hi: float) -> tuple[float, int]:
    """Scale and zero point of an asymmetric uint8 quantisation covering [lo, hi] and 0 (the runtime's
    dynamic choice, cpu/quantized/qgemm ChooseActQuant, is the same)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if not hi > lo:
        return 1.0, 0
    scale = float(np.float32((hi - lo) / 255.0))
    return scale, int(np.clip(np.rint(-lo / scale), 0, 255))


def _codes_pool(node: Node) -> bool:
    """A MaxPool the runtime runs on uint8 codes: 2-D, no dilation, no Indices output (max commutes with the
    monotonic quantisation, so the codes' max is the max's code)."""
    k = node.attrs.get("kernel_shape")
    dil = node.attrs.get("dilations")
    return (node.op_type == "MaxPool" and len(node.outputs) == 1 and k is not None and len(k) == 2 and
            (dil is None or all(int(d) == 1 for d in dil)))


def uint8_activations(graph: Graph, targets: list[Target]) -> dict[str, str]:
    """The tensors the file can carry as uint8 codes, each with the tensor whose calibrated range gives its scale
    and zero point: outputs of an integer Conv that only integer Convs read (as their input or their fused
    residual, input 3) or MaxPools whose outputs qualify in turn, and those MaxPools' outputs (same scale and zero
    point as their input); never graph outputs. The producer then requantises its sums straight to uint8 and the
    readers take the codes as they are: a quarter of the bytes written and read, no quantising pass."""
    convs = {id(t.node) for t in targets if t.node.op_type == "Conv"}
    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name:
                readers.setdefault(name, []).append((node, i))
    memo: dict[str, bool] = {}

    def takes_codes(name: str) -> bool:   # every reader takes uint8 codes
        if name not in memo:
            memo[name] = False   # (the graph is acyclic; this only guards the recursion)
            uses = readers.get(name, [])
            memo[name] = bool(uses) and name not in graph.outputs and all(
                (id(n) in convs and i in (0, 3)) or (i == 0 and _codes_pool(n) and takes_codes(n.outputs[0]))
                for n, i in uses)
        return memo[name]

    out: dict[str, str] = {}
    for t in targets:
        root = t.node.outputs[0]
        if id(t.node) not in convs or not takes_codes(root):
            continue
        pending = [root]
        while pending:
            name = pending.pop()
            out[name] = root
            pending += [n.outputs[0] for n, _ in readers.get(name, []) if n.op_type == "MaxPool"]
    return out


def calibration_inputs(graph: Graph, targets: list[Target], cfg: QuantConfig,
                       extra: list[str] = ()) -> dict[str, list[np.ndarray]]:
    """Every target's input (and the `extra` tensors) on the calibration samples, one array per sample."""
    return observe(graph, [t.node.inputs[0] for t in targets] + list(extra), cfg)


def calibrate(inputs: dict[str, list[np.ndarray]], cfg: QuantConfig) -> dict[str, tuple[float, float]]:
    """Each calibrated input's (lo, hi) by activation_quant_method."""
    return {name: activation_range(np.concatenate([v.astype(np.float32).ravel() for v in values]),
                                   cfg.activation_quant_method)
            for name, values in inputs.items()}


def _mark(node: Node, cfg: QuantConfig, ranges: dict[str, tuple[float, float]], chained: dict[str, str]) -> None:
    """The node attribute the writer turns into Node.int8: the input's fixed quantisation (that of the uint8
    codes it reads, when chained), or dynamic."""
    if cfg.quant_type == "DYNAMIC_QUANT":
        node.attrs[INT8_COMPUTE] = {"dynamic": True}
    else:
        scale, zp = uint8_params(*ranges[chained.get(node.inputs[0], node.inputs[0])])
        node.attrs[INT8_COMPUTE] = {"scale": scale, "zero_point": zp}


def apply_integer_quant(graph: Graph, cfg: QuantConfig, float_values: dict[str, np.ndarray] | None = None) -> list[str]:
    """Quantises the target nodes' weights and marks the nodes for integer arithmetic; embedding tables
    (Gather) are stored as int8 codes too, as WEIGHT_QUANT would (they are read row by row, never multiplied).
    Returns the compressed weights' names. FULL_QUANT calibrates first (on the float graph); with
    bias_correction each node's bias then cancels its mean quantisation error (bias_correction.py), and the
    float model's value of each bias it creates or replaces goes to `float_values` (the accuracy report's
    reference model)."""
    targets = find_targets(graph, cfg)
    if not targets:
        return apply_weight_quant(graph, cfg, frozenset({"Gather"}))
    static = cfg.quant_type == "FULL_QUANT"
    chained = uint8_activations(graph, targets) if static else {}
    inputs = calibration_inputs(graph, targets, cfg, sorted(set(chained.values()))) if static else {}
    ranges = calibrate(inputs, cfg)
    float_values = {} if float_values is None else float_values
    done = []
    for t in targets:
        w = graph.tensors[t.weight]
        if cfg.bit_num == 4 and t.node.op_type != "Conv":   # MatMul/Gemm: int4, in blocks along the reduction axis
            reduce_axis = 1 - t.channel_axis
            blocked = cfg.group_size and w.data.shape[reduce_axis] > cfg.group_size
            w.stored = (quantize(w.data, 4, reduce_axis, cfg.group_size, True) if blocked
                        else quantize(w.data, 4, t.channel_axis, 0, True))
        else:
            qmax = NARROW_QMAX if cfg.integer_weight_bits == 6 else WEIGHT_QMAX
            w.stored = quantize(w.data, 8, t.channel_axis, 0, True, qmax)
            if cfg.quant_type == "FULL_QUANT" and not cfg.full_per_channel:   # one scale, as a per-channel record
                amax = float(np.abs(w.data).max(initial=0.0))
                scale = np.float32(amax / qmax if amax > 0 else 1.0)
                w.stored.scale[:] = scale
                w.stored.data = np.clip(np.rint(w.data / scale), -qmax, qmax).astype(np.int8).reshape(-1)
        original, w.data = w.data, decode(w.stored, w.data.shape)   # what an older runtime computes with
        _mark(t.node, cfg, ranges, chained)
        if cfg.bias_correction and cfg.quant_type == "FULL_QUANT":
            params = t.node.attrs[INT8_COMPUTE]
            correct_bias(graph, t.node, original, w.data, inputs[t.node.inputs[0]], params["scale"],
                         params["zero_point"], float_values)
        done.append(t.weight)
    for name, root in chained.items():   # after bias correction, which reads the float graph's tensors
        t = graph.tensors[name]
        t.act_quant, t.dtype = uint8_params(*ranges[root]), np.dtype(np.uint8)
    return done + apply_weight_quant(graph, cfg, frozenset({"Gather"}))

