"""WeNet's U2 / U2++ model (a Conformer encoder with a CTC head and a left-to-right / right-to-left attention decoder)
in PyTorch, written from WeNet's papers (arXiv 2012.05481, 2106.05642) and the public description of its modules,
with its checkpoint's tensor names (final.pt): the reference the runtime's graphs and lite.wenet's decoding are tested
against. Non-streaming (full-context) inference.

Encoder: global CMVN (buffers mean / istd), conv2d subsampling 4x (two 3x3 stride-2 ReLU convolutions, a linear
layer, x sqrt(d)); Conformer layers, pre-LayerNorm: a half-step macaron FFN, relative-position self-attention
(score ((q + u) k + (q + v) p_j) / sqrt(d_k), p_j the projected absolute sinusoid of key position j: WeNet applies no
relative shift), the convolution module (pointwise to 2d, GLU, depthwise kernel K, causal (left-padded) or centred,
BatchNorm or LayerNorm, Swish, pointwise back), a half-step FFN, the final LayerNorm; after_norm. CTC: log-softmax of
ctc_lo. Decoder: embedding x sqrt(d) + sinusoids, pre-LayerNorm layers of causal self-attention, source attention
and a ReLU FFN, after_norm and output_layer; a bitransformer has a right_decoder for reversed hypotheses.
`U2Model.rescore` is attention rescoring as WeNet's search does it (the CTC prefix beam search is lite.wenet's,
tested against exhaustive alignment sums)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoids(length: int, d: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe = torch.zeros(length, d)
    pe[:, 0::2] = torch.sin(position * freq)
    pe[:, 1::2] = torch.cos(position * freq)
    return pe


class _FeedForward(nn.Module):
    def __init__(self, d: int, units: int, act):
        super().__init__()
        self.w_1, self.w_2, self.act = nn.Linear(d, units), nn.Linear(units, d), act

    def forward(self, x):
        return self.w_2(self.act(self.w_1(x)))


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int, relative: bool = False):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.linear_q, self.linear_k, self.linear_v, self.linear_out = (nn.Linear(d, d) for _ in range(4))
        if relative:
            self.linear_pos = nn.Linear(d, d, bias=False)
            self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.dk))
            self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.dk))

    def forward(self, q_in, kv, pos=None, causal: bool = False, cache=None):
        """`cache` [B, H, P, 2 d_k] (streaming): earlier keys | values before this chunk's; with it the output is
        (out, the new cache)."""
        B, T = q_in.shape[0], q_in.shape[1]
        q = self.linear_q(q_in).view(B, T, self.h, self.dk)
        k = self.linear_k(kv).view(B, kv.shape[1], self.h, self.dk).transpose(1, 2)
        v = self.linear_v(kv).view(B, kv.shape[1], self.h, self.dk).transpose(1, 2)
        if cache is not None:
            k = torch.cat([cache[..., :self.dk], k], dim=2)
            v = torch.cat([cache[..., self.dk:], v], dim=2)
        S = k.shape[2]
        if pos is None:
            scores = q.transpose(1, 2) @ k.transpose(-2, -1)
        else:
            p = self.linear_pos(pos).view(1, S, self.h, self.dk).transpose(1, 2)
            scores = (q + self.pos_bias_u).transpose(1, 2) @ k.transpose(-2, -1) + \
                (q + self.pos_bias_v).transpose(1, 2) @ p.transpose(-2, -1)
        scores = scores / math.sqrt(self.dk)
        if causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
        out = self.linear_out((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1))
        return out if cache is None else (out, torch.cat([k, v], dim=-1))


class _ConvModule(nn.Module):
    def __init__(self, d: int, kernel: int, causal: bool, norm: str):
        super().__init__()
        self.causal, self.kernel = causal, kernel
        self.pointwise_conv1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise_conv = nn.Conv1d(d, d, kernel, padding=0 if causal else (kernel - 1) // 2, groups=d)
        self.norm = nn.BatchNorm1d(d) if norm == "batch_norm" else nn.LayerNorm(d)
        self.pointwise_conv2 = nn.Conv1d(d, d, 1)

    def forward(self, x, cache=None):
        """`cache` [B, d, kernel - 1] (streaming, causal): the frames before this chunk; with it the output is
        (out, the new cache)."""
        x = F.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
        if self.causal:
            x = F.pad(x, (self.kernel - 1, 0)) if cache is None else torch.cat([cache, x], dim=2)
        new_cache = x[:, :, x.shape[2] - (self.kernel - 1):] if self.causal else None
        x = self.depthwise_conv(x)
        x = self.norm(x) if isinstance(self.norm, nn.BatchNorm1d) else self.norm(x.transpose(1, 2)).transpose(1, 2)
        out = self.pointwise_conv2(F.silu(x)).transpose(1, 2)
        return out if cache is None else (out, new_cache)


class _ConformerLayer(nn.Module):
    def __init__(self, d: int, heads: int, units: int, kernel: int, causal: bool, norm: str):
        super().__init__()
        self.self_attn = _Attention(d, heads, relative=True)
        self.feed_forward, self.feed_forward_macaron = _FeedForward(d, units, F.silu), _FeedForward(d, units, F.silu)
        self.conv_module = _ConvModule(d, kernel, causal, norm)
        self.norm_ff, self.norm_mha, self.norm_ff_macaron, self.norm_conv, self.norm_final = (
            nn.LayerNorm(d) for _ in range(5))

    def forward(self, x, pos, att_cache=None, cnn_cache=None):
        x = x + 0.5 * self.feed_forward_macaron(self.norm_ff_macaron(x))
        h = self.norm_mha(x)
        if att_cache is None:
            x = x + self.self_attn(h, h, pos)
            x = x + self.conv_module(self.norm_conv(x))
            return self.norm_final(x + 0.5 * self.feed_forward(self.norm_ff(x)))
        a, att_cache = self.self_attn(h, h, pos, cache=att_cache)
        x = x + a
        c, cnn_cache = self.conv_module(self.norm_conv(x), cache=cnn_cache)
        x = x + c
        return self.norm_final(x + 0.5 * self.feed_forward(self.norm_ff(x))), att_cache, cnn_cache


class ConformerEncoder(nn.Module):
    def __init__(self, input_dim: int, output_size: int = 256, attention_heads: int = 4, linear_units: int = 2048,
                 num_blocks: int = 6, cnn_module_kernel: int = 15, causal: bool = False,
                 cnn_module_norm: str = "batch_norm", **_):
        super().__init__()
        d = output_size
        self.d = d
        self.global_cmvn = nn.Module()
        self.global_cmvn.register_buffer("mean", torch.zeros(input_dim))
        self.global_cmvn.register_buffer("istd", torch.ones(input_dim))
        self.embed = nn.Module()
        self.embed.conv = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.embed.out = nn.Sequential(nn.Linear(d * (((input_dim - 1) // 2 - 1) // 2), d))
        self.encoders = nn.ModuleList(_ConformerLayer(d, attention_heads, linear_units, cnn_module_kernel, causal,
                                                      cnn_module_norm) for _ in range(num_blocks))
        self.after_norm = nn.LayerNorm(d)

    def forward(self, feats):
        x = (feats - self.global_cmvn.mean) * self.global_cmvn.istd
        x = self.embed.conv(x[:, None])
        B, C, T, D = x.shape
        x = self.embed.out(x.transpose(1, 2).reshape(B, T, C * D)) * math.sqrt(self.d)
        pos = sinusoids(T, self.d)[None]
        for layer in self.encoders:
            x = layer(x, pos)
        return self.after_norm(x)

    @torch.no_grad()
    def forward_chunk_by_chunk(self, feats, chunk: int, left_chunks: int = -1):
        """Streaming, as WeNet's forward_chunk_by_chunk: windows of (chunk - 1) x 4 + 7 frames every 4 x chunk;
        each chunk attends to the cached keys / values of up to left_chunks x chunk earlier outputs (-1: all) and
        its own, its causal convolutions continue from the cached frames; positions count from the start."""
        window, stride = (chunk - 1) * 4 + 7, 4 * chunk
        required = chunk * left_chunks if left_chunks >= 0 else -1
        L, H, dk = len(self.encoders), self.encoders[0].self_attn.h, self.encoders[0].self_attn.dk
        kernel = self.encoders[0].conv_module.kernel
        att = torch.zeros(L, 1, H, 0, 2 * dk)
        cnn = torch.zeros(L, 1, self.d, kernel - 1)
        outputs, offset = [], 0
        for cur in range(0, feats.shape[1] - 7 + 1, stride):
            x = (feats[:, cur:cur + window] - self.global_cmvn.mean) * self.global_cmvn.istd
            x = self.embed.conv(x[:, None])
            B, C, T, D = x.shape
            x = self.embed.out(x.transpose(1, 2).reshape(B, T, C * D)) * math.sqrt(self.d)
            cached = att.shape[3]
            pos = sinusoids(offset + T, self.d)[offset - cached:][None]   # the keys' absolute positions
            new_att, new_cnn = [], []
            for i, layer in enumerate(self.encoders):
                x, a, c = layer(x, pos, att[i], cnn[i])
                keep = 0 if required < 0 else max(a.shape[2] - required, 0)
                new_att.append(a[:, :, keep:])
                new_cnn.append(c)
            att, cnn = torch.stack(new_att), torch.stack(new_cnn)
            outputs.append(self.after_norm(x))
            offset += T
        return torch.cat(outputs, dim=1)


class _DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, units: int):
        super().__init__()
        self.self_attn, self.src_attn = _Attention(d, heads), _Attention(d, heads)
        self.feed_forward = _FeedForward(d, units, F.relu)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, memory):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, causal=True)
        x = x + self.src_attn(self.norm2(x), memory)
        return x + self.feed_forward(self.norm3(x))


class TransformerDecoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int = 4, units: int = 2048, blocks: int = 6):
        super().__init__()
        self.d = d
        self.embed = nn.Sequential(nn.Embedding(vocab, d))
        self.decoders = nn.ModuleList(_DecoderLayer(d, heads, units) for _ in range(blocks))
        self.after_norm = nn.LayerNorm(d)
        self.output_layer = nn.Linear(d, vocab)

    def forward(self, ys, memory):
        """log-probabilities [N, L, vocab] of hypotheses ys [N, L] given memory [N, T, d]."""
        x = self.embed(ys) * math.sqrt(self.d) + sinusoids(ys.shape[1], self.d)
        for layer in self.decoders:
            x = layer(x, memory)
        return F.log_softmax(self.output_layer(self.after_norm(x)), dim=-1)


class BiTransformerDecoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int = 4, units: int = 2048, blocks: int = 6, r_blocks: int = 0):
        super().__init__()
        self.left_decoder = TransformerDecoder(vocab, d, heads, units, blocks)
        self.right_decoder = TransformerDecoder(vocab, d, heads, units, r_blocks)


class U2Model(nn.Module):
    def __init__(self, input_dim: int, vocab: int, encoder_conf: dict, decoder: str = "bitransformer",
                 decoder_conf: dict | None = None):
        super().__init__()
        self.encoder = ConformerEncoder(input_dim, **encoder_conf)
        d = self.encoder.d
        conf = dict(decoder_conf or {})
        args = (vocab, d, conf.get("attention_heads", 4), conf.get("linear_units", 2048), conf.get("num_blocks", 6))
        self.decoder = BiTransformerDecoder(*args, conf.get("r_num_blocks", 0)) if decoder == "bitransformer" \
            else TransformerDecoder(*args)
        self.ctc = nn.Module()
        self.ctc.ctc_lo = nn.Linear(d, vocab)
        self.vocab = vocab
        self.sos = self.eos = vocab - 1

    @torch.no_grad()
    def ctc_log_probs(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.encoder(feats[None])
        return enc, F.log_softmax(self.ctc.ctc_lo(enc), dim=-1)[0]

    @torch.no_grad()
    def streaming_ctc_log_probs(self, feats: torch.Tensor, chunk: int, left_chunks: int = -1):
        enc = self.encoder.forward_chunk_by_chunk(feats[None], chunk, left_chunks)
        return enc, F.log_softmax(self.ctc.ctc_lo(enc), dim=-1)[0]

    @torch.no_grad()
    def rescore(self, enc: torch.Tensor, hyps: list[list[int]], ctc_scores: list[float], ctc_weight: float,
                reverse_weight: float) -> int:
        """The index of the best hypothesis by attention rescoring."""
        best, best_score = 0, -float("inf")
        left = self.decoder.left_decoder if isinstance(self.decoder, BiTransformerDecoder) else self.decoder
        for i, hyp in enumerate(hyps):
            L = len(hyp)
            logp = left(torch.tensor([[self.sos] + hyp]), enc)[0]
            score = sum(float(logp[j, t]) for j, t in enumerate(hyp)) + float(logp[L, self.eos])
            if reverse_weight > 0:
                rlogp = self.decoder.right_decoder(torch.tensor([[self.sos] + hyp[::-1]]), enc)[0]
                r = sum(float(rlogp[L - 1 - j, t]) for j, t in enumerate(hyp)) + float(rlogp[L, self.eos])
                score = score * (1 - reverse_weight) + r * reverse_weight
            score += ctc_weight * ctc_scores[i]
            if score > best_score:
                best, best_score = i, score
        return best

