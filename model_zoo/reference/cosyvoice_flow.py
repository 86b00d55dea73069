"""CosyVoice 2's flow-matching acoustic model (speech tokens + prompt mel + speaker x-vector -> 80-bin mel) in
PyTorch, written from the public description of CosyVoice 2 / Matcha-TTS with the module and tensor names of the
released flow.pt (its own state_dict: input_embedding.*, spk_embed_affine_layer.*, encoder.*, encoder_proj.*,
decoder.estimator.*), so that file loads with load_state_dict(strict=True). The reference the runtime's graphs
(model_zoo.multimodal.cosyvoice_flow_graph) and lite.cosyvoice_flow are tested against. Non-streaming inference.

- Speaker: the x-vector L2-normalised, then spk_embed_affine_layer (-> 80).
- Tokens (prompt tokens, then the target's) embedded by input_embedding; the upsampling Conformer encoder:
  `embed` (Linear, LayerNorm, x sqrt(d)) with ESPnet relative positions (2T - 1 sinusoids of the relative positions
  T - 1 .. -(T - 1), the relative shift picking position i - j for query i, key j); a look-ahead layer (a kernel
  L + 1 convolution over the next L tokens, LeakyReLU, a causal kernel-3 convolution, a residual); pre-LayerNorm
  Conformer layers without macaron FFN or convolution module (relative-position self-attention with the u / v
  biases, a SiLU FFN); `up_layer` (nearest repeat x token_mel_ratio, left pad 2r, a kernel 2r + 1 convolution);
  `up_embed` (as embed) and `up_encoders`; after_norm; then encoder_proj (-> 80): mu, token_mel_ratio frames per
  token.
- The conditional flow matching decoder (`decoder`): the noise is a fixed table (flow_noise_table), cut to the
  length; t runs the cosine schedule 1 - cos(pi / 2 s) over n_timesteps Euler steps; each step evaluates the
  estimator on a batch of two (conditioned: mu, spks, cond; unconditioned: those zero) and mixes them with the
  classifier-free guidance rate: (1 + r) d_cond - r d_uncond.
- The estimator (`decoder.estimator`), a 1-D U-Net as Matcha-TTS's decoder with causal convolutions: the sinusoidal
  time embedding (x 1000, [sin, cos]) through time_mlp (Linear, SiLU, Linear); input [x, mu, spks repeated, cond] on
  channels; a down block, mid blocks and an up block (the down block's output concatenated on channels), each a
  causal ResNet block (two causal kernel-3 convolution + LayerNorm over channels + Mish blocks, Mish(time) projected
  and added between them, a 1x1 residual convolution) and transformer blocks (LayerNorm, self-attention over the
  valid frames with heads x head_dim inner width, LayerNorm, a GELU feed-forward of 4x width), then a causal
  kernel-3 convolution; the final causal block and a 1x1 projection, masked.

CosyVoice 2's released encoder hard-codes 4 up_encoders, a 3-token look-ahead over 512 channels and a stride-2
up_layer; here those are encoder.num_up_blocks (a key of ours, default 4, so tests can build fewer),
pre_lookahead_len, encoder.output_size and token_mel_ratio (equal to the hard-coded values in the released config)."""
from __future__ import annotations

import functools
import math
from typing import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from model_zoo.multimodal.cosyvoice_flow_graph import CosyVoiceFlowConfig as FlowSpec

NOISE_SHAPE = (1, 80, 50 * 300)   # the CFM's fixed noise: 300 s of 50 Hz mel frames


@functools.lru_cache(maxsize=1)
def _noise_table() -> np.ndarray:
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(list(NOISE_SHAPE), generator=generator).numpy()
    table.setflags(write=False)
    return table


def flow_noise_table() -> np.ndarray:
    """The CFM's initial noise [1, 80, 15000] float32: what the original draws once with torch.randn after seeding
    torch with 0, drawn here from a private generator (the global RNG is left alone). Mel frame t of an utterance
    starts from column t."""
    return _noise_table().copy()


# ---------------------------------------------------------------------------------------------------------------
# the upsampling Conformer encoder
def relative_sinusoids(length: int, d: int) -> torch.Tensor:
    """[2 length - 1, d]: the sinusoids of relative positions length - 1, ..., 0, ..., -(length - 1) (sin at even,
    cos at odd columns of position x 10000^(-2i / d))."""
    position = torch.arange(length - 1, -length, -1, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe = torch.zeros(2 * length - 1, d)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq)
    return pe


def relative_shift(scores: torch.Tensor) -> torch.Tensor:
    """[B, H, T, 2T - 1] scores against the relative positions T - 1 .. -(T - 1) -> [B, H, T, T] with entry (i, j)
    the one of relative position i - j, by the Transformer-XL shift: a zero column prepended ([T, 2T]), read as
    [2T, T], the first row dropped, read as [T, 2T - 1], the first T columns kept."""
    B, H, T, W = scores.shape
    padded = torch.cat([scores.new_zeros(B, H, T, 1), scores], dim=-1).view(B, H, W + 1, T)
    return padded[:, :, 1:].reshape(B, H, T, W)[..., :T]


class _RelPositionAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.linear_q, self.linear_k, self.linear_v, self.linear_out = (nn.Linear(d, d) for _ in range(4))
        self.linear_pos = nn.Linear(d, d, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.dk))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.dk))

    def forward(self, x: torch.Tensor, key_valid: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x [B, T, d]; key_valid [B, 1, T] bool; pos [2T - 1, d] (relative_sinusoids)."""
        B, T, _ = x.shape
        q = self.linear_q(x).view(B, T, self.h, self.dk)
        k = self.linear_k(x).view(B, T, self.h, self.dk).transpose(1, 2)
        v = self.linear_v(x).view(B, T, self.h, self.dk).transpose(1, 2)
        p = self.linear_pos(pos).view(1, -1, self.h, self.dk).transpose(1, 2)          # [1, H, 2T - 1, dk]
        content = (q + self.pos_bias_u).transpose(1, 2) @ k.transpose(-2, -1)           # [B, H, T, T]
        position = relative_shift((q + self.pos_bias_v).transpose(1, 2) @ p.transpose(-2, -1))
        scores = (content + position) / math.sqrt(self.dk)
        masked = ~key_valid[:, None]                                                    # [B, 1, 1, T]
        weights = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1).masked_fill(masked, 0.0)
        return self.linear_out((weights @ v).transpose(1, 2).reshape(B, T, -1))


class _FeedForward(nn.Module):
    def __init__(self, d: int, units: int):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d, units), nn.Linear(units, d)

    def forward(self, x):
        return self.w_2(F.silu(self.w_1(x)))


class _ConformerLayer(nn.Module):
    """Pre-LayerNorm: attention, then the feed-forward, each added back (no macaron FFN, no convolution module)."""

    def __init__(self, d: int, heads: int, units: int):
        super().__init__()
        self.self_attn = _RelPositionAttention(d, heads)
        self.feed_forward = _FeedForward(d, units)
        self.norm_ff, self.norm_mha = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)

    def forward(self, x, key_valid, pos):
        x = x + self.self_attn(self.norm_mha(x), key_valid, pos)
        return x + self.feed_forward(self.norm_ff(x))


class _LinearEmbed(nn.Module):
    """Linear, LayerNorm (out.0, out.1; out.2 was a dropout), then x sqrt(d)."""

    def __init__(self, idim: int, d: int):
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, d), nn.LayerNorm(d, eps=1e-5), nn.Identity())
        self.xscale = math.sqrt(d)

    def forward(self, x):
        return self.out(x) * self.xscale


class _LookAhead(nn.Module):
    """Each frame sees the next `ahead` frames (zeros past the end): a kernel ahead + 1 convolution, LeakyReLU, a
    causal kernel-3 convolution, added to the input. Frames [B, T, C]."""

    def __init__(self, channels: int, ahead: int):
        super().__init__()
        self.ahead = ahead
        self.conv1 = nn.Conv1d(channels, channels, ahead + 1)
        self.conv2 = nn.Conv1d(channels, channels, 3)

    def forward(self, x):
        h = F.leaky_relu(self.conv1(F.pad(x.transpose(1, 2), (0, self.ahead))))
        return self.conv2(F.pad(h, (2, 0))).transpose(1, 2) + x


class _Upsample(nn.Module):
    """[B, C, T] -> [B, C, r T]: each frame repeated r times, then a kernel 2r + 1 convolution over 2r zeros of left
    padding."""

    def __init__(self, channels: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, channels, 2 * stride + 1)

    def forward(self, x):
        return self.conv(F.pad(x.repeat_interleave(self.stride, dim=2), (2 * self.stride, 0)))


def _valid_frames(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """[B, 1, length] bool: frame t < lengths[b]."""
    return (torch.arange(length, device=lengths.device)[None] < lengths[:, None])[:, None]


class UpsampleConformerEncoder(nn.Module):
    def __init__(self, spec: FlowSpec):
        super().__init__()
        d = spec.d
        self.d, self.stride = d, spec.ratio
        self.embed = _LinearEmbed(spec.input_size, d)
        self.pre_lookahead_layer = _LookAhead(d, spec.lookahead)
        self.encoders = nn.ModuleList(_ConformerLayer(d, spec.heads, spec.units) for _ in range(spec.blocks))
        self.up_layer = _Upsample(d, spec.ratio)
        self.up_embed = _LinearEmbed(d, d)
        self.up_encoders = nn.ModuleList(_ConformerLayer(d, spec.heads, spec.units) for _ in range(spec.up_blocks))
        self.after_norm = nn.LayerNorm(d, eps=1e-5)

    def forward(self, xs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """xs [B, T, input_size] -> ([B, r T, d], the output's valid frames [B, 1, r T])."""
        valid = _valid_frames(lengths, xs.shape[1])
        x = self.pre_lookahead_layer(self.embed(xs))
        pos = relative_sinusoids(x.shape[1], self.d).to(x)
        for layer in self.encoders:
            x = layer(x, valid, pos)
        x = self.up_layer(x.transpose(1, 2)).transpose(1, 2)
        lengths = lengths * self.stride
        valid = _valid_frames(lengths, x.shape[1])
        x = self.up_embed(x)
        pos = relative_sinusoids(x.shape[1], self.d).to(x)
        for layer in self.up_encoders:
            x = layer(x, valid, pos)
        return self.after_norm(x), valid


# ---------------------------------------------------------------------------------------------------------------
# the estimator: a causal 1-D U-Net with transformer blocks
class _CausalConv1d(nn.Conv1d):
    """A stride-1 convolution over kernel - 1 zeros of left padding: frame t sees frames t - kernel + 1 .. t."""

    def __init__(self, c_in: int, c_out: int, kernel: int):
        super().__init__(c_in, c_out, kernel)

    def forward(self, x):
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0)))


class _ChannelsLast(nn.Module):
    def forward(self, x):
        return x.transpose(1, 2)


class _CausalBlock(nn.Module):
    """[B, C, T]: (masked input) causal kernel-3 convolution, LayerNorm over channels, Mish, masked."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.block = nn.Sequential(_CausalConv1d(c_in, c_out, 3), _ChannelsLast(), nn.LayerNorm(c_out),
                                   _ChannelsLast(), nn.Mish())

    def forward(self, x, mask):
        return self.block(x * mask) * mask


class _CausalResnet(nn.Module):
    def __init__(self, c_in: int, c_out: int, time_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_dim, c_out))
        self.block1, self.block2 = _CausalBlock(c_in, c_out), _CausalBlock(c_out, c_out)
        self.res_conv = nn.Conv1d(c_in, c_out, 1)

    def forward(self, x, mask, temb):
        h = self.block1(x, mask) + self.mlp(temb)[:, :, None]
        return self.block2(h, mask) + self.res_conv(x * mask)


class _GeluProjection(nn.Module):
    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return F.gelu(self.proj(x))


class _FrameAttention(nn.Module):
    """Self-attention over frames [B, T, dim]: heads x head_dim wide queries / keys / values (no bias), an output
    projection (to_out.0; to_out.1 was a dropout); `bias` [B, 1, 1, T] is added to the scores."""

    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        self.heads, inner = heads, heads * head_dim
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, inner, bias=False) for _ in range(3))
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Identity()])

    def forward(self, x, bias):
        B, T, _ = x.shape
        q, k, v = (f(x).view(B, T, self.heads, -1).transpose(1, 2) for f in (self.to_q, self.to_k, self.to_v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.to_out[0](out.transpose(1, 2).reshape(B, T, -1))


class _FeedForwardGelu(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.net = nn.ModuleList([_GeluProjection(dim, 4 * dim), nn.Identity(), nn.Linear(4 * dim, dim)])

    def forward(self, x):
        for layer in self.net:
            x = layer(x)
        return x


class _TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = _FrameAttention(dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = _FeedForwardGelu(dim)

    def forward(self, x, bias):
        x = x + self.attn1(self.norm1(x), bias)
        return x + self.ff(self.norm3(x))


def time_sinusoids(t: torch.Tensor, dim: int) -> torch.Tensor:
    """[B] -> [B, dim]: [sin, cos] of 1000 t x 10000^(-i / (dim / 2 - 1))."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angle = 1000 * t[:, None] * freq[None]
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


class CausalConditionalDecoder(nn.Module):
    def __init__(self, spec: FlowSpec):
        super().__init__()
        c, time_dim = spec.channels[0], 4 * spec.channels[0]
        self.in_channels = spec.est_in
        self.time_mlp = nn.Module()
        self.time_mlp.linear_1, self.time_mlp.linear_2 = nn.Linear(spec.est_in, time_dim), nn.Linear(time_dim,
                                                                                                     time_dim)

        def transformers():
            return nn.ModuleList(_TransformerBlock(c, spec.est_heads, spec.head_dim) for _ in range(spec.n_blocks))

        self.down_blocks = nn.ModuleList([nn.ModuleList([_CausalResnet(spec.est_in, c, time_dim), transformers(),
                                                         _CausalConv1d(c, c, 3)])])
        self.mid_blocks = nn.ModuleList(nn.ModuleList([_CausalResnet(c, c, time_dim), transformers()])
                                        for _ in range(spec.mid_blocks))
        self.up_blocks = nn.ModuleList([nn.ModuleList([_CausalResnet(2 * c, c, time_dim), transformers(),
                                                       _CausalConv1d(c, c, 3)])])
        self.final_block = _CausalBlock(c, c)
        self.final_proj = nn.Conv1d(c, spec.est_out, 1)

    def forward(self, x, mask, mu, t, spks, cond):
        """x, mu, cond [B, 80, T]; mask [B, 1, T]; t [B]; spks [B, 80] -> the velocity [B, 80, T]. Full attention
        over the frames `mask` marks valid (the non-streaming mask)."""
        temb = self.time_mlp.linear_2(F.silu(self.time_mlp.linear_1(time_sinusoids(t, self.in_channels))))
        h = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[2]), cond], dim=1)
        bias = ((1.0 - mask) * -1.0e10)[:, None]                                        # [B, 1, 1, T]

        def attend(h, blocks):
            h = h.transpose(1, 2)
            for block in blocks:
                h = block(h, bias)
            return h.transpose(1, 2)

        resnet, blocks, conv = self.down_blocks[0]
        skip = attend(resnet(h, mask, temb), blocks)
        h = conv(skip * mask)
        for resnet, blocks in self.mid_blocks:
            h = attend(resnet(h, mask, temb), blocks)
        resnet, blocks, conv = self.up_blocks[0]
        h = attend(resnet(torch.cat([h, skip], dim=1), mask, temb), blocks)
        h = self.final_block(conv(h * mask), mask)
        return self.final_proj(h * mask) * mask


class CausalConditionalCFM(nn.Module):
    """The flow-matching sampler around the estimator (its only parameters)."""

    def __init__(self, spec: FlowSpec):
        super().__init__()
        self.estimator = CausalConditionalDecoder(spec)
        self.cfg_rate, self.t_scheduler, self.mel = spec.cfg_rate, spec.t_scheduler, spec.mel

    def time_span(self, n_timesteps: int) -> torch.Tensor:
        s = torch.linspace(0, 1, n_timesteps + 1, dtype=torch.float32)
        return 1 - torch.cos(s * 0.5 * torch.pi) if self.t_scheduler == "cosine" else s

    @torch.inference_mode()
    def forward(self, mu, mask, n_timesteps: int, temperature: float = 1.0, spks=None, cond=None):
        """mu, cond [1, 80, T]; mask [1, 1, T]; spks [1, 80] -> the sample x(1) [1, 80, T]."""
        T = mu.shape[2]
        if T > NOISE_SHAPE[2]:
            raise ValueError(f"{T} mel frames are more than the noise table's {NOISE_SHAPE[2]}")
        x = torch.from_numpy(_noise_table()[:, :, :T].copy()).to(mu) * temperature
        t_span = self.time_span(n_timesteps).to(mu)
        t, dt = t_span[0], t_span[1] - t_span[0]
        zeros = torch.zeros_like
        for step in range(1, len(t_span)):
            velocity = self.estimator(torch.cat([x, x]), torch.cat([mask, mask]), torch.cat([mu, zeros(mu)]),
                                      torch.stack([t, t]), torch.cat([spks, zeros(spks)]),
                                      torch.cat([cond, zeros(cond)]))
            guided, free = velocity[:1], velocity[1:]
            x = x + dt * ((1.0 + self.cfg_rate) * guided - self.cfg_rate * free)
            t = t + dt
            if step < len(t_span) - 1:
                dt = t_span[step + 1] - t
        return x.float()


# ---------------------------------------------------------------------------------------------------------------
class TokenFlow(nn.Module):
    """What CosyVoice 2's and 3's flows (CausalMaskedDiffWithXvec, cosyvoice3_flow.CausalMaskedDiffWithDiT) share
    around their own encoders: the x-vector's affine, the padded token embedding and whole-utterance inference. A
    subclass holds `spec`, input_embedding, spk_embed_affine_layer and the CFM `decoder`, and defines encode(tokens
    [B, N], lengths [B] or None) -> mu [B, 80, r N]."""

    def speaker(self, embedding: torch.Tensor) -> torch.Tensor:
        """[B, spk_embed_dim] x-vector -> [B, 80]."""
        return self.spk_embed_affine_layer(F.normalize(embedding, dim=1))

    def embedded_tokens(self, tokens: torch.Tensor,
                        lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, N] (negative ids: padding) -> (their input_embedding rows [B, N, input_size], zero past each
        length; the lengths [B], all N when not given)."""
        lengths = torch.full((tokens.shape[0],), tokens.shape[1]) if lengths is None else lengths
        valid = _valid_frames(lengths, tokens.shape[1])[:, 0, :, None].to(torch.float32)
        return self.input_embedding(torch.clamp(tokens, min=0)) * valid, lengths

    @torch.inference_mode()
    def inference(self, token, token_len, prompt_token, prompt_token_len, prompt_feat, prompt_feat_len, embedding,
                  streaming: bool = False, finalize: bool = True, n_timesteps: int = 10) -> torch.Tensor:
        """One utterance, whole (streaming False, finalize True): token [1, N], prompt_token [1, Np], prompt_feat
        [1, Tp, 80], embedding [1, spk_embed_dim] -> the mel [1, 80, r (Np + N) - Tp] after the prompt's frames.
        (The original returns (mel, None).)"""
        if streaming or not finalize:
            raise NotImplementedError("only non-streaming, finalized inference is built")
        if token.shape[0] != 1:
            raise ValueError("one utterance at a time")
        spks = self.speaker(embedding)
        mu = self.encode(torch.cat([prompt_token, token], dim=1), prompt_token_len + token_len)
        prompt_frames, frames = prompt_feat.shape[1], mu.shape[2]
        cond = torch.zeros(1, frames, self.spec.mel, dtype=mu.dtype)
        cond[:, :prompt_frames] = prompt_feat
        mask = torch.ones(1, 1, frames, dtype=mu.dtype)
        mel = self.decoder(mu, mask, n_timesteps, spks=spks, cond=cond.transpose(1, 2))
        return mel[:, :, prompt_frames:]


class CausalMaskedDiffWithXvec(TokenFlow):
    """CosyVoice 2's `flow` from the yaml's flow kwargs (a dict; sizes and refusals as
    model_zoo.multimodal.cosyvoice_flow_graph.CosyVoiceFlowConfig)."""

    def __init__(self, config: Mapping):
        super().__init__()
        spec = self.spec = FlowSpec(config)
        self.input_embedding = nn.Embedding(spec.vocab, spec.input_size)
        self.spk_embed_affine_layer = nn.Linear(spec.spk_dim, spec.mel)
        self.encoder = UpsampleConformerEncoder(spec)
        self.encoder_proj = nn.Linear(spec.d, spec.mel)
        self.decoder = CausalConditionalCFM(spec)

    def encode(self, tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, N] (negative ids: padding) -> mu [B, 80, r N]."""
        h, _ = self.encoder(*self.embedded_tokens(tokens, lengths))
        return self.encoder_proj(h).transpose(1, 2)
