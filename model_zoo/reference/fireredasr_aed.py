"""FireRedASR-AED in PyTorch, written from the FireRedASR report (arXiv 2501.14350) and the public description of its
modules, with the released checkpoint's tensor names (model.pth.tar's model_state_dict): the reference the runtime's
graphs are tested against.

Encoder: the fbank frames padded by 6 at the end, two 3x3 stride-2 ReLU convolutions (32 channels) and a linear
layer (4x subsampling); Conformer blocks of a half-step Swish FFN, relative-position self-attention (separate
LayerNorms on query, key and value input, no projection biases, the Transformer-XL biases u / v, scores
((q + u) k + shift((q + v) p)) / sqrt(d_k)), a convolution module (pointwise to 4d, GLU, depthwise kernel 33,
LayerNorm, Swish, pointwise back) and a second half-step FFN, then LayerNorm. Decoder: token embedding x sqrt(d) plus
sinusoidal positions, pre-LayerNorm layers of causal self-attention, cross-attention (key projections without bias)
and a GELU MLP, a final LayerNorm and the output projection tied to the embedding; beam search as the project's
batch_beam_search (softmax smoothing, eos penalty, GNMT length penalty)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoids(length: int, d: int, sign: float = 1.0) -> torch.Tensor:
    """[length, d]: sin at even, cos at odd columns of position x 10000^(-2i / d) (sign -1: negative positions)."""
    position = torch.arange(length, dtype=torch.float32)[:, None] * sign
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe = torch.zeros(length, d)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq)
    return pe


def relative_positions(T: int, d: int) -> torch.Tensor:
    """[2T - 1, d]: the encodings of relative positions T-1 .. -(T-1)."""
    return torch.cat([sinusoids(T, d).flip(0), sinusoids(T, d, -1.0)[1:]])


class _FFN(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Dropout(0.0),
                                 nn.Linear(4 * d, d), nn.Dropout(0.0))

    def forward(self, x):
        return x + self.net(x)


class _RelAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.w_qs, self.w_ks, self.w_vs = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.layer_norm_q, self.layer_norm_k, self.layer_norm_v = (nn.LayerNorm(d) for _ in range(3))
        self.fc = nn.Linear(d, d, bias=False)
        self.linear_pos = nn.Linear(d, d, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.dk))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.dk))

    def forward(self, x, pos):
        B, T, _ = x.shape
        q = self.w_qs(self.layer_norm_q(x)).view(B, T, self.h, self.dk)
        k = self.w_ks(self.layer_norm_k(x)).view(B, T, self.h, self.dk).transpose(1, 2)
        v = self.w_vs(self.layer_norm_v(x)).view(B, T, self.h, self.dk).transpose(1, 2)
        p = self.linear_pos(pos).view(1, -1, self.h, self.dk).transpose(1, 2)       # [1, H, 2T-1, dk]
        ac = (q + self.pos_bias_u).transpose(1, 2) @ k.transpose(-2, -1)            # [B, H, T, T]
        bd = (q + self.pos_bias_v).transpose(1, 2) @ p.transpose(-2, -1)            # [B, H, T, 2T-1]
        index = (T - 1) - torch.arange(T)[:, None] + torch.arange(T)[None, :]       # relative position i - j
        bd = torch.gather(bd, -1, index.expand(B, self.h, T, T))
        attn = torch.softmax((ac + bd) / math.sqrt(self.dk), dim=-1)
        return x + self.fc((attn @ v).transpose(1, 2).reshape(B, T, -1))


class _ConvModule(nn.Module):
    def __init__(self, d: int, kernel: int):
        super().__init__()
        self.pre_layer_norm = nn.LayerNorm(d)
        self.pointwise_conv1 = nn.Conv1d(d, 4 * d, 1, bias=False)
        self.depthwise_conv = nn.Conv1d(2 * d, 2 * d, kernel, padding=(kernel - 1) // 2, groups=2 * d, bias=False)
        self.batch_norm = nn.LayerNorm(2 * d)   # (a LayerNorm under the checkpoint's name)
        self.pointwise_conv2 = nn.Conv1d(2 * d, d, 1, bias=False)

    def forward(self, x):
        out = F.glu(self.pointwise_conv1(self.pre_layer_norm(x).transpose(1, 2)), dim=1)
        out = F.silu(self.batch_norm(self.depthwise_conv(out).transpose(1, 2))).transpose(1, 2)
        return x + self.pointwise_conv2(out).transpose(1, 2)


class _ConformerBlock(nn.Module):
    def __init__(self, d: int, heads: int, kernel: int):
        super().__init__()
        self.ffn1, self.ffn2 = _FFN(d), _FFN(d)
        self.mhsa = _RelAttention(d, heads)
        self.conv = _ConvModule(d, kernel)
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, x, pos):
        x = 0.5 * x + 0.5 * self.ffn1(x)
        x = self.conv(self.mhsa(x, pos))
        return self.layer_norm(0.5 * x + 0.5 * self.ffn2(x))


class _Subsampling(nn.Module):
    def __init__(self, idim: int, d: int, channels: int = 32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, channels, 3, 2), nn.ReLU(), nn.Conv2d(channels, channels, 3, 2),
                                  nn.ReLU())
        self.out = nn.Linear(channels * (((idim - 1) // 2 - 1) // 2), d)

    def forward(self, x):
        x = self.conv(x[:, None])
        B, C, T, D = x.shape
        return self.out(x.transpose(1, 2).reshape(B, T, C * D))


class ConformerEncoder(nn.Module):
    CONTEXT = 7   # frames the subsampling sees around each output (3 left, 3 right)

    def __init__(self, idim: int, layers: int, heads: int, d: int, kernel: int = 33):
        super().__init__()
        self.d = d
        self.input_preprocessor = _Subsampling(idim, d)
        self.layer_stack = nn.ModuleList(_ConformerBlock(d, heads, kernel) for _ in range(layers))

    def forward(self, feats):
        x = self.input_preprocessor(F.pad(feats, (0, 0, 0, self.CONTEXT - 1)))
        pos = relative_positions(x.shape[1], self.d)
        for layer in self.layer_stack:
            x = layer(x, pos)
        return x


class _DecoderAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.w_qs, self.w_ks, self.w_vs = nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.fc = nn.Linear(d, d)

    def forward(self, q, kv, causal: bool):
        B, T, _ = q.shape
        split = (lambda t: t.view(B, t.shape[1], self.h, self.dk).transpose(1, 2))
        out = F.scaled_dot_product_attention(split(self.w_qs(q)), split(self.w_ks(kv)), split(self.w_vs(kv)),
                                             is_causal=causal)
        return self.fc(out.transpose(1, 2).reshape(B, T, -1))


class _DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.self_attn_norm, self.cross_attn_norm, self.mlp_norm = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.cross_attn = _DecoderAttention(d, heads), _DecoderAttention(d, heads)
        self.mlp = nn.Module()
        self.mlp.w_1, self.mlp.w_2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, enc):
        h = self.self_attn_norm(x)
        x = x + self.self_attn(h, h, causal=True)
        x = x + self.cross_attn(self.cross_attn_norm(x), enc, causal=False)
        return x + self.mlp.w_2(F.gelu(self.mlp.w_1(self.mlp_norm(x))))


class TransformerDecoder(nn.Module):
    def __init__(self, odim: int, layers: int, heads: int, d: int, pad_id: int = 2, pe_maxlen: int = 5000):
        super().__init__()
        self.tgt_word_emb = nn.Embedding(odim, d, padding_idx=pad_id)
        self.register_buffer("pe", sinusoids(pe_maxlen, d), persistent=False)
        self.layer_stack = nn.ModuleList(_DecoderLayer(d, heads) for _ in range(layers))
        self.layer_norm_out = nn.LayerNorm(d)
        self.tgt_word_prj = nn.Linear(d, odim, bias=False)
        self.tgt_word_prj.weight = self.tgt_word_emb.weight
        self.scale = d ** 0.5

    def forward(self, ys, enc):
        """Logits of every position [B, T, odim] (no cache: the reference recomputes the prefix)."""
        x = self.tgt_word_emb(ys) * self.scale + self.pe[:ys.shape[1]]
        for layer in self.layer_stack:
            x = layer(x, enc)
        return self.tgt_word_prj(self.layer_norm_out(x))


class FireRedAsrAed(nn.Module):
    def __init__(self, idim=80, odim=7832, d_model=1280, n_head=20, n_layers_enc=16, n_layers_dec=16,
                 kernel_size=33, pe_maxlen=5000, sos_id=3, eos_id=4, pad_id=2, **_):
        super().__init__()
        self.sos_id, self.eos_id = sos_id, eos_id
        self.encoder = ConformerEncoder(idim, n_layers_enc, n_head, d_model, kernel_size)
        self.decoder = TransformerDecoder(odim, n_layers_dec, n_head, d_model, pad_id, pe_maxlen)

    @torch.no_grad()
    def transcribe(self, feats: torch.Tensor, beam_size: int = 3, max_len: int = 0, softmax_smoothing: float = 1.0,
                   length_penalty: float = 0.0, eos_penalty: float = 1.0) -> list[int]:
        """The best hypothesis's token ids (no sos / eos) for one utterance's features [frames, idim]."""
        enc = self.encoder(feats[None])
        B, INF = beam_size, 1e10
        limit = max_len if max_len > 0 else enc.shape[1]
        enc = enc.repeat(B, 1, 1)
        ys = torch.full((B, 1), self.sos_id, dtype=torch.long)
        scores = torch.tensor([0.0] + [-INF] * (B - 1))[:, None]
        finished = torch.zeros(B, 1, dtype=torch.bool)
        for _ in range(limit):
            logp = F.log_softmax(self.decoder(ys, enc)[:, -1] / softmax_smoothing, dim=-1)
            if eos_penalty != 1.0:
                logp[:, self.eos_id] *= eos_penalty
            top, top_ids = logp.topk(B, dim=1)
            # a finished beam extends only by eos, at no cost
            done = torch.tensor([0.0] + [-INF] * (B - 1))[None].expand(B, B)
            top = torch.where(finished, done, top)
            top_ids = torch.where(finished, torch.full_like(top_ids, self.eos_id), top_ids)
            scores, best = (scores + top).view(-1).topk(B)
            scores = scores[:, None]
            rows = best // B
            ys = torch.cat([ys[rows], top_ids.view(-1)[best][:, None]], dim=1)
            finished = ys[:, -1:].eq(self.eos_id)
            if bool(finished.all()):
                break
        lengths = ys.ne(self.eos_id).sum(-1)
        final = scores.view(-1)
        if length_penalty > 0.0:
            final = final / ((5 + lengths.float()) / 6.0) ** length_penalty
        best = int(final.argmax())
        return ys[best, 1:int(lengths[best])].tolist()
