"""WeNet U2 / U2++ (a Conformer encoder, a CTC head and an attention decoder) built from its checkpoint's tensors
(final.pt, names as model_zoo.reference.wenet_u2 has them) in the converter's IR, for full-context decoding:

- head "encoder": fbank frames [1, T, input_dim] through the global CMVN, the conv2d subsampling (x sqrt(d)) and the
  Conformer layers (relative-position attention: the input pos_emb [T', d] is the absolute sinusoids of key
  positions 0 .. T' - 1, which lite.wenet gives; BatchNorm folded into the depthwise convolution; a causal module
  left-pads its kernel); outputs encoder_out [1, T', d] and ctc_log_probs [T', vocab].
- head "decoder": N hypotheses at once for attention rescoring: hyps [N, L] (sos first, eos-padded: the decoder is
  causal, so padding after a hypothesis changes none of its positions) and encoder_out [N, T', d]; outputs
  left_log_probs [N, L, vocab] and, with a right-to-left decoder, right_log_probs of input reversed_hyps (sos, then
  each hypothesis backwards)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder
from .conformer_parts import conv2d_subsampling, matmul_array, sinusoid_table

_REQUIRED = {"input_layer": "conv2d", "pos_enc_layer_type": "rel_pos", "selfattention_layer_type": "rel_selfattn",
             "normalize_before": True, "macaron_style": True, "use_cnn_module": True, "activation_type": "swish",
             "concat_after": False}


class WenetConfig:
    def __init__(self, config: Mapping):
        enc = dict(config.get("encoder_conf") or {})
        self.input_dim, self.vocab = int(config["input_dim"]), int(config["output_dim"])
        self.d, self.heads = int(enc.get("output_size", 256)), int(enc.get("attention_heads", 4))
        self.units, self.blocks = int(enc.get("linear_units", 2048)), int(enc.get("num_blocks", 6))
        self.kernel, self.causal = int(enc.get("cnn_module_kernel", 15)), bool(enc.get("causal", False))
        self.conv_norm = enc.get("cnn_module_norm", "batch_norm")
        if config.get("encoder", "conformer") != "conformer":
            raise NotImplementedError(f"WeNet encoder {config.get('encoder')!r} (the Conformer is supported)")
        for key, want in _REQUIRED.items():
            if enc.get(key, want) != want:
                raise NotImplementedError(f"WeNet encoder_conf {key}: {enc[key]!r} (supported: {want!r})")
        if self.conv_norm not in ("batch_norm", "layer_norm"):
            raise NotImplementedError(f"cnn_module_norm {self.conv_norm!r}")
        if not self.causal and self.kernel % 2 == 0:
            raise ConverterError(f"a centred depthwise kernel must be odd, not {self.kernel}")
        if self.d % self.heads:
            raise ConverterError(f"output_size {self.d} is not a multiple of attention_heads {self.heads}")
        dec = dict(config.get("decoder_conf") or {})
        self.decoder = config.get("decoder", "bitransformer")
        if self.decoder not in ("transformer", "bitransformer"):
            raise NotImplementedError(f"WeNet decoder {self.decoder!r} (transformer / bitransformer are supported)")
        self.dec_heads, self.dec_units = int(dec.get("attention_heads", 4)), int(dec.get("linear_units", 2048))
        self.dec_blocks, self.r_blocks = int(dec.get("num_blocks", 6)), int(dec.get("r_num_blocks", 0))
        if dec.get("normalize_before", True) is not True or dec.get("concat_after", False):
            raise NotImplementedError("WeNet decoders with normalize_before false or concat_after")


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": 1e-5}, hint=hint)


def _half(b: GraphBuilder, x: str, h: str, hint: str) -> str:
    return b.node("Add", [x, b.node("Mul", [h, b.const(f"{hint}_half", np.array(0.5, np.float32))],
                                    hint=f"{hint}_scaled")], hint=hint)


def build_wenet_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                              group_size: int = 32, streaming: bool = False) -> Graph:
    """`streaming` (head "encoder_chunk", causal models): one chunk's window of frames with the layers' caches, as
    WeNet's forward_chunk: inputs key_cache / value_cache [layers, 1, heads, P, d_k] (the earlier keys and values),
    key_bias [1, 1, 1, P + T] (0, or a large negative for cache rows that hold nothing yet), cnn_cache
    [layers, 1, d, kernel - 1] (the causal convolutions' last input frames) and pos_emb [P + T, d] (the keys'
    absolute positions); extra outputs new_key_cache / new_value_cache [layers, 1, heads, P + T, d_k] and
    new_cnn_cache."""
    cfg = WenetConfig(config)
    d, H, dk = cfg.d, cfg.heads, cfg.d // cfg.heads
    if "encoder.embed.conv.0.weight" not in weights:
        raise ConverterError("not a WeNet conv2d-subsampling checkpoint: no encoder.embed.conv.0.weight")
    if streaming and not cfg.causal:
        raise NotImplementedError("chunk streaming needs a causal convolution module (encoder_conf causal: true)")
    b = GraphBuilder("wenet_encoder_chunk" if streaming else "wenet_encoder", weights, weight_format, group_size)
    x = b.input("features", [1, -1, cfg.input_dim], F32)
    pos = b.input("pos_emb", [-1, d], F32)
    if streaming:
        key_cache = b.input("key_cache", [cfg.blocks, 1, H, -1, dk], F32)
        value_cache = b.input("value_cache", [cfg.blocks, 1, H, -1, dk], F32)
        key_bias = b.input("key_bias", [1, 1, 1, -1], F32)
        cnn_cache = b.input("cnn_cache", [cfg.blocks, 1, d, cfg.kernel - 1], F32)
        new_keys, new_values, new_cnn = [], [], []
    if "encoder.global_cmvn.mean" in weights:
        x = b.node("Mul", [b.node("Sub", [x, b.const("cmvn_mean", b.weight("encoder.global_cmvn.mean",
                                                                           (cfg.input_dim,)))], hint="centred"),
                           b.const("cmvn_istd", b.weight("encoder.global_cmvn.istd", (cfg.input_dim,)))],
                   hint="normalised")
    x = conv2d_subsampling(b, x, ("encoder.embed.conv.0", "encoder.embed.conv.2"), "encoder.embed.out.0",
                           cfg.input_dim, d)
    x = b.node("Mul", [x, b.const("xscale", np.array(np.sqrt(d), np.float32))], hint="scaled")
    heads_shape = b.const("heads_shape", np.array([1, -1, H, dk], np.int64))
    score_scale = b.const("score_scale", np.array(1.0 / np.sqrt(dk), np.float32))
    half = (cfg.kernel - 1) // 2
    pads = [0, 0, 0, 0] if streaming else [0, cfg.kernel - 1, 0, 0] if cfg.causal else [0, half, 0, half]

    def layer_of(cache: str, i: int, hint: str) -> str:
        return b.node("Gather", [cache, b.const(f"{hint}_index", np.array(i, np.int64))], {"axis": 0}, hint=hint)

    def heads_first(t: str, hint: str) -> str:   # [1, T, d] -> [1, H, T, dk]
        return b.node("Transpose", [b.node("Reshape", [t, heads_shape], hint=f"{hint}_h")], {"perm": [0, 2, 1, 3]},
                      hint=hint)

    def ffn(v: str, prefix: str, hint: str) -> str:
        h = b.linear(v, prefix + "w_1", f"{hint}_in", d, cfg.units, activation="silu")
        return b.linear(h, prefix + "w_2", f"{hint}_out", cfg.units, d)

    for i in range(cfg.blocks):
        lp = f"encoder.encoders.{i}."
        x = _half(b, x, ffn(_layer_norm(b, x, lp + "norm_ff_macaron", d, f"ln_mac{i}"), lp + "feed_forward_macaron.",
                            f"mac{i}"), f"res_mac{i}")
        a = lp + "self_attn."
        h = _layer_norm(b, x, lp + "norm_mha", d, f"ln_mha{i}")
        q, k, v = (b.linear(h, a + f"linear_{n}", f"{n}{i}", d, d) for n in "qkv")
        u = b.const(f"bias_u{i}", b.weight(a + "pos_bias_u", (H, dk)).reshape(d))
        bias_v = b.const(f"bias_v{i}", b.weight(a + "pos_bias_v", (H, dk)).reshape(d))
        p = b.linear(pos, a + "linear_pos", f"pos{i}", d, d)                                        # [T', d]
        qv = b.node("Transpose", [b.node("Reshape", [b.node("Add", [q, bias_v], hint=f"qv{i}"), heads_shape],
                                         hint=f"qv{i}_h")], {"perm": [0, 2, 1, 3]}, hint=f"qv{i}_t")
        pk = b.node("Transpose", [b.node("Reshape", [p, heads_shape], hint=f"pos{i}_h")], {"perm": [0, 2, 3, 1]},
                    hint=f"pos{i}_t")
        bd = b.node("Mul", [b.node("MatMul", [qv, pk], hint=f"bd{i}"), score_scale], hint=f"bd{i}_scaled")
        if streaming:   # the chunk's keys and values after the cached ones; the attention reads them head-first
            keys = b.node("Concat", [layer_of(key_cache, i, f"kc{i}"), heads_first(k, f"k{i}_t")], {"axis": 2},
                          hint=f"keys{i}")
            values = b.node("Concat", [layer_of(value_cache, i, f"vc{i}"), heads_first(v, f"v{i}_t")], {"axis": 2},
                            hint=f"values{i}")
            new_keys.append(keys)
            new_values.append(values)
            attn = b.node("Attention", [b.node("Add", [q, u], hint=f"qu{i}"), keys, values,
                                        b.node("Add", [bd, key_bias], hint=f"bd{i}_masked")],
                          {"q_num_heads": H, "kv_num_heads": H, "scale": 0.0, "is_causal": False,
                           "q_layout": "BSND", "k_layout": "BNSD", "v_layout": "BNSD", "out_layout": "BSND"},
                          hint=f"attn{i}")
        else:
            attn = b.mha([b.node("Add", [q, u], hint=f"qu{i}"), k, v, bd], H, f"attn{i}")
        x = b.linear(attn, a + "linear_out", f"attn_out{i}", d, d, residual=x)
        # convolution module, BatchNorm folded into the depthwise convolution
        c = lp + "conv_module."
        h = _layer_norm(b, x, lp + "norm_conv", d, f"ln_conv{i}")
        pw1 = b.weight(c + "pointwise_conv1.weight", (2 * d, d, 1))[:, :, 0]
        pb1 = b.weight(c + "pointwise_conv1.bias", (2 * d,)) if c + "pointwise_conv1.bias" in weights else \
            np.zeros(2 * d, np.float32)
        gate = matmul_array(b, h, pw1[d:], f"glu_gate{i}", pb1[d:], activation="sigmoid")
        h = matmul_array(b, h, pw1[:d], f"glu{i}", pb1[:d], multiplier=gate)                           # [1, T, d]
        h = b.node("Transpose", [h], {"perm": [0, 2, 1]}, hint=f"dw_in{i}")                          # [1, d, T]
        if streaming:   # the cached frames before the chunk's; the last kernel - 1 of them are the next cache
            h = b.node("Concat", [layer_of(cnn_cache, i, f"cc{i}"), h], {"axis": 2}, hint=f"dw_context{i}")
            new_cnn.append(b.node("Slice", [h, b.const(f"cc{i}_from", np.array([-(cfg.kernel - 1)], np.int64)),
                                            b.const(f"cc{i}_to", np.array([np.iinfo(np.int64).max], np.int64)),
                                            b.const(f"cc{i}_axis", np.array([2], np.int64))], hint=f"cc{i}_next"))
        h = b.node("Unsqueeze", [h, b.const(f"dw_axis{i}", np.array([2], np.int64))], hint=f"dw_4d{i}")
        dw = b.weight(c + "depthwise_conv.weight", (d, 1, cfg.kernel)).reshape(d, 1, 1, cfg.kernel)
        db = b.weight(c + "depthwise_conv.bias", (d,)) if c + "depthwise_conv.bias" in weights else \
            np.zeros(d, np.float32)
        if cfg.conv_norm == "batch_norm":
            scale = b.weight(c + "norm.weight", (d,)) / np.sqrt(b.weight(c + "norm.running_var", (d,)) + 1e-5)
            dw = dw * scale[:, None, None, None]
            db = (db - b.weight(c + "norm.running_mean", (d,))) * scale + b.weight(c + "norm.bias", (d,))
        h = b.node("Conv", [h, b.const(f"dw{i}_w", dw.astype(np.float32)), b.const(f"dw{i}_b", db.astype(np.float32))],
                   {"kernel_shape": [1, cfg.kernel], "strides": [1, 1], "pads": pads, "dilations": [1, 1],
                    "group": d}, hint=f"dw{i}")
        h = b.node("Transpose", [b.node("Reshape", [h, b.const(f"dw_rows{i}", np.array([1, d, -1], np.int64))],
                                        hint=f"dw_3d{i}")], {"perm": [0, 2, 1]}, hint=f"dw_out{i}")
        if cfg.conv_norm == "layer_norm":
            h = _layer_norm(b, h, c + "norm", d, f"conv_norm{i}")
        h = b.node("Mul", [h, b.node("Sigmoid", [h], hint=f"conv_gate{i}")], hint=f"conv_swish{i}")
        pw2 = b.weight(c + "pointwise_conv2.weight", (d, d, 1))[:, :, 0]
        pb2 = b.weight(c + "pointwise_conv2.bias", (d,)) if c + "pointwise_conv2.bias" in weights else None
        x = matmul_array(b, h, pw2, f"pw2_{i}", pb2, residual=x)
        x = _half(b, x, ffn(_layer_norm(b, x, lp + "norm_ff", d, f"ln_ff{i}"), lp + "feed_forward.", f"ff{i}"),
                  f"res_ff{i}")
        x = _layer_norm(b, x, lp + "norm_final", d, f"ln_final{i}")
    x = b.rename(_layer_norm(b, x, "encoder.after_norm", d, "after_norm"), "encoder_out")
    b.g.outputs.append(x)
    logits = b.linear(b.node("Reshape", [x, b.const("frames", np.array([-1, d], np.int64))], hint="frames"),
                      "ctc.ctc_lo", "ctc", d, cfg.vocab)
    b.g.outputs.append(b.rename(b.node("LogSoftmax", [logits], {"axis": -1}, hint="ctc_logp"), "ctc_log_probs"))
    if streaming:
        for name, parts in (("new_key_cache", new_keys), ("new_value_cache", new_values), ("new_cnn_cache", new_cnn)):
            stacked = [b.node("Unsqueeze", [t, b.const(f"{name}{j}_axis", np.array([0], np.int64))],
                              hint=f"{name}{j}") for j, t in enumerate(parts)]
            b.g.outputs.append(b.rename(b.node("Concat", stacked, {"axis": 0}, hint=f"{name}_all"), name))
    b.g.metadata.update({"producer": "model_zoo.multimodal.wenet_graphs", "architecture": "WeNet ConformerEncoder + "
                         "CTC" + (" (one streaming chunk)" if streaming else ""),
                         "head": "encoder_chunk" if streaming else "encoder", "weight_format": weight_format})
    return b.g


def _decoder(b: GraphBuilder, ys: str, memory: str, prefix: str, cfg: WenetConfig, blocks: int, tag: str) -> str:
    d, heads, units = cfg.d, cfg.dec_heads, cfg.dec_units
    table = b.const(f"{tag}_embed", b.weight(prefix + "embed.0.weight", (cfg.vocab, d)) * np.float32(np.sqrt(d)))
    length = b.node("Gather", [b.node("Shape", [ys], hint=f"{tag}_ys_shape", dtype=I64),
                               b.const(f"{tag}_axis1", np.array(1, np.int64))], {"axis": 0}, hint=f"{tag}_len",
                    dtype=I64)
    positions = b.node("Range", [b.const(f"{tag}_zero", np.array(0, np.int64)), length,
                                 b.const(f"{tag}_step", np.array(1, np.int64))], hint=f"{tag}_positions", dtype=I64)
    pe = b.node("Gather", [b.const(f"{tag}_pe", sinusoid_table(5000, d)), positions], {"axis": 0}, hint=f"{tag}_pe")
    x = b.node("Add", [b.node("Gather", [table, ys], {"axis": 0}, hint=f"{tag}_tokens"), pe], hint=f"{tag}_embedded")
    for i in range(blocks):
        lp = f"{prefix}decoders.{i}."
        h = _layer_norm(b, x, lp + "norm1", d, f"{tag}_ln1_{i}")
        qkv = [b.linear(h, lp + f"self_attn.linear_{n}", f"{tag}_{n}{i}", d, d) for n in "qkv"]
        x = b.linear(b.mha(qkv, heads, f"{tag}_self{i}", causal=True), lp + "self_attn.linear_out", f"{tag}_so{i}",
                     d, d, residual=x)
        h = _layer_norm(b, x, lp + "norm2", d, f"{tag}_ln2_{i}")
        q = b.linear(h, lp + "src_attn.linear_q", f"{tag}_cq{i}", d, d)
        k = b.linear(memory, lp + "src_attn.linear_k", f"{tag}_ck{i}", d, d)
        v = b.linear(memory, lp + "src_attn.linear_v", f"{tag}_cv{i}", d, d)
        x = b.linear(b.mha([q, k, v], heads, f"{tag}_src{i}"), lp + "src_attn.linear_out", f"{tag}_co{i}", d, d,
                     residual=x)
        h = _layer_norm(b, x, lp + "norm3", d, f"{tag}_ln3_{i}")
        x = b.linear(b.linear(h, lp + "feed_forward.w_1", f"{tag}_ff_in{i}", d, units, activation="relu"),
                     lp + "feed_forward.w_2", f"{tag}_ff_out{i}", units, d, residual=x)
    x = b.linear(_layer_norm(b, x, prefix + "after_norm", d, f"{tag}_after_norm"), prefix + "output_layer",
                 f"{tag}_output", d, cfg.vocab)
    return b.node("LogSoftmax", [x], {"axis": -1}, hint=f"{tag}_logp")


def build_wenet_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                              group_size: int = 32) -> Graph:
    cfg = WenetConfig(config)
    b = GraphBuilder("wenet_decoder", weights, weight_format, group_size)
    ys = b.input("hyps", [-1, -1], I64)
    memory = b.input("encoder_out", [-1, -1, cfg.d], F32)
    bi = cfg.decoder == "bitransformer"
    b.g.outputs.append(b.rename(_decoder(b, ys, memory, "decoder.left_decoder." if bi else "decoder.", cfg,
                                         cfg.dec_blocks, "left"), "left_log_probs"))
    if bi and cfg.r_blocks > 0:   # the right-to-left decoder reads the reversed hypotheses
        r_ys = b.input("reversed_hyps", [-1, -1], I64)
        b.g.outputs.append(b.rename(_decoder(b, r_ys, memory, "decoder.right_decoder.", cfg, cfg.r_blocks, "right"),
                                    "right_log_probs"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.wenet_graphs", "architecture": f"WeNet {cfg.decoder} "
                         "decoder (attention rescoring)", "head": "decoder", "weight_format": weight_format})
    return b.g
