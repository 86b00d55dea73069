"""Qwen3-TTS's 12 Hz speech-tokenizer decoder (qwen_tts Qwen3TTSTokenizerV2Decoder: codes -> 24 kHz waveform) built
from the checkpoint's tensors (speech_tokenizer/model.safetensors, under decoder.*) in the converter's IR.

Input codes [num_quantizers, T] (one frame of 16 codebooks a column). The split residual quantizer's codebooks
(embedding_sum / cluster_usage) are multiplied by their output projection (the first codebook's and the rest's 1x1
convolutions) when converting, so dequantising is one gather of every codebook's row and a sum. Then, channels first
and causal throughout (left padding (kernel - 1) x dilation): pre_conv (kernel 3); the pre-transformer (input_proj,
layers of RMSNorm, attention with RoPE over a causal sliding window, layer scale, RMSNorm, SwiGLU, layer scale;
norm, output_proj); per upsampling ratio a transposed convolution and a ConvNeXt block (depthwise kernel 7,
LayerNorm, GELU MLP, gamma); decoder.0 (kernel 7); per upsample rate r a SnakeBeta, a transposed convolution
(kernel 2r, stride r, the last r samples trimmed) and residual units of dilation 1, 3, 9 (SnakeBeta, kernel-7 conv,
SnakeBeta, kernel-1 conv); a final SnakeBeta and kernel-7 conv to one channel, clamped to [-1, 1]. Output waveform
[T x total upsampling]."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.deferred import DeferredArray
from converter.ir import ConverterError, Graph

from ..graph_builder import I64, GraphBuilder
from ..language.text_model_view import PrefixView

_EPS = 1e-5   # EuclideanCodebook's clamp of cluster_usage


class _CodecBuilder(GraphBuilder):
    def i64(self, hint: str, v) -> str:
        return self.const(hint, np.array(v, np.int64))

    def conv(self, x: str, prefix: str, hint: str, dilation: int = 1, groups: int = 1) -> str:
        """A causal Conv1d on [1, C, 1, T]: left padding (kernel - 1) x dilation."""
        w = self.weight(prefix + ".weight")
        out_c, _, k = w.shape
        bias = self.const(f"{hint}_b", self.weight(prefix + ".bias", (out_c,))) if prefix + ".bias" in self.w else ""
        return self.node("Conv", [x, self.const(f"{hint}_w", w[:, :, None, :]), bias],
                         {"kernel_shape": [1, k], "strides": [1, 1], "pads": [0, (k - 1) * dilation, 0, 0],
                          "dilations": [1, dilation], "group": groups}, hint=hint)

    def trans_conv(self, x: str, prefix: str, hint: str, stride: int) -> str:
        """A ConvTranspose1d on [1, C, 1, T] with its last kernel - stride samples trimmed (the causal one)."""
        w = self.weight(prefix + ".weight")   # [in, out, k]
        _, out_c, k = w.shape
        y = self.node("ConvTranspose", [x, self.const(f"{hint}_w", w[:, :, None, :]),
                                        self.const(f"{hint}_b", self.weight(prefix + ".bias", (out_c,)))],
                      {"kernel_shape": [1, k], "strides": [1, stride], "pads": [0, 0, 0, 0], "dilations": [1, 1],
                       "group": 1}, hint=hint)
        if k == stride:
            return y
        length = self.node("Gather", [self.node("Shape", [y], hint=f"{hint}_shape", dtype=I64),
                                      self.i64(f"{hint}_axis3", [3])], {"axis": 0}, hint=f"{hint}_len", dtype=I64)
        end = self.node("Sub", [length, self.i64(f"{hint}_trim", [k - stride])], hint=f"{hint}_end", dtype=I64)
        return self.node("Slice", [y, self.i64(f"{hint}_from", [0]), end, self.i64(f"{hint}_ax", [3])],
                         hint=f"{hint}_trimmed")

    def snake(self, x: str, prefix: str, hint: str) -> str:
        """SnakeBeta: x + sin(x e^alpha)^2 / (e^beta + 1e-9), per channel of [1, C, 1, T]."""
        alpha = np.exp(self.weight(prefix + ".alpha"))[None, :, None, None].astype(np.float32)
        inv_beta = (1.0 / (np.exp(self.weight(prefix + ".beta")) + 1e-9))[None, :, None, None].astype(np.float32)
        s = self.node("Sin", [self.node("Mul", [x, self.const(f"{hint}_alpha", alpha)], hint=f"{hint}_ax")],
                      hint=f"{hint}_sin")
        return self.node("Add", [x, self.node("Mul", [self.node("Mul", [s, s], hint=f"{hint}_sq"),
                                                      self.const(f"{hint}_inv_beta", inv_beta)], hint=f"{hint}_amp")],
                         hint=hint)

    def rows(self, x: str, channels: int, hint: str) -> str:
        """[1, C, 1, T] -> [1, T, C]."""
        return self.node("Transpose", [self.node("Reshape", [x, self.i64(f"{hint}_3d", [1, channels, -1])],
                                                 hint=f"{hint}_flat")], {"perm": [0, 2, 1]}, hint=hint)

    def columns(self, x: str, channels: int, hint: str) -> str:
        """[1, T, C] -> [1, C, 1, T]."""
        return self.node("Reshape", [self.node("Transpose", [x], {"perm": [0, 2, 1]}, hint=f"{hint}_t"),
                                     self.i64(f"{hint}_4d", [1, channels, 1, -1])], hint=hint)

    def rms(self, x: str, prefix: str, size: int, eps: float, hint: str) -> str:
        return self.node("RMSNormalization", [x, self.const(hint, self.weight(prefix + ".weight", (size,)))],
                         {"axis": -1, "epsilon": eps}, hint=hint)


def build_qwen3_tts_codec_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                        weight_format: str = "float32", group_size: int = 32) -> Graph:
    """`config`: the speech tokenizer's config.json (decoder_config inside) or the decoder config itself."""
    cfg = dict(config.get("decoder_config") or config)
    root = next((r for r in ("decoder.", "") if r + "pre_conv.conv.weight" in weights), None)
    if root is None:
        raise ConverterError("not a Qwen3-TTS 12 Hz tokenizer decoder: no decoder.pre_conv.conv.weight")
    b = _CodecBuilder("qwen3_tts_codec_decoder", PrefixView(weights, root), weight_format, group_size)
    nq = int(cfg.get("num_quantizers", 16))
    latent, hidden = int(cfg.get("latent_dim", 1024)), int(cfg.get("hidden_size", 1024))
    heads, kv_heads = int(cfg.get("num_attention_heads", 16)), int(cfg.get("num_key_value_heads", 16))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    window, eps = int(cfg.get("sliding_window", 72)), float(cfg.get("rms_norm_eps", 1e-5))
    if cfg.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"the codec transformer's hidden_act {cfg.get('hidden_act')!r} (silu is built)")
    codes = b.input("codes", [nq, -1], I64)

    # dequantise: every codebook's rows already through its group's output projection, gathered and summed
    tables, size = [], None
    for group, first in (("rvq_first", 0), ("rvq_rest", 1)):
        proj = b.weight(f"quantizer.{group}.output_proj.weight")[:, :, 0]          # [codebook_dim, dim / 2]
        count = 1 if first == 0 else nq - 1
        for q in range(count):
            p = f"quantizer.{group}.vq.layers.{q}._codebook."
            usage = np.maximum(b.weight(p + "cluster_usage"), _EPS)
            table = b.weight(p + "embedding_sum") / usage[:, None]
            size = table.shape[0]
            tables.append((table.astype(np.float64) @ proj.T.astype(np.float64)).astype(np.float32))
    codebook_dim = tables[0].shape[1]
    offsets = b.i64("code_offsets", (np.arange(nq) * size)[:, None])
    rows = b.node("Gather", [b.const("codebooks", np.concatenate(tables)),
                             b.node("Add", [codes, offsets], hint="flat_codes", dtype=I64)], {"axis": 0},
                  hint="code_rows")                                                           # [nq, T, codebook_dim]
    x = b.node("ReduceSum", [rows, b.i64("over_codebooks", [0])], {"keepdims": 0}, hint="dequantised")  # [T, dim]
    x = b.node("Reshape", [b.node("Transpose", [x], {"perm": [1, 0]}, hint="dq_t"),
                           b.i64("dq_4d", [1, codebook_dim, 1, -1])], hint="dq_columns")
    x = b.conv(x, "pre_conv.conv", "pre_conv")

    # the pre-transformer, on rows
    h = b.linear(b.rows(x, latent, "pt_rows"), "pre_transformer.input_proj", "pt_in", latent, hidden)
    length = b.node("Gather", [b.node("Shape", [h], hint="pt_shape", dtype=I64), b.i64("pt_axis1", 1)],
                    {"axis": 0}, hint="pt_len", dtype=I64)
    positions = b.node("Unsqueeze", [b.node("Range", [b.i64("pt_zero", 0), length, b.i64("pt_one", 1)],
                                            hint="pt_positions", dtype=I64), b.i64("pt_batch", [0])],
                       hint="pt_position_rows", dtype=I64)
    theta = float(cfg.get("rope_theta", 10000.0))
    max_pos = int(cfg.get("max_position_embeddings", 8000))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(max_pos, dtype=np.float64)[:, None] * inv[None]
    cos, sin = b.const("rope_cos", np.cos(angles).astype(np.float32)), b.const("rope_sin",
                                                                                np.sin(angles).astype(np.float32))
    for i in range(int(cfg.get("num_hidden_layers", 8))):
        p = f"pre_transformer.layers.{i}."
        a = b.rms(h, p + "input_layernorm", hidden, eps, f"ln1_{i}")
        q = b.linear(a, p + "self_attn.q_proj", f"q{i}", hidden, heads * head_dim)
        k = b.linear(a, p + "self_attn.k_proj", f"k{i}", hidden, kv_heads * head_dim)
        v = b.linear(a, p + "self_attn.v_proj", f"v{i}", hidden, kv_heads * head_dim)
        q, k = (b.node("RotaryEmbedding", [t, cos, sin, positions], {"interleaved": False, "num_heads": n,
                                                                     "rotary_embedding_dim": 0}, hint=f"{hint}{i}_rope")
                for t, n, hint in ((q, heads, "q"), (k, kv_heads, "k")))
        att = b.node("Attention", [q, k, v], {"q_num_heads": heads, "kv_num_heads": kv_heads, "scale": 0.0,
                                              "is_causal": True, "left_window_size": window - 1,
                                              "q_layout": "BSND", "k_layout": "BSND", "v_layout": "BSND",
                                              "out_layout": "BSND"}, hint=f"attn{i}")
        scale = b.weight(p + "self_attn_layer_scale.scale", (hidden,))
        h = _scaled_linear(b, att, p + "self_attn.o_proj", f"o{i}", heads * head_dim, hidden, scale, h)
        a = b.rms(h, p + "post_attention_layernorm", hidden, eps, f"ln2_{i}")
        inner = b.w_shape(p + "mlp.gate_proj.weight")[0]
        gate = b.linear(a, p + "mlp.gate_proj", f"gate{i}", hidden, inner, activation="silu")
        up = b.linear(a, p + "mlp.up_proj", f"up{i}", hidden, inner, multiplier=gate)
        h = _scaled_linear(b, up, p + "mlp.down_proj", f"down{i}", inner, hidden,
                           b.weight(p + "mlp_layer_scale.scale", (hidden,)), h)
    h = b.rms(h, "pre_transformer.norm", hidden, eps, "pt_norm")
    x = b.columns(b.linear(h, "pre_transformer.output_proj", "pt_out", hidden, latent), latent, "pt_columns")

    for j, factor in enumerate(cfg.get("upsampling_ratios", (2, 2))):
        p = f"upsample.{j}."
        x = b.trans_conv(x, p + "0.conv", f"up{j}", int(factor))
        y = b.rows(b.conv(x, p + "1.dwconv.conv", f"up{j}_dw", groups=latent), latent, f"up{j}_rows")
        y = b.node("LayerNormalization", [y, b.const(f"up{j}_ln_w", b.weight(p + "1.norm.weight", (latent,))),
                                          b.const(f"up{j}_ln_b", b.weight(p + "1.norm.bias", (latent,)))],
                   {"axis": -1, "epsilon": 1e-6}, hint=f"up{j}_ln")
        y = b.linear(y, p + "1.pwconv1", f"up{j}_pw1", latent, 4 * latent, activation="gelu")
        y = _scaled_linear(b, y, p + "1.pwconv2", f"up{j}_pw2", 4 * latent, latent,
                           b.weight(p + "1.gamma", (latent,)), "")
        x = b.node("Add", [x, b.columns(y, latent, f"up{j}_columns")], hint=f"up{j}_res")

    x = b.conv(x, "decoder.0.conv", "dec0")
    rates = list(cfg.get("upsample_rates", (8, 5, 4, 3)))
    for j, rate in enumerate(rates, start=1):
        p = f"decoder.{j}.block."
        x = b.trans_conv(b.snake(x, p + "0", f"dec{j}_snake"), p + "1.conv", f"dec{j}_up", int(rate))
        for u, dilation in zip((2, 3, 4), (1, 3, 9)):
            r = f"{p}{u}."
            y = b.conv(b.snake(x, r + "act1", f"dec{j}_{u}_a1"), r + "conv1.conv", f"dec{j}_{u}_c1", dilation)
            y = b.conv(b.snake(y, r + "act2", f"dec{j}_{u}_a2"), r + "conv2.conv", f"dec{j}_{u}_c2")
            x = b.node("Add", [x, y], hint=f"dec{j}_{u}_res")
    n = len(rates)
    x = b.conv(b.snake(x, f"decoder.{n + 1}", "final_snake"), f"decoder.{n + 2}.conv", "final_conv")
    x = b.node("Clip", [b.node("Reshape", [x, b.i64("wave_flat", [-1])], hint="wave_rows"),
                        b.const("lo", np.array(-1.0, np.float32)), b.const("hi", np.array(1.0, np.float32))],
               hint="clamped")
    b.g.outputs.append(b.rename(x, "waveform"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.qwen3_tts_codec_graph", "head": "codec_decoder",
                         "architecture": "Qwen3TTSTokenizerV2Decoder (12 Hz codes -> waveform)",
                         "weight_format": weight_format})
    return b.g


def _scaled_linear(b: GraphBuilder, x: str, prefix: str, hint: str, n_in: int, n_out: int, scale: np.ndarray,
                   residual: str) -> str:
    """residual + scale * (x W^T + bias): the layer scale folded into the weight's rows and the bias."""
    src = b.source(prefix + ".weight", (n_out, n_in))
    scaled = DeferredArray(src.shape, lambda r0, r1: src.rows(r0, r1) * scale[r0:r1, None], release=src.release,
                           source=f"{src.source} x layer scale")
    w, attrs = b.linear_weight(f"{hint}_w", scaled)
    bias = b.const(f"{hint}_b", b.weight(prefix + ".bias", (n_out,)) * scale) if prefix + ".bias" in b.w else ""
    return b.node("MatMul", [x, w, bias, residual], attrs, hint=hint)
