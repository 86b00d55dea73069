"""CosyVoice 2's HiFT vocoder (HiFTNet: a neural source filter over an iSTFT-Net, mel [1, 80, T] -> 24 kHz waveform)
and CosyVoice 3's CausalHiFTGenerator in PyTorch, written from the HiFTNet paper (arXiv 2309.09493) and the public
description of FunAudioLLM/CosyVoice's cosyvoice/hifigan/{generator,f0_predictor}.py and
cosyvoice/transformer/convolution.py, with the checkpoint's tensor names (hift.pt, optionally under `generator.`):
the reference model_zoo.multimodal.cosyvoice_hift_graph is tested against. Non-streaming inference: `inference`
returns the original inference(speech_feat)'s waveform (no cache_source; CausalHiFTGenerator: finalize=True),
`source` its excitation. HiFTGenerator.from_config(the yaml's hift kwargs) builds either (see is_causal).

Parts, as the released model runs them:
  * f0_predictor (ConvRNNF0Predictor): five weight-normed Conv1d (kernel 3, padding 1) + ELU, a Linear to one class,
    |.|: f0 in Hz per mel frame.
  * f0 nearest-upsampled by s = prod(upsample_rates) x hop_len samples a frame (480 for CosyVoice 2).
  * m_source (SourceModuleHnNSF): harmonic sines of f0 x (1 .. nb_harmonics + 1), unvoiced (f0 <= threshold) parts
    replaced by noise, merged by l_linear + tanh into one excitation channel.
  * decode: the excitation's STFT (n_fft, hop, hann, centred with reflection), conv_pre, per upsampling stage a
    leaky ReLU (lrelu_slope), a weight-normed ConvTranspose1d (padding (k - u) / 2), after the last stage a reflection
    pad of one sample on the left, plus the source branch (source_downs conv, a source resblock), then the mean of the
    stage's Snake resblocks; leaky ReLU (0.01), conv_post to n_fft + 2 channels: exp() of the first n_fft / 2 + 1 (the
    magnitude, clipped at 100), sin() of the rest (the phase), the inverse STFT (torch.istft, centred, hann) and a
    clamp to +-audio_limit.

Which sine generator. The CosyVoice repository keeps two: `SineGen` (its first generator, used when sampling_rate is
22050, i.e. CosyVoice 1's HiFT) and `SineGen2` (sinegen_type '2': every other rate, so CosyVoice 2's 24 kHz HiFT). Both
are here, chosen by sampling_rate exactly as the original chooses:
  * SineGen2 (24 kHz, CosyVoice 2): per sample rad = (f0 k / sr) % 1 (cycles a sample, the `% 1` before any sum);
    the random initial phase `rand_ini` (uniform [0, 1) cycles, harmonic 0 set to 0) is added to sample 0 only;
    rad is linearly interpolated down by 1 / s (align_corners False), cumulatively summed at the frame rate,
    x 2 pi, x s, linearly interpolated back up by s; sin, x nsf_alpha. With s >= 3 the downsampling never reads
    sample 0, so rand_ini does not change the output: the original behaves so and this reference keeps it.
  * SineGen (22050 Hz, CosyVoice 1): theta = 2 pi (cumsum over samples of f0 k / sr) % 1, plus a random phase
    uniform(-pi, pi) per harmonic (harmonic 0 set to 0), nsf_alpha sin(theta + phase).
  Then for both: uv = f0 > nsf_voiced_threshold; noise = (uv nsf_sigma + (1 - uv) nsf_alpha / 3) x N(0, 1) draws shaped
  as the sines [1, samples, nb_harmonics + 1]; sines x uv + noise; excitation = tanh(l_linear(.)).
The random draws are arguments here: `phase` [nb_harmonics + 1] (rand_ini in cycles for SineGen2, radians for
SineGen) and `noise` [1, samples, nb_harmonics + 1] (the standard normal draw). Given None they are drawn with torch in
the original's order (the phase; the sines' noise, by torch.randn_like of a tensor with the original sine tensor's
strides: SineGen2's is a transposed view, SineGen's a contiguous [1, dim, samples], and torch's normal generator
gives other numbers for other layouts; the source module's unused noise), so under one torch seed the output equals
the original's.

CosyVoice 3's CausalHiFTGenerator (with CausalConvRNNF0Predictor), whole utterance (the original's
inference(speech_feat, finalize=True)): the same parameter names and the same flow, with these differences:
  * every convolution keeps its input's length by zero padding on one side (the original's CausalConv1d /
    CausalConv1dUpsample / CausalConv1dDownSample of cosyvoice/transformer/convolution.py, Conv1d subclasses, so
    their weights are Conv1d's [out, in, k]): conv_pre has kernel conv_pre_look_right + 1 padded on the right (it
    looks conv_pre_look_right frames ahead; with finalize=True those are zeros at the end); the resblocks' convs and
    conv_post pad (k - 1) x dilation on the left; each upsampling stage is a nearest upsampling by u, a left pad of
    k - 1 and a stride-1 Conv1d (no ConvTranspose1d); source_downs pad u - 1 on the left before their stride-u
    convolution (kernel 2u).
  * the F0 predictor: its first conv has kernel 4 padded 3 on the right, the other four kernel 3 padded 2 on the left;
    the original's inference runs it in float64 (and rounds f0 to float32), as this reference does.
  * the source (SineGen2 with causal=True; the original builds no causal SineGen, so 22050 Hz is refused): the
    phase is upsampled from the frame rate by *nearest* (not linear) interpolation, so the sines are constant over
    each frame's samples; the initial phase rand_ini and the noise are drawn once, when the module is built
    (torch.rand: rand_ini [1, 9], then a table torch.rand(1, 300 x 24000, 9)), and every call uses the table's
    first samples: the noise is *uniform* [0, 1) (not normal), the same on every call, and the original stops at
    300 s. Here rand_ini is drawn at construction as the original draws it, and the table's first L rows are made
    on demand from the generator state saved right after it (CPU torch.rand is serial, so they are the rows the
    original's table holds): under one torch seed and the same construction order (the F0 predictor built first, as
    HyperPyYAML builds the original's argument) the draws equal the original's. The original fixes 9 = nb_harmonics
    + 1 in those shapes; this reference uses nb_harmonics + 1.
  Nothing else changes (STFT, fusion, resblock means, conv_post, iSTFT, clamp).

Numerics worth knowing (float32, as the original): the SineGen2 phase before its sin() is 2 pi s x (a frame-rate sum
of per-sample cycles): about 1e5 .. 1e6 radians after tens of seconds, where a float32 ulp is 0.01 .. 0.06 rad. The
original is therefore itself sensitive there (CPU torch sums in double, CUDA in float; a relative change of 1e-7 in f0
moves late samples' phase by a few hundredths of a radian)."""
from __future__ import annotations

import copy
from typing import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from model_zoo.multimodal.cosyvoice_hift_graph import GENERATORS, is_causal  # noqa: F401 (one rule for both)


def _padding(kernel: int, dilation: int = 1) -> int:
    return (kernel * dilation - dilation) // 2


def hann_window(n: int) -> torch.Tensor:
    """The periodic hann window (scipy's get_window('hann', n, fftbins=True)) in float32."""
    k = np.arange(n, dtype=np.float64)
    return torch.from_numpy((0.5 - 0.5 * np.cos(2.0 * np.pi * k / n)).astype(np.float32))


def uses_sinegen2(config: Mapping) -> bool:
    """SineGen2 unless the rate is 22050 Hz (the original's rule)."""
    return int(config.get("sampling_rate", 22050)) != 22050




class Snake(nn.Module):
    """x + sin(alpha x)^2 / (alpha + 1e-9), alpha per channel (linear scale)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha[None, :, None]
        return x + (1.0 / (a + 1e-9)) * torch.pow(torch.sin(x * a), 2)


def causal_padding(kernel: int, dilation: int = 1) -> int:
    """The zeros CausalConv1d pads, by the original's formula; it keeps the length only when it is (k - 1) x d
    (the original asserts that at run time; refused here when built)."""
    pad = int((kernel * dilation - dilation) / 2) * 2 + (kernel + 1) % 2
    if pad != (kernel - 1) * dilation:
        raise ValueError(f"a causal convolution of kernel {kernel}, dilation {dilation} would change the length "
                         "(the original fails on it too)")
    return pad


class CausalConv1d(nn.Conv1d):
    """A stride-1 Conv1d keeping the length: `causal_padding` zeros on the left ('left': the past only) or on the
    right ('right': looks ahead). No cache: the whole-utterance (finalize=True) form."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 causal_type: str = "left"):
        super().__init__(in_channels, out_channels, kernel_size, 1, padding=0, dilation=dilation)
        if stride != 1 or causal_type not in ("left", "right"):
            raise ValueError("CausalConv1d: stride 1, causal_type 'left' or 'right'")
        self.causal_padding, self.causal_type = causal_padding(kernel_size, dilation), causal_type

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = (self.causal_padding, 0) if self.causal_type == "left" else (0, self.causal_padding)
        return super().forward(F.pad(x, pad))


class CausalConv1dUpsample(nn.Conv1d):
    """Nearest upsampling by `stride`, then k - 1 zeros on the left and a stride-1 Conv1d (kernel k)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1):
        super().__init__(in_channels, out_channels, kernel_size, 1, padding=0)
        self.factor, self.causal_padding = int(stride), kernel_size - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=self.factor, mode="nearest")
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class CausalConv1dDownSample(nn.Conv1d):
    """stride - 1 zeros on the left, then a strided Conv1d (kernel a multiple of the stride)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding=0)
        if stride == 1 or kernel_size % stride:
            raise ValueError("CausalConv1dDownSample: stride > 1 dividing the kernel")
        self.causal_padding = stride - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class ResBlock(nn.Module):
    """Per dilation: Snake, conv (dilated), Snake, conv, residual add. causal: the convs pad on the left only."""

    def __init__(self, channels: int, kernel: int, dilations, causal: bool = False):
        super().__init__()

        def conv(d):
            if causal:
                return CausalConv1d(channels, channels, kernel, 1, dilation=d, causal_type="left")
            return nn.Conv1d(channels, channels, kernel, 1, dilation=d, padding=_padding(kernel, d))

        self.convs1 = nn.ModuleList(weight_norm(conv(d)) for d in dilations)
        self.convs2 = nn.ModuleList(weight_norm(conv(1)) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for a1, c1, a2, c2 in zip(self.activations1, self.convs1, self.activations2, self.convs2):
            x = c2(a2(c1(a1(x)))) + x
        return x


class ConvRNNF0Predictor(nn.Module):
    """mel [B, in_channels, T] -> f0 [B, T] (Hz, >= 0)."""

    def __init__(self, num_class: int = 1, in_channels: int = 80, cond_channels: int = 512):
        super().__init__()
        layers = []
        for i in range(5):
            layers += [weight_norm(nn.Conv1d(in_channels if i == 0 else cond_channels, cond_channels, 3, padding=1)),
                       nn.ELU()]
        self.num_class = num_class
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.abs(self.classifier(self.condnet(x).transpose(1, 2)).squeeze(-1))


class CausalConvRNNF0Predictor(ConvRNNF0Predictor):
    """CosyVoice 3's: the first conv kernel 4 looking 3 frames ahead (zeros there at the end), the other four kernel
    3 over the past; the same names as ConvRNNF0Predictor's."""

    def __init__(self, num_class: int = 1, in_channels: int = 80, cond_channels: int = 512):
        nn.Module.__init__(self)
        layers = []
        for i in range(5):
            conv = (CausalConv1d(in_channels, cond_channels, 4, causal_type="right") if i == 0 else
                    CausalConv1d(cond_channels, cond_channels, 3, causal_type="left"))
            layers += [weight_norm(conv), nn.ELU()]
        self.num_class = num_class
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)


def _f0_predictor(config: Mapping | nn.Module | None, causal: bool) -> nn.Module:
    if isinstance(config, nn.Module):
        return config
    cfg = dict(config or {})
    target = str(cfg.pop("__target__", "") or "").rsplit(".", 1)[-1]
    want = "CausalConvRNNF0Predictor" if causal else "ConvRNNF0Predictor"
    if target and target != want:
        raise NotImplementedError(f"f0_predictor {target} with a {'causal ' if causal else ''}generator (expected "
                                  f"{want})")
    return (CausalConvRNNF0Predictor if causal else ConvRNNF0Predictor)(**cfg)


class SourceModuleHnNSF(nn.Module):
    """Harmonic sines of an audio-rate f0 merged into one excitation channel (see the module docstring).
    causal (CausalHiFTGenerator's, SineGen2 only): nearest upsampling of the phase, and the draws made once, here."""

    def __init__(self, sampling_rate: int, upsample_scale: int, harmonic_num: int, sine_amp: float,
                 noise_std: float, voiced_threshold: float, sinegen2: bool, causal: bool = False):
        super().__init__()
        self.sampling_rate, self.upsample_scale, self.dim = sampling_rate, int(upsample_scale), harmonic_num + 1
        self.sine_amp, self.noise_std, self.voiced_threshold = sine_amp, noise_std, voiced_threshold
        self.sinegen2, self.causal = sinegen2, causal
        if causal:
            if not sinegen2:
                raise NotImplementedError("CausalHiFTGenerator at 22050 Hz (SineGen): the original builds its causal "
                                          "source with SineGen2 only")
            # the original's SineGen2(causal=True) draws rand_ini, then its noise table, when built
            self.rand_ini = torch.rand(1, self.dim)
            self.rand_ini[:, 0] = 0
            self.table_state = torch.get_rng_state()
        self.l_linear = nn.Linear(harmonic_num + 1, 1)

    def draw_phase(self) -> torch.Tensor:
        if self.causal:
            return self.rand_ini.view(-1).clone()
        if self.sinegen2:
            p = torch.rand(1, self.dim)
        else:
            p = torch.distributions.uniform.Uniform(-np.pi, np.pi).sample((1, self.dim, 1))
        p.view(-1)[0] = 0
        return p.view(-1)

    def noise_table(self, samples: int) -> torch.Tensor:
        """causal: the first `samples` rows of the original's table torch.rand(1, 300 x 24000, dim)."""
        g = torch.Generator()
        g.set_state(self.table_state)
        return torch.rand(1, samples, self.dim, generator=g)

    def _sines(self, f0: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """f0 [1, L, 1] -> [1, L, dim], before the sine amplitude."""
        harmonics = torch.arange(1, self.dim + 1, dtype=f0.dtype)
        if self.sinegen2:
            rad = (f0 * harmonics / self.sampling_rate) % 1                       # [1, L, dim] cycles a sample
            rad[:, 0, :] = rad[:, 0, :] + phase[None]
            per_frame = F.interpolate(rad.transpose(1, 2), scale_factor=1 / self.upsample_scale, mode="linear")
            cycles = torch.cumsum(per_frame.transpose(1, 2), dim=1) * 2 * np.pi   # [1, T, dim]
            up = F.interpolate(cycles.transpose(1, 2) * self.upsample_scale, scale_factor=self.upsample_scale,
                               mode="nearest" if self.causal else "linear")
            return torch.sin(up.transpose(1, 2))
        steps = (f0 * harmonics / self.sampling_rate).transpose(1, 2)            # [1, dim, L]
        theta = 2 * np.pi * (torch.cumsum(steps, dim=-1) % 1)
        return torch.sin(theta + phase[None, :, None]).transpose(1, 2)

    def forward(self, f0: torch.Tensor, phase: torch.Tensor | None = None,
                noise: torch.Tensor | None = None) -> torch.Tensor:
        """f0 [1, L, 1] (audio rate) -> excitation [1, L, 1]."""
        if phase is None:
            phase = self.draw_phase()
        sines = self.sine_amp * self._sines(f0, phase.to(torch.float32).reshape(-1))
        uv = (f0 > self.voiced_threshold).to(torch.float32)
        amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        if noise is None and self.causal:
            noise = self.noise_table(sines.shape[1])
        elif noise is None:   # randn_like of a tensor laid out as the original's sines (torch's draw depends on it)
            laid_out = sines if self.sinegen2 else sines.transpose(1, 2)
            noise = torch.randn_like(laid_out) if self.sinegen2 else torch.randn_like(laid_out).transpose(1, 2)
            torch.randn_like(uv)   # the original's noise-branch draw (unused by HiFT), for the same random stream
        sines = sines * uv + amp * noise.reshape(sines.shape)
        return torch.tanh(self.l_linear(sines))


def _generator_args(in_channels: int = 80, base_channels: int = 512, nb_harmonics: int = 8,
                    sampling_rate: int = 24000, nsf_alpha: float = 0.1, nsf_sigma: float = 0.003,
                    nsf_voiced_threshold: float = 10, upsample_rates=(8, 5, 3), upsample_kernel_sizes=(16, 11, 7),
                    istft_params: Mapping | None = None, resblock_kernel_sizes=(3, 7, 11),
                    resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
                    source_resblock_kernel_sizes=(7, 7, 11),
                    source_resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)), lrelu_slope: float = 0.1,
                    audio_limit: float = 0.99, f0_predictor: Mapping | nn.Module | None = None) -> dict:
    """The original HiFTGenerator's arguments (CausalHiFTGenerator's too, less conv_pre_look_right and causal) with
    its defaults, as a dict; an unknown one is a TypeError."""
    return dict(locals())


class HiFTGenerator(nn.Module):
    def __init__(self, causal: bool = False, **kwargs):
        """kwargs: the original's arguments (_generator_args)."""
        super().__init__()
        if causal:
            raise ValueError("causal=True is CausalHiFTGenerator's (or use HiFTGenerator.from_config)")
        self._build(_generator_args(**kwargs), causal=False)

    def _build(self, a: dict, causal: bool, look_right: int = 0) -> None:
        """The layers (the original's names), for HiFTGenerator (causal False) and CausalHiFTGenerator."""
        istft = dict(a["istft_params"] or {"n_fft": 16, "hop_len": 4})
        self.n_fft, self.hop = int(istft["n_fft"]), int(istft["hop_len"])
        rates = [int(u) for u in a["upsample_rates"]]
        self.upsample_scale = int(np.prod(rates)) * self.hop
        self.lrelu_slope, self.audio_limit, self.causal = a["lrelu_slope"], a["audio_limit"], causal
        self.num_kernels, self.num_upsamples = len(a["resblock_kernel_sizes"]), len(rates)
        base, spec = int(a["base_channels"]), self.n_fft + 2
        if causal:   # built first, as HyperPyYAML builds the original's argument (the random stream's order)
            self.f0_predictor = _f0_predictor(a["f0_predictor"], True)
        self.m_source = SourceModuleHnNSF(a["sampling_rate"], self.upsample_scale, a["nb_harmonics"], a["nsf_alpha"],
                                          a["nsf_sigma"], a["nsf_voiced_threshold"],
                                          uses_sinegen2({"sampling_rate": a["sampling_rate"]}), causal)
        if causal:
            self.conv_pre = weight_norm(CausalConv1d(a["in_channels"], base, look_right + 1, causal_type="right"))
            self.ups = nn.ModuleList(
                weight_norm(CausalConv1dUpsample(base // 2 ** i, base // 2 ** (i + 1), k, u))
                for i, (u, k) in enumerate(zip(rates, a["upsample_kernel_sizes"])))
        else:
            self.conv_pre = weight_norm(nn.Conv1d(a["in_channels"], base, 7, 1, padding=3))
            self.ups = nn.ModuleList(
                weight_norm(nn.ConvTranspose1d(base // 2 ** i, base // 2 ** (i + 1), k, u, padding=(k - u) // 2))
                for i, (u, k) in enumerate(zip(rates, a["upsample_kernel_sizes"])))
        # the source branch of stage i meets the stage's output: strided by the rates of the stages after it
        strides = np.cumprod([1] + rates[::-1][:-1])[::-1]
        self.source_downs, self.source_resblocks = nn.ModuleList(), nn.ModuleList()
        for i, (u, k, d) in enumerate(zip(strides, a["source_resblock_kernel_sizes"],
                                          a["source_resblock_dilation_sizes"])):
            ch, u = base // 2 ** (i + 1), int(u)
            if causal:
                self.source_downs.append(CausalConv1d(spec, ch, 1, 1) if u == 1 else
                                         CausalConv1dDownSample(spec, ch, u * 2, u))
            else:
                self.source_downs.append(nn.Conv1d(spec, ch, 1, 1) if u == 1 else
                                         nn.Conv1d(spec, ch, u * 2, u, padding=u // 2))
            self.source_resblocks.append(ResBlock(ch, k, d, causal))
        self.resblocks = nn.ModuleList(
            ResBlock(base // 2 ** (i + 1), k, d, causal)
            for i in range(len(rates)) for k, d in zip(a["resblock_kernel_sizes"], a["resblock_dilation_sizes"]))
        ch = base // 2 ** len(rates)
        self.conv_post = weight_norm(CausalConv1d(ch, spec, 7, 1, causal_type="left") if causal else
                                     nn.Conv1d(ch, spec, 7, 1, padding=3))
        self.register_buffer("stft_window", hann_window(self.n_fft), persistent=False)
        if not causal:
            self.f0_predictor = _f0_predictor(a["f0_predictor"], False)

    @classmethod
    def from_config(cls, config: Mapping) -> "HiFTGenerator":
        """The yaml's hift kwargs (`causal` / `__target__` keys allowed): a HiFTGenerator or CausalHiFTGenerator."""
        cfg = dict(config)
        causal = is_causal(cfg)
        cfg.pop("__target__", None)
        cfg.pop("causal", None)
        return (CausalHiFTGenerator if causal else HiFTGenerator)(**cfg)

    def f0(self, speech_feat: torch.Tensor) -> torch.Tensor:
        """mel [1, C, T] -> f0 [1, T]."""
        return self.f0_predictor(speech_feat)

    def source(self, speech_feat: torch.Tensor, phase: torch.Tensor | None = None,
               noise: torch.Tensor | None = None) -> torch.Tensor:
        """mel [1, C, T] -> the excitation [1, 1, T x upsample_scale] (the original inference's second output)."""
        f0 = self.f0(speech_feat)
        f0 = torch.repeat_interleave(f0[:, None], self.upsample_scale, dim=2).transpose(1, 2)   # nearest: [1, L, 1]
        return self.m_source(f0, phase, noise).transpose(1, 2)

    def decode(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        spec = torch.view_as_real(torch.stft(s[:, 0], self.n_fft, self.hop, self.n_fft, window=self.stft_window,
                                             return_complex=True))
        s_stft = torch.cat([spec[..., 0], spec[..., 1]], dim=1)
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = self.ups[i](F.leaky_relu(x, self.lrelu_slope))
            if i == self.num_upsamples - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](s_stft))
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))
        half = self.n_fft // 2 + 1
        magnitude = torch.clip(torch.exp(x[:, :half]), max=1e2)
        angle = torch.sin(x[:, half:])
        y = torch.istft(torch.complex(magnitude * torch.cos(angle), magnitude * torch.sin(angle)), self.n_fft,
                        self.hop, self.n_fft, window=self.stft_window)
        return torch.clamp(y, -self.audio_limit, self.audio_limit)

    @torch.inference_mode()
    def inference(self, speech_feat: torch.Tensor, phase: torch.Tensor | None = None,
                  noise: torch.Tensor | None = None) -> torch.Tensor:
        """mel [1, C, T] -> waveform [1, T x upsample_scale]: the original's inference(speech_feat) without a
        cache_source (CausalHiFTGenerator: finalize=True), its first output."""
        return self.decode(speech_feat, self.source(speech_feat, phase, noise))


class CausalHiFTGenerator(HiFTGenerator):
    """CosyVoice 3's vocoder, whole utterance (see the module docstring); `phase` / `noise` given to inference
    replace rand_ini / the noise table's rows (noise: the uniform [0, 1) draw, [1, T x s, nb_harmonics + 1])."""

    def __init__(self, conv_pre_look_right: int = 4, causal: bool = True, **kwargs):
        """kwargs: HiFTGenerator's (_generator_args)."""
        nn.Module.__init__(self)
        if not causal:
            raise ValueError("CausalHiFTGenerator with causal=False (use HiFTGenerator)")
        if int(conv_pre_look_right) < 1:
            raise ValueError("conv_pre_look_right must be >= 1")
        self.conv_pre_look_right = int(conv_pre_look_right)
        self._build(_generator_args(**kwargs), causal=True, look_right=self.conv_pre_look_right)

    def f0(self, speech_feat: torch.Tensor) -> torch.Tensor:
        """The original's inference runs the F0 predictor in float64 and rounds f0 to the mel's dtype (here on a
        float64 copy, leaving this module as it is)."""
        return copy.deepcopy(self.f0_predictor).to(torch.float64)(speech_feat.to(torch.float64)).to(speech_feat)


def weights_of(module: nn.Module) -> dict[str, np.ndarray]:
    """The state dict as float32 NumPy arrays (what the graph builder reads)."""
    return {k: v.detach().cpu().numpy().astype(np.float32, copy=True) for k, v in module.state_dict().items()}


def legacy_weight_norm_names(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same tensors under torch.nn.utils.weight_norm's names (weight_g / weight_v), as older hift.pt hold them."""
    out = {}
    for k, v in weights.items():
        k = k.replace("parametrizations.weight.original0", "weight_g").replace("parametrizations.weight.original1",
                                                                                "weight_v")
        out[k] = v
    return out
