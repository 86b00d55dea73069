"""CosyVoice 2's HiFT vocoder and CosyVoice 3's causal one (mel -> 24 kHz waveform) in the converter's IR, built from
hift.pt's tensors (a state dict of model_zoo.reference.cosyvoice_hift.HiFTGenerator / CausalHiFTGenerator, names
optionally under `generator.`; weight norm as
weight_g / weight_v or parametrizations.weight.original0 / original1, folded here: g v / ||v||, the norm over every
dim but 0). Tensors are [1, channels, time] throughout, convolutions 1-D.

Inputs:  mel [1, in_channels, T] float32 (T dynamic);
         phase [nb_harmonics + 1] float32: the sine generator's initial-phase draw (SineGen2, 24 kHz: rand_ini in
             cycles, uniform [0, 1), [0] = 0, which the original never reads when the upsampling scale is >= 3, so
             neither does this graph; SineGen, 22050 Hz: radians, uniform(-pi, pi), [0] = 0);
         noise [1, T x s, nb_harmonics + 1] float32: the standard normal draw shaped as the sine waves,
             s = prod(upsample_rates) x hop_len samples a mel frame.
Output:  waveform [1, T x s] float32.

The graph: the F0 predictor (five conv + ELU, a linear layer, |.|); the harmonic source at the frame rate where
the original's values are frame-constant (f0 is nearest-upsampled), then at the sample rate: the sines, uv (f0 >
threshold), the noise mix, l_linear + tanh; the source's STFT (reflection pad n_fft / 2, a strided convolution with
the hann-windowed DFT basis: real parts then imaginary parts, as torch.stft + view_as_real + cat); conv_pre, the
upsampling stages (leaky ReLU, ConvTranspose, the last stage's reflection pad (1, 0), the source branch's strided
conv and resblock added, the mean of the Snake resblocks); leaky ReLU 0.01, conv_post; exp (clipped at 100) of the
magnitude channels, sin of the phase channels; the inverse STFT as torch.istft (center=True, hann): the inverse real
DFT, window and overlap-add as one ConvTranspose (stride hop) over [real; imaginary], divided by the overlap-added
squared window, n_fft / 2 trimmed at both ends; clamped to +-audio_limit.

Float32 fidelity of the sine phase (the only place where float32 rounding of the original is amplified: its phase
reaches 1e5 .. 1e6 radians after tens of seconds). The graph repeats the original's float32 operations in its order
(CPU torch): per-frame cycles (f0 k / sr) % 1; the cumulative sum exact (int64 fixed point at 2^-40, rounded once to
float32, as torch's double accumulation does); x 2, x float32(pi), x s; torch's linear upsampling with its float32
source index (scale x (t + 0.5) - 0.5 fused, i.e. rounded once) and its fused multiply-add of the two neighbours
(as x86 builds of torch compute them), emulated in float64. SineGen: the per-sample sum, exact the same way, then
% 1, x float32(2 pi). Given the same f0, the excitation stays within 1e-6 of CPU torch's over 30 s (tested). What
remains is f0 itself: the convolutions' float32 rounding differs from torch's by ~1e-7 relative, which moves the
phase by ~1e-7 x phase, so the waveform's largest difference grows with the length: measured (random weights, peaks
~0.06) ~1e-7 for tiny models and short inputs; with CosyVoice 2's full size ~2e-5 at 1 s, ~6e-5 at 5 s, ~1.3e-4 at
10 s (rms 1.5e-5). The original itself is no steadier there (CUDA sums in float32; cuDNN convolutions may use TF32).

CosyVoice 3 (CausalHiFTGenerator: the config's `causal`, else its `__target__`, else conv_pre_look_right decides;
see hift_config), the original's inference(speech_feat, finalize=True) over the whole mel. The same inputs and
output; what changes:
  * every convolution pads zeros on one side only: conv_pre (kernel conv_pre_look_right + 1) on the right, the F0
    predictor's first conv (kernel 4) 3 on the right and its others (kernel 3) 2 on the left, the resblocks' convs
    and conv_post (k - 1) x dilation on the left, source_downs u - 1 on the left before the stride-u conv;
  * each upsampling stage is the original's nearest upsampling by u, k - 1 zeros on the left and a Conv1d (kernel
    k): built here as one ConvTranspose (stride u, kernel k + u - 1) whose taps are sums of the Conv1d's (the same
    products, u-fold fewer of them; float32 rounding differs from torch's by ~1e-7 relative);
  * the source: the frame phases as CosyVoice 2's, then nearest (not linear) upsampling: sin() at the frame rate,
    each frame's value over its s samples; `phase` is unused as in CosyVoice 2 (rand_ini, never read for s >= 3);
    `noise` is the original's noise table rows: uniform [0, 1) draws (the graph only scales them; see
    lite.cosyvoice_vocoder for the draws).
  * f0: the original runs its F0 predictor in float64 (the runtime's convolutions are float32 only); this graph in
    float32. Its rounding (~1e-7 relative) moves the frame phases by ~1e-7 x phase, as above. Measured with the full
    size (random weights, f0 ~160-200 Hz, peaks ~0.09) against the float64 reference: max 8e-5 / 2e-4 / 5e-4 at
    1 / 5 / 10 s (rms 1.3e-5 / 3.6e-5 / 8e-5); the original's own float32-f0 run is as far from its float64 one
    (8e-5 / 4e-4 / 4e-4)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder
from ..language.text_model_view import PrefixView

F64, BOOL = np.dtype(np.float64), np.dtype(np.bool_)
_FIXED = 2.0 ** 40          # the fixed-point scale of the exact phase sums
_REFLECT = 1                # PadMode REFLECT

CONFIG_DEFAULTS = dict(in_channels=80, base_channels=512, nb_harmonics=8, sampling_rate=24000, nsf_alpha=0.1,
                       nsf_sigma=0.003, nsf_voiced_threshold=10, upsample_rates=[8, 5, 3],
                       upsample_kernel_sizes=[16, 11, 7], istft_params=dict(n_fft=16, hop_len=4),
                       resblock_kernel_sizes=[3, 7, 11], resblock_dilation_sizes=[[1, 3, 5]] * 3,
                       source_resblock_kernel_sizes=[7, 7, 11], source_resblock_dilation_sizes=[[1, 3, 5]] * 3,
                       lrelu_slope=0.1, audio_limit=0.99,
                       f0_predictor=dict(num_class=1, in_channels=80, cond_channels=512))


GENERATORS = ("HiFTGenerator", "CausalHiFTGenerator")
F0_PREDICTORS = ("ConvRNNF0Predictor", "CausalConvRNNF0Predictor")


def _target(section: Mapping) -> str:
    return str(section.get("__target__") or "").rsplit(".", 1)[-1]


def is_causal(config: Mapping) -> bool:
    """CausalHiFTGenerator's config (CosyVoice 3)? Its `causal` key (the converter adds causal=True for a
    CausalHiFTGenerator yaml), else its `__target__`'s class, else whether it has conv_pre_look_right (only
    CausalHiFTGenerator takes it). Contradicting keys are refused."""
    votes = []
    if config.get("causal") is not None:
        votes.append(bool(config["causal"]))
    target = _target(config)
    if target:
        if target not in GENERATORS:
            raise ValueError(f"hift __target__ {config['__target__']!r} is neither of {GENERATORS}")
        votes.append(target == "CausalHiFTGenerator")
    if len(set(votes)) > 1:
        raise ValueError(f"hift config: causal={config.get('causal')!r} contradicts __target__ {target!r}")
    causal = votes[0] if votes else config.get("conv_pre_look_right") is not None
    if not causal and config.get("conv_pre_look_right") is not None:
        raise ValueError("conv_pre_look_right is CausalHiFTGenerator's argument, but the config is HiFTGenerator's")
    return causal


def hift_config(config: Mapping) -> dict:
    """The CosyVoice yaml's `hift:` kwargs completed with CosyVoice 2's values (and, for CausalHiFTGenerator,
    conv_pre_look_right 4, its default); `causal` set (see is_causal); the derived sizes checked."""
    causal = is_causal(config)
    cfg = {**CONFIG_DEFAULTS, **dict(config), "causal": causal}
    cfg["istft_params"] = {**CONFIG_DEFAULTS["istft_params"], **dict(cfg["istft_params"])}
    cfg["f0_predictor"] = {**CONFIG_DEFAULTS["f0_predictor"], **dict(cfg["f0_predictor"] or {})}
    if int(cfg["f0_predictor"]["num_class"]) != 1:
        raise ValueError("the F0 predictor must have num_class 1 (one f0 a frame)")
    f0_target, want = _target(cfg["f0_predictor"]), F0_PREDICTORS[causal]
    if f0_target and f0_target != want:
        raise NotImplementedError(f"f0_predictor {f0_target} in a {GENERATORS[causal]} (built: {want})")
    if len(cfg["upsample_rates"]) != len(cfg["upsample_kernel_sizes"]):
        raise ValueError("upsample_rates and upsample_kernel_sizes differ in length")
    if causal:
        cfg["conv_pre_look_right"] = int(4 if cfg.get("conv_pre_look_right") is None else cfg["conv_pre_look_right"])
        if cfg["conv_pre_look_right"] < 1:
            raise ValueError("conv_pre_look_right must be >= 1")
        if int(cfg["sampling_rate"]) == 22050:
            raise NotImplementedError("CausalHiFTGenerator at 22050 Hz (the original builds its causal source with "
                                      "SineGen2 only)")
    return cfg


def upsample_scale(config: Mapping) -> int:
    """Waveform samples a mel frame: prod(upsample_rates) x hop_len."""
    cfg = hift_config(config)
    return int(np.prod([int(u) for u in cfg["upsample_rates"]])) * int(cfg["istft_params"]["hop_len"])


def uses_sinegen2(config: Mapping) -> bool:
    """CosyVoice's rule: SineGen at 22050 Hz (CosyVoice 1), SineGen2 at every other rate (CosyVoice 2, 24 kHz)."""
    return int(hift_config(config)["sampling_rate"]) != 22050


class _HiFTBuilder(GraphBuilder):
    def i64(self, hint: str, v) -> str:
        return self.const(hint, np.array(v, np.int64))

    def f32(self, hint: str, v) -> str:
        return self.const(hint, np.array(v, np.float32))

    def f64(self, hint: str, v) -> str:
        return self.const(hint, np.array(v, np.float64))

    def cast(self, x: str, dtype, hint: str) -> str:
        return self.node("Cast", [x], {"to": np.dtype(dtype)}, hint=hint, dtype=np.dtype(dtype))

    def dim(self, x: str, axis: int, hint: str) -> str:
        """x.shape[axis] as an int64 [1]."""
        return self.node("Gather", [self.node("Shape", [x], hint=f"{hint}_shape", dtype=I64),
                                    self.i64(f"{hint}_axis", [axis])], {"axis": 0}, hint=hint, dtype=I64)

    # -- weights ---------------------------------------------------------------------------------------------------
    def folded(self, prefix: str, shape: tuple[int, ...]) -> np.ndarray:
        """A (possibly weight-normed) layer's weight: g v / ||v|| with the norm over every dim but 0."""
        for g_name, v_name in (("weight_g", "weight_v"),
                               ("parametrizations.weight.original0", "parametrizations.weight.original1")):
            if f"{prefix}.{g_name}" in self.w and f"{prefix}.{v_name}" in self.w:
                v = self.weight(f"{prefix}.{v_name}", shape).astype(np.float64)
                g = self.weight(f"{prefix}.{g_name}", (shape[0],) + (1,) * (len(shape) - 1)).astype(np.float64)
                norm = np.sqrt((v * v).reshape(shape[0], -1).sum(axis=1)).reshape(g.shape)
                return (v * (g / norm)).astype(np.float32)
        if f"{prefix}.weight" in self.w:
            return self.weight(f"{prefix}.weight", shape)
        raise ConverterError(f"the checkpoint ({getattr(self.w, 'description', 'weights')}) has no tensor "
                             f"'{prefix}.weight' (nor its weight_g / weight_v or parametrizations.weight.original0/1)")

    def bias(self, prefix: str, hint: str, n: int) -> str:
        return self.const(f"{hint}_b", self.weight(f"{prefix}.bias", (n,)))

    # -- layers on [1, C, T] ------------------------------------------------------------------------------------------
    def conv(self, x: str, prefix: str, hint: str, c_in: int, c_out: int, k: int, stride: int = 1, pad: int = 0,
             dilation: int = 1, pads: tuple[int, int] | None = None) -> str:
        """`pad` zeros on both sides, or `pads` (left, right)."""
        w = self.folded(prefix, (c_out, c_in, k))
        return self.node("Conv", [x, self.const(f"{hint}_w", w), self.bias(prefix, hint, c_out)],
                         {"kernel_shape": [k], "strides": [stride], "pads": list(pads or (pad, pad)),
                          "dilations": [dilation], "group": 1}, hint=hint)

    def causal_conv(self, x: str, prefix: str, hint: str, c_in: int, c_out: int, k: int, dilation: int = 1,
                    right: bool = False) -> str:
        """CausalConv1d: (k - 1) x dilation zeros on the left (right: on the right, a look-ahead)."""
        pad = int((k * dilation - dilation) / 2) * 2 + (k + 1) % 2          # the original's causal_padding
        if pad != (k - 1) * dilation:
            raise ValueError(f"{prefix}: a causal convolution of kernel {k}, dilation {dilation} changes the length "
                             "(the original fails on it too)")
        return self.conv(x, prefix, hint, c_in, c_out, k, dilation=dilation, pads=(0, pad) if right else (pad, 0))

    def upsample_conv(self, x: str, prefix: str, hint: str, c_in: int, c_out: int, k: int, u: int) -> str:
        """CausalConv1dUpsample: nearest upsampling by u, k - 1 zeros on the left, Conv1d w (kernel k), as one
        ConvTranspose (stride u, kernel k + u - 1): output n = t u + p sums input t times the taps j of w that the
        nearest copy of frame t meets, k - 1 - p <= j < k - 1 - p + u."""
        w = self.folded(prefix, (c_out, c_in, k)).astype(np.float64).transpose(1, 0, 2)     # [in, out, k]
        taps = np.stack([w[:, :, max(0, k - 1 - p):min(k, k - 1 - p + u)].sum(axis=2) for p in range(k + u - 1)],
                        axis=2)
        return self.node("ConvTranspose", [x, self.const(f"{hint}_w", taps.astype(np.float32)),
                                           self.bias(prefix, hint, c_out)],
                         {"kernel_shape": [k + u - 1], "strides": [u], "pads": [0, k - 1], "dilations": [1],
                          "group": 1}, hint=hint)

    def conv_transpose(self, x: str, prefix: str, hint: str, c_in: int, c_out: int, k: int, stride: int,
                       pad: int) -> str:
        w = self.folded(prefix, (c_in, c_out, k))
        return self.node("ConvTranspose", [x, self.const(f"{hint}_w", w), self.bias(prefix, hint, c_out)],
                         {"kernel_shape": [k], "strides": [stride], "pads": [pad, pad], "dilations": [1],
                          "group": 1}, hint=hint)

    def leaky(self, x: str, slope: float, hint: str) -> str:
        return self.node("LeakyRelu", [x], {"alpha": float(slope)}, hint=hint)

    def snake(self, x: str, prefix: str, channels: int, hint: str) -> str:
        """x + (1 / (alpha + 1e-9)) sin(alpha x)^2, the constants rounded as torch rounds them in float32."""
        alpha = self.weight(f"{prefix}.alpha", (channels,))
        inv = np.float32(1.0) / (alpha + np.float32(1e-9))
        s = self.node("Sin", [self.node("Mul", [x, self.const(f"{hint}_alpha", alpha[None, :, None])],
                                        hint=f"{hint}_ax")], hint=f"{hint}_sin")
        sq = self.node("Mul", [s, s], hint=f"{hint}_sq")
        return self.node("Add", [x, self.node("Mul", [sq, self.const(f"{hint}_inv", inv[None, :, None])],
                                              hint=f"{hint}_amp")], hint=hint)

    def resblock(self, x: str, prefix: str, channels: int, k: int, dilations, hint: str, causal: bool = False) -> str:
        for j, d in enumerate(dilations):
            h, d = f"{hint}_{j}", int(d)
            y = self.snake(x, f"{prefix}.activations1.{j}", channels, f"{h}_a1")
            if causal:
                y = self.causal_conv(y, f"{prefix}.convs1.{j}", f"{h}_c1", channels, channels, k, dilation=d)
            else:
                y = self.conv(y, f"{prefix}.convs1.{j}", f"{h}_c1", channels, channels, k, pad=d * (k - 1) // 2,
                              dilation=d)
            y = self.snake(y, f"{prefix}.activations2.{j}", channels, f"{h}_a2")
            if causal:
                y = self.causal_conv(y, f"{prefix}.convs2.{j}", f"{h}_c2", channels, channels, k)
            else:
                y = self.conv(y, f"{prefix}.convs2.{j}", f"{h}_c2", channels, channels, k, pad=(k - 1) // 2)
            x = self.node("Add", [y, x], hint=f"{h}_res")
        return x

    def reflect_pad(self, x: str, left: int, right: int, hint: str) -> str:
        return self.node("Pad", [x, self.i64(f"{hint}_pads", [0, 0, left, 0, 0, right])], {"mode": _REFLECT},
                         hint=hint)


def _f0_predictor(b: _HiFTBuilder, mel: str, cfg: dict) -> str:
    """mel [1, C, T] -> f0 [1, T, 1] (Hz). Causal (CausalConvRNNF0Predictor): the first conv kernel 4 looking 3
    frames ahead, the others kernel 3 over the past."""
    p, c_in, cond = "f0_predictor.", int(cfg["f0_predictor"]["in_channels"]), int(cfg["f0_predictor"]["cond_channels"])
    x = mel
    for i in range(5):
        if cfg["causal"]:
            x = b.causal_conv(x, f"{p}condnet.{2 * i}", f"f0_conv{i}", c_in if i == 0 else cond, cond,
                              4 if i == 0 else 3, right=i == 0)
        else:
            x = b.conv(x, f"{p}condnet.{2 * i}", f"f0_conv{i}", c_in if i == 0 else cond, cond, 3, pad=1)
        x = b.node("Elu", [x], {"alpha": 1.0}, hint=f"f0_elu{i}")
    x = b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="f0_rows")
    return b.node("Abs", [b.linear(x, f"{p}classifier", "f0_linear", cond, 1)], hint="f0")


def _frame_phase(b: _HiFTBuilder, f0: str, cfg: dict, s: int, dim: int) -> str:
    """SineGen2's phase at the frame rate, x s (before its upsampling): [1, T, dim], as CPU torch computes it."""
    rad = b.node("Div", [b.node("Mul", [f0, b.f32("harmonics", np.arange(1, dim + 1))], hint="f0_k"),
                         b.f32("sampling_rate", float(cfg["sampling_rate"]))], hint="f0_k_sr")
    rad = b.node("Mod", [rad, b.f32("one", 1.0)], {"fmod": 1}, hint="cycles")                  # >= 0: fmod = %
    # the frame-rate cumulative sum, exact: int64 at 2^-40 cycles, rounded once to float32
    fixed = b.cast(b.node("Mul", [rad, b.f32("fixed_scale", _FIXED)], hint="cycles_fx"), I64, "cycles_int")
    total = b.node("CumSum", [fixed, b.i64("time_axis", 1)], hint="cycles_sum", dtype=I64)
    total = b.node("Mul", [b.cast(total, F32, "cycles_sum_f"), b.f32("fixed_unscale", 1.0 / _FIXED)],
                   hint="cycles_cum")
    phase = b.node("Mul", [b.node("Mul", [total, b.f32("two", 2.0)], hint="cum_x2"), b.f32("pi", np.pi)],
                   hint="cum_rad")
    return b.node("Mul", [phase, b.f32("scale_s", float(s))], hint="frame_phase")              # [1, T, dim]


def _sinegen2_phase(b: _HiFTBuilder, f0: str, frames: str, cfg: dict, s: int, dim: int) -> str:
    """SineGen2's phase before sin(): [1, T x s, dim], as CPU torch computes it in float32."""
    phase = _frame_phase(b, f0, cfg, s, dim)
    # torch's linear upsampling by s (align_corners False) of the frame phases, index arithmetic in float32
    length = b.node("Mul", [frames, b.i64("s_i64", [s])], hint="samples", dtype=I64)
    t = b.node("Range", [b.i64("r0", 0), b.node("Squeeze", [length, b.i64("sq0", [0])], hint="samples_0d",
                                                   dtype=I64), b.i64("r1", 1)], hint="sample_index", dtype=I64)
    t = b.node("Add", [b.cast(t, F32, "t_f"), b.f32("half", 0.5)], hint="t_half")
    src = b.node("Sub", [b.node("Mul", [b.cast(t, F64, "t_d"), b.f64("ratio", float(np.float32(1.0 / s)))],
                                hint="src_d", dtype=F64), b.f64("half_d", 0.5)], hint="src_fma", dtype=F64)
    src = b.node("Max", [b.cast(src, F32, "src_f"), b.f32("zero", 0.0)], hint="src")
    last = b.cast(b.node("Sub", [frames, b.i64("one_i", [1])], hint="last_i", dtype=I64), F32, "last_f")
    i0 = b.node("Min", [b.node("Floor", [src], hint="src_floor"), last], hint="i0_f")
    lam1 = b.node("Min", [b.node("Max", [b.node("Sub", [src, i0], hint="frac"), b.f32("zero_b", 0.0)],
                                 hint="frac_lo"), b.f32("one_b", 1.0)], hint="lambda1")
    lam0 = b.node("Sub", [b.f32("one_c", 1.0), lam1], hint="lambda0")
    i1 = b.node("Min", [b.node("Add", [i0, b.f32("one_d", 1.0)], hint="i1_next"), last], hint="i1_f")
    p0 = b.node("Gather", [phase, b.cast(i0, I64, "i0")], {"axis": 1}, hint="p0")                # [1, L, dim]
    p1 = b.node("Gather", [phase, b.cast(i1, I64, "i1")], {"axis": 1}, hint="p1")
    lam0, lam1 = (b.node("Unsqueeze", [v, b.i64(f"{v}_ax", [0, 2])], hint=f"{v}_col") for v in (lam0, lam1))
    q = b.cast(b.node("Mul", [p1, lam1], hint="p1_l1"), F64, "p1_l1_d")
    fma = b.node("Add", [b.node("Mul", [b.cast(p0, F64, "p0_d"), b.cast(lam0, F64, "l0_d")], hint="p0_l0",
                                dtype=F64), q], hint="phase_fma", dtype=F64)
    return b.cast(fma, F32, "sample_phase")


def _sinegen_phase(b: _HiFTBuilder, f0: str, phase_in: str, cfg: dict, s: int, dim: int) -> str:
    """SineGen's (22050 Hz) angle before sin(): 2 pi (cumsum over samples of f0 k / sr) % 1 + phase."""
    step = b.node("Div", [b.node("Mul", [f0, b.f32("harmonics", np.arange(1, dim + 1))], hint="f0_k"),
                          b.f32("sampling_rate", float(cfg["sampling_rate"]))], hint="step")         # [1, T, dim]
    fixed = b.cast(b.node("Mul", [step, b.f32("fixed_scale", _FIXED)], hint="step_fx"), I64, "step_int")
    # the sum up to sample j of frame d: s x (the steps of frames before d) + (j + 1) x step_d, exact in int64
    before = b.node("CumSum", [b.node("Mul", [fixed, b.i64("s_i64", s)], hint="frame_fx", dtype=I64),
                               b.i64("time_axis", 1)], {"exclusive": 1}, hint="frames_before", dtype=I64)
    within = b.node("Mul", [b.node("Unsqueeze", [fixed, b.i64("ax_j", [2])], hint="step_col", dtype=I64),
                            b.i64("j_plus_1", np.arange(1, s + 1)[:, None])], hint="within", dtype=I64)
    total = b.node("Add", [b.node("Unsqueeze", [before, b.i64("ax_j2", [2])], hint="before_col", dtype=I64), within],
                   hint="cum_fx", dtype=I64)                                                        # [1, T, s, dim]
    total = b.node("Reshape", [total, b.i64("cum_rows", [1, -1, dim])], hint="cum_rows_fx", dtype=I64)
    total = b.node("Mul", [b.cast(total, F32, "cum_f"), b.f32("fixed_unscale", 1.0 / _FIXED)], hint="cumsum")
    theta = b.node("Mul", [b.node("Mod", [total, b.f32("one", 1.0)], {"fmod": 1}, hint="cum_mod"),
                           b.f32("two_pi", 2 * np.pi)], hint="theta")
    return b.node("Add", [theta, phase_in], hint="angle")


def _source(b: _HiFTBuilder, f0: str, phase_in: str, noise: str, frames: str, cfg: dict, s: int) -> str:
    """The excitation [1, 1, T x s]: harmonic sines, uv, noise mix, l_linear + tanh."""
    dim = int(cfg["nb_harmonics"]) + 1
    if uses_sinegen2(cfg) and s < 3:
        raise NotImplementedError(f"an upsampling scale of {s} samples a frame (SineGen2's initial phase is "
                                  "only built for scales >= 3, where the original never reads it)")
    if cfg["causal"]:     # nearest upsampling of the phase: one sin() a frame, held over its s samples
        angle = _frame_phase(b, f0, cfg, s, dim)
    elif uses_sinegen2(cfg):
        angle = _sinegen2_phase(b, f0, frames, cfg, s, dim)
    else:
        angle = _sinegen_phase(b, f0, phase_in, cfg, s, dim)
    amp, sigma = np.float32(cfg["nsf_alpha"]), np.float32(cfg["nsf_sigma"])
    sines = b.node("Mul", [b.node("Sin", [angle], hint="sin"), b.f32("sine_amp", amp)], hint="sines")
    # uv and the noise amplitude per frame, applied to the frame's s samples
    voiced = b.node("Greater", [f0, b.f32("voiced_threshold", float(cfg["nsf_voiced_threshold"]))], hint="voiced",
                    dtype=BOOL)
    uv = b.node("Unsqueeze", [b.cast(voiced, F32, "uv_frames"), b.i64("uv_ax", [2])], hint="uv")      # [1, T, 1, 1]
    noise_amp = b.node("Where", [b.node("Unsqueeze", [voiced, b.i64("v_ax", [2])], hint="voiced_4d", dtype=BOOL),
                                 b.f32("noise_voiced", sigma), b.f32("noise_unvoiced", amp / np.float32(3))],
                       hint="noise_amp")
    frames4 = b.i64("by_frame", [1, -1, s, dim])
    sines = (b.node("Unsqueeze", [sines, b.i64("held_ax", [2])], hint="sines_4d") if cfg["causal"] else
             b.node("Reshape", [sines, frames4], hint="sines_4d"))                                   # [1, T, s|1, dim]
    sines = b.node("Mul", [sines, uv], hint="voiced_sines")
    drawn = b.node("Mul", [b.node("Reshape", [noise, frames4], hint="noise_4d"), noise_amp], hint="noise_scaled")
    mixed = b.node("Reshape", [b.node("Add", [sines, drawn], hint="mixed_4d"), b.i64("rows", [1, -1, dim])],
                   hint="mixed")
    merged = b.linear(mixed, "m_source.l_linear", "l_linear", dim, 1, activation="tanh")             # [1, L, 1]
    return b.node("Reshape", [merged, b.i64("source_3d", [1, 1, -1])], hint="source")


def _stft(b: _HiFTBuilder, source: str, n_fft: int, hop: int, window: np.ndarray) -> str:
    """torch.stft(center=True, reflect, hann) as [1, real bins + imaginary bins, frames]."""
    k, n = np.arange(n_fft // 2 + 1)[:, None], np.arange(n_fft)[None]
    angle = 2 * np.pi * ((k * n) % n_fft) / n_fft
    basis = np.concatenate([np.cos(angle), -np.sin(angle)]) * window[None]
    padded = b.reflect_pad(source, n_fft // 2, n_fft // 2, "stft_pad")
    return b.node("Conv", [padded, b.const("stft_basis", basis[:, None, :].astype(np.float32))],
                  {"kernel_shape": [n_fft], "strides": [hop], "pads": [0, 0], "dilations": [1], "group": 1},
                  hint="source_stft")


def _istft(b: _HiFTBuilder, spec: str, n_fft: int, hop: int, window: np.ndarray) -> str:
    """torch.istft(center=True, hann) of [1, real bins + imaginary bins, frames] -> [1, 1, hop x (frames - 1)]."""
    bins = n_fft // 2 + 1
    k, n = np.arange(bins)[:, None], np.arange(n_fft)[None]
    angle = 2 * np.pi * ((k * n) % n_fft) / n_fft
    weight = np.where((k == 0) | (2 * k == n_fft), 1.0, 2.0) / n_fft      # the one-sided spectrum's doubled bins
    basis = np.concatenate([np.cos(angle) * weight, -np.sin(angle) * weight]) * window[None]
    ola = {"kernel_shape": [n_fft], "strides": [hop], "pads": [0, 0], "dilations": [1], "group": 1}
    frames = b.node("ConvTranspose", [spec, b.const("istft_basis", basis[:, None, :].astype(np.float32))], ola,
                    hint="istft_ola")
    count = b.node("Concat", [b.i64("env_lead", [1, 1]), b.dim(spec, 2, "spec_frames")], {"axis": 0},
                   hint="env_shape", dtype=I64)
    ones = b.node("Expand", [b.f32("env_one", np.ones((1, 1, 1))), count], hint="env_ones")
    envelope = b.node("ConvTranspose", [ones, b.const("window_sq", (window ** 2)[None, None].astype(np.float32))],
                      ola, hint="istft_envelope")
    y = b.node("Div", [frames, envelope], hint="istft_norm")
    end = b.node("Sub", [b.dim(y, 2, "ola_len"), b.i64("istft_trim", [n_fft // 2])], hint="istft_end", dtype=I64)
    return b.node("Slice", [y, b.i64("istft_start", [n_fft // 2]), end, b.i64("istft_axis", [2])], hint="istft")


def build_cosyvoice_hift_source_graph(config: Mapping, weights: Mapping[str, np.ndarray]) -> Graph:
    """The harmonic source alone, from a given f0: inputs f0 [1, T, 1] (Hz a mel frame), phase and noise as the
    vocoder's; output excitation [1, 1, T x s] (the original inference's second output). For checking the phase
    arithmetic over long inputs without the F0 predictor's rounding in the way."""
    cfg = hift_config(config)
    root = "generator." if any(k.startswith("generator.") for k in weights) else ""
    b = _HiFTBuilder("cosyvoice_hift_source", PrefixView(weights, root) if root else weights)
    dim = int(cfg["nb_harmonics"]) + 1
    f0 = b.input("f0", [1, -1, 1])
    phase_in, noise = b.input("phase", [dim]), b.input("noise", [1, -1, dim])
    out = _source(b, f0, phase_in, noise, b.dim(f0, 1, "frames"), cfg, upsample_scale(cfg))
    b.g.outputs.append(b.rename(out, "excitation"))
    return b.g


def build_cosyvoice_hift_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                               weight_format: str = "float32") -> Graph:
    """`config`: the CosyVoice yaml's hift kwargs (CosyVoice 2's when left out); `weights`: hift.pt's tensors."""
    if weight_format != "float32":
        raise ValueError(f"weight_format {weight_format!r}: the HiFT vocoder is convolutions only and is built with "
                         "float32 weights")
    cfg = hift_config(config)
    root = "generator." if any(k.startswith("generator.") for k in weights) else ""
    b = _HiFTBuilder("cosyvoice_hift", PrefixView(weights, root) if root else weights, weight_format)
    n_fft, hop = int(cfg["istft_params"]["n_fft"]), int(cfg["istft_params"]["hop_len"])
    rates = [int(u) for u in cfg["upsample_rates"]]
    s, dim, base = upsample_scale(cfg), int(cfg["nb_harmonics"]) + 1, int(cfg["base_channels"])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)       # periodic hann, float64
    window = window.astype(np.float32).astype(np.float64)                   # torch uses the float32 window

    mel = b.input("mel", [1, int(cfg["in_channels"]), -1])
    phase_in = b.input("phase", [dim])
    noise = b.input("noise", [1, -1, dim])
    frames = b.dim(mel, 2, "frames")

    f0 = _f0_predictor(b, mel, cfg)
    spec = _stft(b, _source(b, f0, phase_in, noise, frames, cfg, s), n_fft, hop, window)

    causal = cfg["causal"]
    if causal:
        look = int(cfg["conv_pre_look_right"])
        x = b.causal_conv(mel, "conv_pre", "conv_pre", int(cfg["in_channels"]), base, look + 1, right=True)
    else:
        x = b.conv(mel, "conv_pre", "conv_pre", int(cfg["in_channels"]), base, 7, pad=3)
    strides = np.cumprod([1] + rates[::-1][:-1])[::-1]
    kernels, nk = cfg["resblock_kernel_sizes"], len(cfg["resblock_kernel_sizes"])
    sources = list(zip(strides, cfg["source_resblock_kernel_sizes"], cfg["source_resblock_dilation_sizes"]))
    if len(sources) < len(rates):
        raise ValueError("fewer source resblocks than upsampling stages")
    for i, (u, k) in enumerate(zip(rates, cfg["upsample_kernel_sizes"])):
        c_in, ch, k, u = base // 2 ** i, base // 2 ** (i + 1), int(k), int(u)
        x = b.leaky(x, cfg["lrelu_slope"], f"up{i}_act")
        x = (b.upsample_conv(x, f"ups.{i}", f"up{i}", c_in, ch, k, u) if causal else
             b.conv_transpose(x, f"ups.{i}", f"up{i}", c_in, ch, k, u, (k - u) // 2))
        if i == len(rates) - 1:
            x = b.reflect_pad(x, 1, 0, "last_pad")
        su, sk, sd = sources[i]
        su = int(su)
        si = (b.conv(spec, f"source_downs.{i}", f"src_down{i}", n_fft + 2, ch, 1) if su == 1 else
              b.conv(spec, f"source_downs.{i}", f"src_down{i}", n_fft + 2, ch, 2 * su, stride=su,
                     pads=(su - 1, 0) if causal else (su // 2, su // 2)))
        x = b.node("Add", [x, b.resblock(si, f"source_resblocks.{i}", ch, int(sk), sd, f"src_rb{i}", causal)],
                   hint=f"fuse{i}")
        total = None
        for j, (rk, rd) in enumerate(zip(kernels, cfg["resblock_dilation_sizes"])):
            r = b.resblock(x, f"resblocks.{i * nk + j}", ch, int(rk), rd, f"rb{i}_{j}", causal)
            total = r if total is None else b.node("Add", [total, r], hint=f"rb{i}_sum{j}")
        x = b.node("Div", [total, b.f32(f"kernels{i}", float(nk))], hint=f"rb{i}_mean")
    ch = base // 2 ** len(rates)
    x = b.leaky(x, 0.01, "post_act")
    x = (b.causal_conv(x, "conv_post", "conv_post", ch, n_fft + 2, 7) if causal else
         b.conv(x, "conv_post", "conv_post", ch, n_fft + 2, 7, pad=3))

    bins = n_fft // 2 + 1
    magnitude = b.node("Slice", [x, b.i64("mag_from", [0]), b.i64("mag_to", [bins]), b.i64("ch_axis", [1])],
                       hint="log_magnitude")
    magnitude = b.node("Min", [b.node("Exp", [magnitude], hint="magnitude_raw"), b.f32("mag_max", 100.0)],
                       hint="magnitude")
    angle = b.node("Sin", [b.node("Slice", [x, b.i64("ph_from", [bins]), b.i64("ph_to", [n_fft + 2]),
                                            b.i64("ch_axis2", [1])], hint="phase_raw")], hint="angle_out")
    real = b.node("Mul", [magnitude, b.node("Cos", [angle], hint="angle_cos")], hint="spec_real")
    imag = b.node("Mul", [magnitude, b.node("Sin", [angle], hint="angle_sin")], hint="spec_imag")
    y = _istft(b, b.node("Concat", [real, imag], {"axis": 1}, hint="spec_out"), n_fft, hop, window)
    limit = float(cfg["audio_limit"])
    y = b.node("Clip", [b.node("Reshape", [y, b.i64("wave_2d", [1, -1])], hint="wave_rows"),
                        b.f32("lo", -limit), b.f32("hi", limit)], hint="clamped")
    b.g.outputs.append(b.rename(y, "waveform"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.cosyvoice_hift_graph", "head": "hift",
                         "architecture": f"CosyVoice {GENERATORS[causal]} (mel -> waveform)",
                         "sine_generator": ("SineGen2 (causal: nearest phase, uniform noise)" if causal else
                                            "SineGen2" if uses_sinegen2(cfg) else "SineGen"),
                         "samples_per_frame": str(s), "sampling_rate": str(int(cfg["sampling_rate"])),
                         "weight_format": weight_format})
    return b.g
