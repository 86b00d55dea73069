"""WEIGHT_QUANT `algorithm=GPTQ`: weight codes chosen to keep each layer's outputs, not each weight, close.

Round-to-nearest (RTN) makes every weight's error as small as it can be on its own; the layer's output error is
then a sum of independent errors. GPTQ (Frantar et al., 2023, after Optimal Brain Quantization) rounds the
reduction axis one input feature at a time and moves each rounding error onto the features not rounded yet, in
proportion to how the calibration inputs correlate them, so the errors partly cancel in the outputs. Per output
row it solves, greedily, min ||W x - Q x||^2 over the calibration inputs x, with H = E[x x^T]:

    err_i = (w_i - q_i) / U_ii,    w_j -= err_i * U_ij  for j > i,

where U is the upper Cholesky factor of H^-1 (H damped by `damp` times its mean diagonal, for features the
calibration set barely excites). Features go in order of decreasing H_ii (GPTQ's act-order): the ones that
carry the most energy are rounded while the most others can still compensate. Scales and zero points stay those
round-to-nearest gives the original weights (GPTQ's static groups), so the file layout, the runtime and the
group sizes are unchanged: only which code each weight gets differs.

The inputs x are the layer's inputs in the float model on the calibration set (one calibration run for every
layer); for a Conv, the im2col patches of its input, per group (a depthwise Conv has one 9x9 H per channel)."""
from __future__ import annotations

import numpy as np

from ..conv_window import conv_window
from ..ir import Graph, Node
from ..progress import Progress
from .calibration import observe, topologically_sorted
from .config import QuantConfig
from .encoding import StoredWeight, decode, quantize

BLOCK = 128   # columns rounded before the trailing columns get their (lazy, batched) update
# The compensating fit counts a layer's n input rows (pixels, tokens) as n / INDEPENDENCE independent samples: the
# pixels of one image are far from independent, and a fit to K features from n of them with the plain damping
# memorised the calibration set (MobileNetV2, 8 images: held-back cosine 0.99828, below round-to-nearest's 0.99705
# plus GPTQ's own 0.99859; with the ridge scaled by INDEPENDENCE * K / n: 0.99888).
INDEPENDENCE = 16


def conv_patches(node: Node, x: np.ndarray, groups: int, kernel: tuple[int, ...]) -> np.ndarray:
    """A Conv's im2col matrix per group: [groups, features, pixels], features in the weight's (channel, taps)
    order, for an NCHW (or NCW) input with the node's strides, dilations and padding (auto_pad included)."""
    spatial = x.ndim - 2
    window = conv_window(node.attrs, list(kernel), list(x.shape[2:]))
    if window is None:
        raise ValueError(f"Conv '{node.name}': attributes for {spatial} spatial dims expected")
    widths = [(0, 0), (0, 0)] + [(window.pads[i], window.pads[spatial + i]) for i in range(spatial)]
    xp = np.pad(x.astype(np.float32, copy=False), widths)
    span = tuple(window.span(i) for i in range(spatial))
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=tuple(range(2, 2 + spatial)))
    # win: [N, C, out..., span...]; take the strided outputs and the dilated taps
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in window.strides)
              + tuple(slice(None, None, d) for d in window.dilations)]
    n, c = win.shape[:2]
    outs = win.shape[2:2 + spatial]
    # -> [groups, C/groups, taps..., N, out...]
    order = (1,) + tuple(range(2 + spatial, 2 + 2 * spatial)) + (0,) + tuple(range(2, 2 + spatial))
    cols = np.ascontiguousarray(win.transpose(order))
    return cols.reshape(groups, (c // groups) * int(np.prod(kernel)), n * int(np.prod(outs)))


class MomentAccumulator:
    """E[a b^T] of two feature sets over the calibration samples, per group: [groups, K, K] float64."""

    def __init__(self) -> None:
        self.sum: np.ndarray | None = None
        self.count = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        """a, b: [groups, K, samples]."""
        gram = np.matmul(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False).transpose(0, 2, 1))
        self.sum = gram.astype(np.float64) if self.sum is None else self.sum + gram
        self.count += a.shape[2]

    def mean(self) -> np.ndarray:
        return self.sum / max(self.count, 1)

    @staticmethod
    def merged(parts: list[MomentAccumulator]) -> MomentAccumulator:
        out = MomentAccumulator()
        for p in parts:
            if p.sum is not None:
                out.sum = p.sum if out.sum is None else out.sum + p.sum
                out.count += p.count
        return out


def layer_features(node: Node, weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The node's input features for one calibration sample, [groups, K, samples], in the column order of
    `weight_rows`."""
    if node.op_type == "Conv":
        groups = int(node.attrs.get("group", 1))
        return conv_patches(node, x, groups, tuple(weight.shape[2:]))
    k = weight.shape[1] if node.op_type == "Gemm" and node.attrs.get("trans_b") else weight.shape[0]
    return x.astype(np.float32, copy=False).reshape(-1, k).T[None]


def weight_rows(node: Node, w: np.ndarray) -> tuple[np.ndarray, callable]:
    """w as [groups, rows, K] (one row per output, columns matching layer_features) and the inverse map."""
    if node.op_type == "Conv":
        groups = int(node.attrs.get("group", 1))
        rows = w.reshape(groups, w.shape[0] // groups, -1)
        return rows, lambda r: r.reshape(w.shape)
    if node.op_type == "Gemm" and node.attrs.get("trans_b"):   # [N, K]
        return w[None], lambda r: r[0]
    return w.T[None], lambda r: np.ascontiguousarray(r[0].T)   # MatMul / Gemm [K, N]


def supported(node: Node, weight: np.ndarray) -> bool:
    """Layers whose inputs GPTQ can turn into features: 2-D MatMul weights, Gemm without transposed A, Conv."""
    if node.op_type == "MatMul":
        return weight.ndim == 2
    if node.op_type == "Gemm":
        return weight.ndim == 2 and not node.attrs.get("trans_a")
    return node.op_type == "Conv" and weight.ndim >= 3


def element_params(s: StoredWeight, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each weight's scale and zero point, in the weight's shape: what decode multiplies a code 1 by (zero points
    0), and minus what it makes of a code 0 (scales 1)."""
    scale = decode(_constant_codes(s, shape, 1, s.scale, None), shape)
    if s.zero_point is None:
        return scale, np.zeros(shape, np.float32)
    zero = -decode(_constant_codes(s, shape, 0, np.ones_like(s.scale), s.zero_point), shape)
    return scale, zero


def _constant_codes(s: StoredWeight, shape: tuple[int, ...], code: int, scale: np.ndarray,
                    zero_point: np.ndarray | None) -> StoredWeight:
    n = int(np.prod(shape, dtype=np.int64))
    data = (np.full(n, code, np.int8 if s.storage == "int8" else np.uint8) if s.bits == 8
            else np.full(-(-n // 2), code | (code << 4), np.uint8))
    return StoredWeight(s.storage, data, scale, zero_point, s.axis, s.bits, s.group_size)


def gptq_round(rows: np.ndarray, hessian: np.ndarray, scale: np.ndarray, zero: np.ndarray, lo: int, hi: int,
               damp: float) -> np.ndarray:
    """GPTQ on [groups, R, K] weights with per-element scale/zero maps of the same shape and per-group
    [groups, K, K] H; returns the dequantised weights (each exactly (code - zero) * scale with code in [lo, hi])."""
    g, r, k = rows.shape
    h = hessian.astype(np.float32)   # float32 like GPTQ's own: half the time of the K^3 steps, same codes
    idx = np.arange(k)
    diag = h[:, idx, idx].copy()
    diag[diag <= 0] = 1.0   # a feature the calibration set never excites: plain rounding, no error moved onto it
    diag += damp * diag.mean(axis=1, keepdims=True)
    h[:, idx, idx] = diag
    order = np.argsort(-diag, axis=1, kind="stable")
    take = np.arange(g)[:, None]
    h = h[take[:, :, None], order[:, :, None], order[:, None, :]]
    w = np.take_along_axis(rows.astype(np.float32), order[:, None, :], axis=2)
    s = np.take_along_axis(scale.astype(np.float32), order[:, None, :], axis=2)
    z = np.take_along_axis(zero.astype(np.float32), order[:, None, :], axis=2)
    u = _inverse_cholesky_upper(h)
    q = np.empty_like(w)
    for start in range(0, k, BLOCK):
        end = min(start + BLOCK, k)
        block = w[:, :, start:end].copy()
        errors = np.empty_like(block)
        ub = u[:, start:end, start:end]
        for i in range(end - start):
            col = block[:, :, i]
            sc, zp = s[:, :, start + i], z[:, :, start + i]
            codes = np.clip(np.rint(col / sc) + zp, lo, hi)
            qi = (codes - zp) * sc
            q[:, :, start + i] = qi
            err = (col - qi) / ub[:, i, i][:, None]
            block[:, :, i:] -= err[:, :, None] * ub[:, None, i, i:]
            errors[:, :, i] = err
        if end < k:
            w[:, :, end:] -= np.matmul(errors, u[:, start:end, end:])
    out = np.empty_like(q)
    np.put_along_axis(out, np.broadcast_to(order[:, None, :], q.shape), q, axis=2)
    return out.astype(np.float32)


def _inverse_cholesky_upper(h: np.ndarray) -> np.ndarray:
    """U with H^-1 = U^T U, U upper triangular (per group); in float64 when float32 rounding leaves H^-1 not
    positive definite."""
    for dtype in (np.float32, np.float64):
        hinv = np.linalg.inv(h.astype(dtype))
        hinv = (hinv + hinv.transpose(0, 2, 1)) / 2
        try:
            return np.linalg.cholesky(hinv).transpose(0, 2, 1).astype(np.float32)
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("GPTQ: the damped input Hessian is not positive definite")


def compensating_target(rows: np.ndarray, cross: np.ndarray, hessian: np.ndarray, damp: float) -> np.ndarray:
    """The weights that best map the quantised model's inputs x~ onto the float layer's outputs W x:
    argmin_T E||T x~ - W x||^2 + lam ||T - W||^2 = (W E[x x~^T] + lam W)(E[x~ x~^T] + lam I)^-1, per group
    (lam: `damp` times H's mean diagonal, which pulls T towards W where x~ says little)."""
    k = hessian.shape[1]
    idx = np.arange(k)
    lam = damp * np.maximum(hessian[:, idx, idx].mean(axis=1), 1e-12)
    lhs = hessian.astype(np.float32)
    lhs[:, idx, idx] += lam[:, None]
    w = rows.astype(np.float32)
    rhs = np.matmul(w, cross.astype(np.float32)) + lam[:, None, None].astype(np.float32) * w
    return np.linalg.solve(lhs, rhs.transpose(0, 2, 1)).transpose(0, 2, 1)


def reference_inputs(graph: Graph, cfg: QuantConfig, layers: list[tuple[Node, str, tuple[int, int]]]) -> dict:
    """The layers' inputs in the float model (call before any weight of the graph is quantised)."""
    return observe(graph, [node.inputs[0] for node, _, _ in layers], cfg)


def quantize_layers(graph: Graph, cfg: QuantConfig, layers: list[tuple[Node, str, tuple[int, int]]],
                    float_inputs: dict[str, list[np.ndarray]]) -> None:
    """GPTQ for each (node, weight name, (axis, group size)) of `layers`, in graph order, each layer on the
    inputs of the model quantised so far (x~) and aiming at the float model's outputs (W x, `float_inputs`): a
    layer then also undoes, as far as its inputs let it, the error the layers before it left (GPTQ's asymmetric
    calibration). Sets each weight's stored codes and its decoded values. Layers reading the same tensor share a
    calibration run."""
    position = {id(node): i for i, node in enumerate(topologically_sorted(graph).nodes)}
    layers = sorted(layers, key=lambda layer: position[id(layer[0])])
    waves: dict[str, list[tuple[Node, str, tuple[int, int]]]] = {}
    for layer in layers:
        waves.setdefault(layer[0].inputs[0], []).append(layer)
    progress = Progress("GPTQ layers", len(layers))
    for source, wave in waves.items():
        quant_inputs = observe(graph, [source], cfg)[source]
        for node, name, layout in wave:
            progress.step(node.name)
            t = graph.tensors[name]
            halves, cross = [MomentAccumulator(), MomentAccumulator()], MomentAccumulator()
            for i, (x, xq) in enumerate(zip(float_inputs[source], quant_inputs)):
                fx, fq = layer_features(node, t.data, x), layer_features(node, t.data, xq)
                halves[i % 2].add(fq, fq)   # even and odd samples apart, to validate the damping on
                cross.add(fx, fq)
            hessian = MomentAccumulator.merged(halves)
            rows, back = weight_rows(node, t.data)
            ridge = max(cfg.damp, INDEPENDENCE * rows.shape[2] / hessian.count)
            target = back(compensating_target(rows, cross.mean(), hessian.mean(), ridge).astype(np.float32))
            grid = quantize(target, cfg.bit_num, *layout, cfg.symmetric)
            scale, zero = element_params(grid, t.data.shape)
            qmax = 2 ** (cfg.bit_num - 1) - 1
            grid_args = (weight_rows(node, scale)[0], weight_rows(node, zero)[0],
                         *((-qmax, qmax) if cfg.symmetric else (0, 2 ** cfg.bit_num - 1)))
            target_rows = weight_rows(node, target)[0]
            damping = cfg.damp
            if hessian.count < rows.shape[2] and halves[1].count:
                damping = validated_damping(target_rows, halves, grid_args, (cfg.damp, ridge))
            q = gptq_round(target_rows, hessian.mean(), *grid_args, damping)
            t.stored = quantize(back(q), cfg.bit_num, *layout, cfg.symmetric, like=grid)
            t.data = decode(t.stored, t.data.shape)
    progress.close()


def validated_damping(target: np.ndarray, halves: list[MomentAccumulator], grid_args: tuple,
                      candidates: tuple[float, ...]) -> float:
    """For a layer with fewer calibration rows than features (H singular: GPTQ can move errors into directions no row
    shows): the damping whose rounding, fitted on the even samples, leaves the smaller output error E||(Q-T)x||^2
    on the odd ones. Measured: the decoder's 4864-wide down projection on 1024 tokens wants the ridge (int4
    held-back cosine 0.904 with the plain damping, 0.92-0.93 with this choice), a classifier whose few inputs share
    one dominant direction wants the plain damping."""
    fit, check = halves[0].mean(), halves[1].mean()
    errors = []
    for damp in candidates:
        e = gptq_round(target, fit, *grid_args, damp).astype(np.float64) - target
        errors.append(float(np.einsum("grk,gkl,grl->", e, check, e)))
    return candidates[int(np.argmin(errors))]
