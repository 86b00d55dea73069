"""CosyVoice 3's flow-matching acoustic model (speech tokens + prompt mel + speaker x-vector -> 80-bin mel) in
PyTorch: `cosyvoice.flow.flow.CausalMaskedDiffWithDiT` with the `cosyvoice.flow.DiT.dit.DiT` estimator, written from
the public CosyVoice 3 sources with the tensor names of the released flow.pt (its own state_dict: input_embedding.*,
spk_embed_affine_layer.*, pre_lookahead_layer.*, decoder.estimator.*, the rotary buffer
decoder.estimator.rotary_embed.inv_freq included), so that file loads with load_state_dict(strict=True). The reference
model_zoo.multimodal.cosyvoice3_flow_graph's graphs and lite.cosyvoice_flow are tested against. Non-streaming
inference (streaming=False, finalize=True) only.

What differs from CosyVoice 2 (model_zoo.reference.cosyvoice_flow, whose CFM sampler, noise table, time sinusoids and
TokenFlow, the x-vector affine, token embedding and inference around the encoder, are reused here):
- No Conformer encoder: the embedded tokens (input_size = 80 channels) go through the look-ahead layer (a kernel L + 1
  convolution over the next L tokens widening to `channels`, LeakyReLU, a causal kernel-3 convolution back to
  input_size, a residual) and are repeated token_mel_ratio times: that is mu.
- The estimator is a DiT: the time embedding (256 sinusoids of 1000 t, Linear, SiLU, Linear); the input embedding
  (a Linear over [x, cond, mu, spks] per frame, then a causal convolutional position embedding: two grouped kernel-31
  convolutions over 30 frames of left padding, each followed by Mish, added back); `depth` DiT blocks of adaLN-Zero
  modulation (a Linear of SiLU(time) into shift / scale / gate for the attention and the feed-forward, around
  affine-free LayerNorms of eps 1e-6), self-attention with biased q / k / v projections over the valid frames, its
  output zeroed on padded frames, and a tanh-GELU feed-forward of ff_mult x width; a final adaLN (scale, then shift)
  and a Linear to the mel bins. The output is not masked.
- Rotary positions as x-transformers 2.x applies them (CosyVoice pins 2.11.24): the angles of position p are
  p x inv_freq (inv_freq = 10000^(-2i / dim_head), a persistent buffer), paired interleaved (channels 2i, 2i + 1
  share angle i), and applied to the projected queries and keys before they are split into heads, to their first
  dim_head channels only: only the first head is rotated, the others see no positions.
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from model_zoo.multimodal.cosyvoice3_flow_graph import POS_GROUPS, POS_KERNEL, TIME_SINUSOIDS, CosyVoice3FlowConfig

from .cosyvoice_flow import CausalConditionalCFM, TokenFlow, time_sinusoids


# ---------------------------------------------------------------------------------------------------------------
class PreLookaheadLayer(nn.Module):
    """Frames [B, T, C]: each frame sees itself and the next `ahead` (zeros past the end) through a kernel ahead + 1
    convolution to `channels`, LeakyReLU, then a causal kernel-3 convolution back to C, added to the input."""

    def __init__(self, in_channels: int, channels: int, ahead: int):
        super().__init__()
        self.ahead = ahead
        self.conv1 = nn.Conv1d(in_channels, channels, ahead + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.conv1(F.pad(x.transpose(1, 2), (0, self.ahead))))
        return self.conv2(F.pad(h, (2, 0))).transpose(1, 2) + x


def rotary_angles(inv_freq: torch.Tensor, length: int) -> torch.Tensor:
    """[length, dim_head]: position p's angles p x inv_freq[i], each twice in a row (interleaved pairs)."""
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq.float()[None]
    return angles.repeat_interleave(2, dim=-1)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x [B, T, width]: its first angles.shape[-1] channels rotated pairwise ((x0, x1) by angle 0, (x2, x3) by angle
    1, ...), the rest left as they are."""
    rot = angles.shape[-1]
    head, rest = x[..., :rot], x[..., rot:]
    pairs = head.reshape(*head.shape[:-1], rot // 2, 2)
    swapped = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).reshape(head.shape)
    return torch.cat([head * angles.cos() + swapped * angles.sin(), rest], dim=-1)


class _TimeEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.time_mlp = nn.Sequential(nn.Linear(TIME_SINUSOIDS, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.time_mlp(time_sinusoids(t, TIME_SINUSOIDS))


class _CausalPositionConv(nn.Module):
    """Frames [B, T, dim] -> two (left pad kernel - 1, grouped convolution, Mish) stages, [B, T, dim]."""

    def __init__(self, dim: int):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, POS_KERNEL, groups=POS_GROUPS), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, POS_KERNEL, groups=POS_GROUPS), nn.Mish())

    def forward(self, x):
        h = self.conv1(F.pad(x.transpose(1, 2), (POS_KERNEL - 1, 0)))
        return self.conv2(F.pad(h, (POS_KERNEL - 1, 0))).transpose(1, 2)


class _InputEmbedding(nn.Module):
    def __init__(self, width: int, dim: int):
        super().__init__()
        self.proj = nn.Linear(width, dim)
        self.conv_pos_embed = _CausalPositionConv(dim)

    def forward(self, x, cond, mu, spks):
        """x, cond, mu [B, T, 80]; spks [B, 80] -> [B, T, dim]."""
        h = self.proj(torch.cat([x, cond, mu, spks[:, None].expand(-1, x.shape[1], -1)], dim=-1))
        return self.conv_pos_embed(h) + h


class _AdaNorm(nn.Module):
    """adaLN modulation: Linear(SiLU(time)) split into `parts` vectors of width dim."""

    def __init__(self, dim: int, parts: int):
        super().__init__()
        self.parts = parts
        self.linear = nn.Linear(dim, parts * dim)

    def forward(self, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(p[:, None] for p in self.linear(F.silu(temb)).chunk(self.parts, dim=-1))   # each [B, 1, dim]


def _plain_norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], eps=1e-6)


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, inner) for _ in range(3))
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Identity()])

    def forward(self, x, key_valid, angles):
        """x [B, T, dim]; key_valid [B, T] bool; angles [T, head_dim] -> [B, T, dim], zero on padded frames."""
        B, T, _ = x.shape
        q, k = apply_rotary(self.to_q(x), angles), apply_rotary(self.to_k(x), angles)
        q, k, v = (y.view(B, T, self.heads, -1).transpose(1, 2) for y in (q, k, self.to_v(x)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_valid[:, None, None, :])
        out = self.to_out[0](out.transpose(1, 2).reshape(B, T, -1))
        return out * key_valid[..., None]


class _FeedForward(nn.Module):
    def __init__(self, dim: int, inner: int):
        super().__init__()
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")), nn.Identity(),
                                nn.Linear(inner, dim))

    def forward(self, x):
        return self.ff(x)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int, ff_inner: int):
        super().__init__()
        self.attn_norm = _AdaNorm(dim, 6)
        self.attn = _Attention(dim, heads, head_dim)
        self.ff = _FeedForward(dim, ff_inner)

    def forward(self, x, temb, key_valid, angles):
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.attn_norm(temb)
        x = x + gate_a * self.attn(_plain_norm(x) * (1 + scale_a) + shift_a, key_valid, angles)
        return x + gate_f * self.ff(_plain_norm(x) * (1 + scale_f) + shift_f)


class _RotaryFrequencies(nn.Module):
    """Holds x-transformers' persistent `inv_freq` buffer (flow.pt carries it)."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))


class DiT(nn.Module):
    def __init__(self, spec: CosyVoice3FlowConfig):
        super().__init__()
        self.time_embed = _TimeEmbedding(spec.dim)
        self.input_embed = _InputEmbedding(spec.proj_in, spec.dim)
        self.rotary_embed = _RotaryFrequencies(spec.head_dim)
        self.transformer_blocks = nn.ModuleList(DiTBlock(spec.dim, spec.heads, spec.head_dim, spec.ff_inner)
                                                for _ in range(spec.depth))
        self.norm_out = _AdaNorm(spec.dim, 2)
        self.proj_out = nn.Linear(spec.dim, spec.mel_dim)

    def forward(self, x, mask, mu, t, spks, cond):
        """x, mu, cond [B, 80, T]; mask [B, 1, T]; t [B]; spks [B, 80] -> the velocity [B, 80, T] (unmasked).
        Every frame attends to the frames `mask` marks valid (the non-streaming mask)."""
        temb = self.time_embed(t)
        h = self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks)
        key_valid = mask[:, 0].bool()
        angles = rotary_angles(self.rotary_embed.inv_freq, h.shape[1]).to(h)
        for block in self.transformer_blocks:
            h = block(h, temb, key_valid, angles)
        scale, shift = self.norm_out(temb)
        return self.proj_out(_plain_norm(h) * (1 + scale) + shift).transpose(1, 2)


class DiTConditionalCFM(CausalConditionalCFM):
    """CosyVoice 2's sampler (fixed noise table, Euler steps, classifier-free guidance on a batch of two) around the
    DiT estimator: only the estimator differs."""

    def __init__(self, spec: CosyVoice3FlowConfig):
        nn.Module.__init__(self)
        self.estimator = DiT(spec)
        self.cfg_rate, self.t_scheduler, self.mel = spec.cfg_rate, spec.t_scheduler, spec.mel


# ---------------------------------------------------------------------------------------------------------------
class CausalMaskedDiffWithDiT(TokenFlow):
    """CosyVoice 3's `flow` from the yaml's flow kwargs (a dict; sizes and refusals as CosyVoice3FlowConfig); the
    x-vector affine and inference as CosyVoice 2's (cosyvoice_flow.TokenFlow)."""

    def __init__(self, config: Mapping):
        super().__init__()
        spec = self.spec = CosyVoice3FlowConfig(config)
        self.input_embedding = nn.Embedding(spec.vocab, spec.input_size)
        self.spk_embed_affine_layer = nn.Linear(spec.spk_dim, spec.mel)
        self.pre_lookahead_layer = PreLookaheadLayer(spec.input_size, spec.look_channels, spec.lookahead)
        self.decoder = DiTConditionalCFM(spec)

    def encode(self, tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, N] (negative ids: padding) -> mu [B, 80, r N]."""
        h = self.pre_lookahead_layer(self.embedded_tokens(tokens, lengths)[0])
        return h.repeat_interleave(self.spec.ratio, dim=1).transpose(1, 2)
