"""FireRedASR-AED built from its checkpoint's tensors (model.pth.tar's model_state_dict, names as
model_zoo.reference.fireredasr_aed has them) in the converter's IR:

- head "encoder": CMVN-normalised fbank frames [1, T + 6, idim] (the pipeline pads the 6 frames of context, as the
  project does) through the conv2d subsampling (two 3x3 stride-2 ReLU convolutions, then a linear layer) and the
  Conformer blocks; input rel_index [T', T'] (lite.fireredasr computes it: (T' - 1) - i + j, the column of relative
  position i - j among the 2T' - 1 encodings, which are input rel_pos [2T' - 1, d]); outputs encoder_states
  [1, T', d] and every decoder layer's cross-attention keys and values (cross_k.i / cross_v.i).
- head "decoder": model_zoo.language.cross_decoder_graph's lock-step step (token embedding x sqrt(d) plus sinusoidal
  positions, pre-LayerNorm layers, the paged KV cache, the tied output projection)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder
from ..language.cross_decoder_graph import CrossDecoderLayout, build_cross_decoder_step
from .conformer_parts import conv2d_subsampling, matmul_array, sinusoid_table


class FireRedConfig:
    def __init__(self, config: Mapping):
        get = config.get
        self.idim, self.odim = int(get("idim", 80)), int(get("odim", 7832))
        self.d, self.heads = int(get("d_model", 1280)), int(get("n_head", 20))
        self.enc_layers, self.dec_layers = int(get("n_layers_enc", 16)), int(get("n_layers_dec", 16))
        self.kernel, self.pe_maxlen = int(get("kernel_size", 33)), int(get("pe_maxlen", 5000))
        if self.d % self.heads or self.d % 2:
            raise ConverterError(f"d_model {self.d} must be even and a multiple of n_head {self.heads}")
        if self.kernel % 2 == 0:
            raise ConverterError(f"kernel_size {self.kernel} must be odd")


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": 1e-5}, hint=hint)


def _swish(b: GraphBuilder, x: str, hint: str) -> str:
    return b.node("Mul", [x, b.node("Sigmoid", [x], hint=f"{hint}_gate")], hint=hint)


def build_fireredasr_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                                   group_size: int = 32) -> Graph:
    cfg = FireRedConfig(config)
    d, H, dk = cfg.d, cfg.heads, cfg.d // cfg.heads
    if "encoder.input_preprocessor.conv.0.weight" not in weights:
        raise ConverterError("not a FireRedASR-AED checkpoint: no encoder.input_preprocessor.*")
    b = GraphBuilder("fireredasr_encoder", weights, weight_format, group_size)
    x = b.input("features", [1, -1, cfg.idim], F32)
    rel_pos = b.input("rel_pos", [-1, d], F32)
    rel_index = b.input("rel_index", [-1, -1], I64)
    p = "encoder.input_preprocessor."
    x = conv2d_subsampling(b, x, (p + "conv.0", p + "conv.2"), p + "out", cfg.idim, d)
    heads_shape = b.const("heads_shape", np.array([1, -1, H, dk], np.int64))
    rows_shape = b.const("rows_shape", np.array([1, -1, d], np.int64))
    # The relative-position gather index for every head: [1, H, T', T']
    index_shape = b.node("Concat", [b.const("one_h", np.array([1, H], np.int64)),
                                    b.node("Shape", [rel_index], hint="index_shape", dtype=I64)], {"axis": 0},
                         hint="index_4d", dtype=I64)
    index = b.node("Expand", [rel_index, index_shape], hint="rel_index_heads", dtype=I64)
    scale = b.const("score_scale", np.array(1.0 / np.sqrt(dk), np.float32))

    def ffn(v: str, prefix: str, hint: str) -> str:   # v + 0.5 net(v), the half-step macaron FFN
        h = _layer_norm(b, v, prefix + "net.0", d, f"{hint}_ln")
        h = b.linear(h, prefix + "net.1", f"{hint}_in", d, 4 * d)
        h = b.linear(_swish(b, h, f"{hint}_swish"), prefix + "net.4", f"{hint}_out", 4 * d, d)
        return b.node("Add", [v, b.node("Mul", [h, b.const(f"{hint}_half", np.array(0.5, np.float32))],
                                        hint=f"{hint}_half_out")], hint=hint)

    for i in range(cfg.enc_layers):
        lp = f"encoder.layer_stack.{i}."
        x = ffn(x, lp + "ffn1.", f"ffn1_{i}")
        a = lp + "mhsa."
        q = b.linear(_layer_norm(b, x, a + "layer_norm_q", d, f"lnq{i}"), a + "w_qs", f"q{i}", d, d)
        k = b.linear(_layer_norm(b, x, a + "layer_norm_k", d, f"lnk{i}"), a + "w_ks", f"k{i}", d, d)
        v = b.linear(_layer_norm(b, x, a + "layer_norm_v", d, f"lnv{i}"), a + "w_vs", f"v{i}", d, d)
        u = b.const(f"bias_u{i}", b.weight(a + "pos_bias_u", (H, dk)).reshape(d))
        bias_v = b.const(f"bias_v{i}", b.weight(a + "pos_bias_v", (H, dk)).reshape(d))
        pos = b.linear(rel_pos, a + "linear_pos", f"pos{i}", d, d)                             # [2T'-1, d]
        qv = b.node("Transpose", [b.node("Reshape", [b.node("Add", [q, bias_v], hint=f"qv{i}"), heads_shape],
                                         hint=f"qv{i}_h")], {"perm": [0, 2, 1, 3]}, hint=f"qv{i}_t")   # [1,H,T,dk]
        pk = b.node("Transpose", [b.node("Reshape", [pos, heads_shape], hint=f"pos{i}_h")], {"perm": [0, 2, 3, 1]},
                    hint=f"pos{i}_t")                                                            # [1, H, dk, 2T-1]
        bd = b.node("MatMul", [qv, pk], hint=f"bd{i}")                                          # [1, H, T, 2T-1]
        bd = b.node("Mul", [b.node("GatherElements", [bd, index], {"axis": -1}, hint=f"bd{i}_rel"), scale],
                    hint=f"bd{i}_scaled")
        attn = b.mha([b.node("Add", [q, u], hint=f"qu{i}"), k, v, bd], H, f"attn{i}")
        x = b.linear(attn, a + "fc", f"attn_out{i}", d, d, residual=x)
        # convolution module
        c = lp + "conv."
        h = _layer_norm(b, x, c + "pre_layer_norm", d, f"conv_ln{i}")
        pw1 = b.weight(c + "pointwise_conv1.weight", (4 * d, d, 1))[:, :, 0]
        gate = matmul_array(b, h, pw1[2 * d:], f"glu_gate{i}", activation="sigmoid")
        h = matmul_array(b, h, pw1[:2 * d], f"glu{i}", multiplier=gate)                               # [1, T, 2d]
        h = b.node("Unsqueeze", [b.node("Transpose", [h], {"perm": [0, 2, 1]}, hint=f"dw_in{i}"),
                                 b.const(f"dw_axis{i}", np.array([2], np.int64))], hint=f"dw_4d{i}")  # [1, 2d, 1, T]
        dw = b.weight(c + "depthwise_conv.weight", (2 * d, 1, cfg.kernel)).reshape(2 * d, 1, 1, cfg.kernel)
        half = (cfg.kernel - 1) // 2
        h = b.node("Conv", [h, b.const(f"dw{i}_w", dw)], {"kernel_shape": [1, cfg.kernel], "strides": [1, 1],
                                                          "pads": [0, half, 0, half], "dilations": [1, 1],
                                                          "group": 2 * d}, hint=f"dw{i}")
        h = b.node("Transpose", [b.node("Reshape", [h, b.const(f"dw_rows{i}", np.array([1, 2 * d, -1], np.int64))],
                                        hint=f"dw_3d{i}")], {"perm": [0, 2, 1]}, hint=f"dw_out{i}")      # [1, T, 2d]
        h = _swish(b, _layer_norm(b, h, c + "batch_norm", 2 * d, f"conv_norm{i}"), f"conv_swish{i}")
        pw2 = b.weight(c + "pointwise_conv2.weight", (d, 2 * d, 1))[:, :, 0]
        x = matmul_array(b, h, pw2, f"pw2_{i}", residual=x)
        x = ffn(x, lp + "ffn2.", f"ffn2_{i}")
        x = _layer_norm(b, x, lp + "layer_norm", d, f"block_ln{i}")
    x = b.rename(b.node("Reshape", [x, rows_shape], hint="states"), "encoder_states")
    b.g.outputs.append(x)
    for i in range(cfg.dec_layers):   # every decoder layer's cross-attention keys and values, once per utterance
        lp = f"decoder.layer_stack.{i}.cross_attn."
        b.g.outputs.append(b.rename(b.linear(x, lp + "w_ks", f"cross_k{i}", d, d), f"cross_k.{i}"))
        b.g.outputs.append(b.rename(b.linear(x, lp + "w_vs", f"cross_v{i}", d, d), f"cross_v.{i}"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.fireredasr_graphs", "architecture": "FireRedASR "
                         "ConformerEncoder", "head": "encoder", "weight_format": weight_format})
    return b.g


def build_fireredasr_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], block_size: int = 16,
                                   kv_cache_dtype: str = "float32", weight_format: str = "float32",
                                   group_size: int = 32) -> Graph:
    cfg = FireRedConfig(config)
    layout = CrossDecoderLayout(
        embed="decoder.tgt_word_emb.weight", layer="decoder.layer_stack.{}.", self_norm="self_attn_norm",
        self_q="self_attn.w_qs", self_k="self_attn.w_ks", self_v="self_attn.w_vs", self_out="self_attn.fc",
        cross_norm="cross_attn_norm", cross_q="cross_attn.w_qs", cross_out="cross_attn.fc", mlp_norm="mlp_norm",
        mlp_in="mlp.w_1", mlp_out="mlp.w_2", final_norm="decoder.layer_norm_out")
    g = build_cross_decoder_step("fireredasr_decoder", layout, weights, cfg.d, cfg.heads, cfg.dec_layers, 4 * cfg.d,
                                 cfg.odim, sinusoid_table(cfg.pe_maxlen, cfg.d), float(np.sqrt(cfg.d)), "gelu",
                                 block_size, kv_cache_dtype, weight_format, group_size)
    g.metadata.update({"producer": "model_zoo.multimodal.fireredasr_graphs",
                       "architecture": "FireRedASR TransformerDecoder step (paged self-attention, lock step)"})
    return g
