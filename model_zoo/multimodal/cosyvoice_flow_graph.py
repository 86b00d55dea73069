"""CosyVoice 2's flow-matching acoustic model (CausalMaskedDiffWithXvec) built from its flow.pt tensors (names as
model_zoo.reference.cosyvoice_flow has them) in the converter's IR, for non-streaming inference; the Euler loop
around the estimator is lite.cosyvoice_flow's.

- "encoder": inputs tokens int64 [1, N] (the prompt's speech tokens, then the target's) and embedding float32
  [1, spk_embed_dim] (the x-vector); outputs mu float32 [1, 80, r N] (r = token_mel_ratio: the upsampling Conformer
  encoder, then encoder_proj, channels first) and spks float32 [1, 80] (the x-vector L2-normalised, then
  spk_embed_affine_layer). The ESPnet relative positions (2T - 1 sinusoids) and the relative-shift index are
  computed in the graph from the length.
- "estimator": one evaluation of the flow's velocity, inputs x, mu, cond [B, 80, T], mask [B, 1, T], t [B], spks
  [B, 80] (B = 2 for classifier-free guidance, T any) -> dphi [B, 80, T]. Full attention over the frames `mask`
  marks valid. The graph runs on frames [B, T, C]; each causal convolution is a Conv over channels-first frames,
  left-padded by kernel - 1; 1x1 convolutions are MatMuls.

Linear layers, the token table and the convolutions are stored in `weight_format` (int8: a scale per output row /
channel; int4: blocks along the reduction axis); norms and biases stay float32."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder
from .conformer_parts import matmul_array


def _sub(config: Mapping, key: str) -> dict:
    return dict(config.get(key) or {})


class FlowSizes:
    """What CosyVoice 2's and 3's flow configs (CosyVoiceFlowConfig, cosyvoice3_flow_graph.CosyVoice3FlowConfig)
    read alike: the token embedding's width (`input_size`, its default differs), the mel bins, the x-vector's width,
    the speech-token vocabulary, mel frames per token, and the CFM's guidance rate and time schedule."""

    def __init__(self, config: Mapping, input_size: int):
        cfm = _sub(_sub(config, "decoder"), "cfm_params")
        self.input_size = int(config.get("input_size", input_size))
        self.mel = int(config.get("output_size", 80))
        self.spk_dim = int(config.get("spk_embed_dim", 192))
        self.vocab = int(config.get("vocab_size", 6561))
        self.ratio = int(config.get("token_mel_ratio", 2))
        self.cfg_rate = float(cfm.get("inference_cfg_rate", 0.7))
        self.t_scheduler = str(cfm.get("t_scheduler", "cosine"))


class CosyVoiceFlowConfig(FlowSizes):
    """The sizes a flow config (the CosyVoice 2 yaml's `flow:` kwargs as a dict) implies; what is not built is
    refused by name. encoder.num_up_blocks (ours; CosyVoice 2 hard-codes 4) sizes the up-sampled Conformer."""

    def __init__(self, config: Mapping):
        super().__init__(config, input_size=512)
        enc, dec = _sub(config, "encoder"), _sub(config, "decoder")
        est, cfm = _sub(dec, "estimator"), _sub(dec, "cfm_params")
        self.lookahead = int(config.get("pre_lookahead_len", 3))
        self.d = int(enc.get("output_size", 512))
        self.heads = int(enc.get("attention_heads", 8))
        self.units = int(enc.get("linear_units", 2048))
        self.blocks = int(enc.get("num_blocks", 6))
        self.up_blocks = int(enc.get("num_up_blocks", 4))
        self.est_in = int(est.get("in_channels", 320))
        self.est_out = int(est.get("out_channels", 80))
        self.channels = [int(c) for c in est.get("channels", [256])]
        self.head_dim = int(est.get("attention_head_dim", 64))
        self.est_heads = int(est.get("num_heads", 8))
        self.n_blocks = int(est.get("n_blocks", 4))
        self.mid_blocks = int(est.get("num_mid_blocks", 12))
        built = {"input_layer": (enc, "linear"), "pos_enc_layer_type": (enc, "rel_pos_espnet"),
                 "selfattention_layer_type": (enc, "rel_selfattn"), "normalize_before": (enc, True),
                 "use_cnn_module": (enc, False), "macaron_style": (enc, False), "activation_type": (enc, "swish"),
                 "act_fn": (est, "gelu"), "solver": (cfm, "euler"), "output_type": (config, "mel")}
        for key, (where, want) in built.items():
            if where.get(key, want) != want:
                raise NotImplementedError(f"CosyVoice flow {key}={where[key]!r} (built: {want!r})")
        if self.t_scheduler not in ("cosine", "linear"):
            raise NotImplementedError(f"CosyVoice flow t_scheduler {self.t_scheduler!r} (built: cosine, linear)")
        if len(self.channels) != 1:
            raise NotImplementedError(f"estimator channels {self.channels}: one level (CosyVoice 2's [256]) is built")
        if int(enc.get("input_size", self.input_size)) != self.input_size:
            raise ConverterError(f"encoder input_size {enc['input_size']} differs from the flow's {self.input_size}")
        if self.d % self.heads or self.d % 2:
            raise ConverterError(f"encoder output_size {self.d} must be even and split into {self.heads} heads")
        if self.est_in != 4 * self.mel or self.est_out != self.mel or self.est_in % 2:
            raise ConverterError(f"estimator in / out channels {self.est_in} / {self.est_out} do not fit "
                                 f"[x, mu, spks, cond] of {self.mel} mel bins")
        if min(self.ratio, self.lookahead + 1, self.blocks + 1, self.up_blocks + 1, self.n_blocks + 1) < 1:
            raise ConverterError("token_mel_ratio must be positive and the block counts not negative")


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": 1e-5}, hint=hint)


def _transpose(b: GraphBuilder, x: str, hint: str) -> str:
    return b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint=hint)


def _conv(b: GraphBuilder, x: str, prefix: str, c_in: int, c_out: int, kernel: int, pads: tuple[int, int],
          hint: str, group: int = 1) -> str:
    """A Conv1d over channels-first frames [B, c_in, T]; pads (left, right) zeros; `group` groups. The weight in the
    weight format (float32 as is; else a scale per output channel / blocks along its input channels, decoded at
    load)."""
    shape = (c_out, c_in // group, kernel)
    if b.weight_format == "float32":
        w = b.const(f"{hint}_w", b.weight(prefix + ".weight", shape))
    else:
        w = b.stored(f"{hint}_w", b.source(prefix + ".weight", shape), reduce_axis=1)
    return b.node("Conv", [x, w, b.const(f"{hint}_b", b.weight(prefix + ".bias", (c_out,)))],
                  {"kernel_shape": [kernel], "strides": [1], "pads": list(pads), "dilations": [1], "group": group},
                  hint=hint)


def _frames_conv(b: GraphBuilder, x: str, prefix: str, c_in: int, c_out: int, kernel: int, pads: tuple[int, int],
                 hint: str) -> str:
    """_conv over frames [B, T, c_in] -> [B, T', c_out] (transposed to channels first and back)."""
    h = _conv(b, _transpose(b, x, f"{hint}_in"), prefix, c_in, c_out, kernel, pads, hint)
    return _transpose(b, h, f"{hint}_out")


def _pointwise(b: GraphBuilder, x: str, prefix: str, c_in: int, c_out: int, hint: str, residual: str = "") -> str:
    """A kernel-1 Conv1d on frames [B, T, c_in], as a MatMul (+ bias, + residual)."""
    w = b.weight(prefix + ".weight", (c_out, c_in, 1))[:, :, 0]
    return matmul_array(b, x, w, hint, b.weight(prefix + ".bias", (c_out,)), residual=residual)


def _i64(b: GraphBuilder, hint: str, values) -> str:
    return b.const(hint, np.array(values, np.int64))


# ---------------------------------------------------------------------------------------------------------------
# what CosyVoice 3's graphs (model_zoo.multimodal.cosyvoice3_flow_graph) share with these: the two interfaces, the
# x-vector's affine, the time sinusoids, the key mask
def _encoder_inputs(b: GraphBuilder, cfg: FlowSizes) -> tuple[str, str]:
    """The encoder's inputs tokens int64 [1, N] and embedding [1, spk_dim] -> (the tokens' input_embedding rows
    [1, N, input_size], spks [1, mel]: the x-vector L2-normalised, then spk_embed_affine_layer)."""
    tokens = b.input("tokens", [1, -1], I64)
    xvec = b.input("embedding", [1, cfg.spk_dim], F32)
    norm = b.node("ReduceL2", [xvec, _i64(b, "xvec_axis", [1])], {"keepdims": 1}, hint="xvec_norm")
    norm = b.node("Max", [norm, b.const("xvec_eps", np.array(1e-12, np.float32))], hint="xvec_norm_safe")
    unit = b.node("Div", [xvec, norm], hint="xvec_unit")
    spks = b.linear(unit, "spk_embed_affine_layer", "spk_affine", cfg.spk_dim, cfg.mel)
    table = b.stored("token_table", b.source("input_embedding.weight", (cfg.vocab, cfg.input_size)), reduce_axis=1)
    return b.node("Gather", [table, tokens], {"axis": 0}, hint="token_embed"), spks


def _estimator_inputs(b: GraphBuilder, mel: int) -> tuple[str, str, str, str, str, str]:
    """The estimator's inputs x, mask, mu, t, spks, cond (in that order)."""
    return (b.input("x", [-1, mel, -1], F32), b.input("mask", [-1, 1, -1], F32), b.input("mu", [-1, mel, -1], F32),
            b.input("t", [-1], F32), b.input("spks", [-1, mel], F32), b.input("cond", [-1, mel, -1], F32))


def _time_sinusoids(b: GraphBuilder, t: str, dim: int) -> str:
    """t [B] -> [B, dim]: [sin, cos] of 1000 t x 10000^(-i / (dim / 2 - 1))."""
    half = dim // 2
    freq = np.exp(np.arange(half, dtype=np.float32) * np.float32(-(math.log(10000) / (half - 1)))).astype(np.float32)
    t_col = b.node("Unsqueeze", [b.node("Mul", [t, b.const("t_scale", np.array(1000, np.float32))], hint="t_scaled"),
                                 _i64(b, "t_axis", [1])], hint="t_col")
    angle = b.node("Mul", [t_col, b.const("t_freq", freq.reshape(1, half))], hint="t_angle")
    return b.node("Concat", [b.node("Sin", [angle], hint="t_sin"), b.node("Cos", [angle], hint="t_cos")],
                  {"axis": 1}, hint="t_sinusoid")


def _spks_frames(b: GraphBuilder, spks: str, mu: str) -> str:
    """spks [B, mel] repeated over mu's [B, mel, T] frames."""
    return b.node("Expand", [b.node("Unsqueeze", [spks, _i64(b, "spks_axis", [2])], hint="spks_col"),
                             b.node("Shape", [mu], hint="mu_shape", dtype=I64)], hint="spks_frames")


def _key_mask(b: GraphBuilder, mask: str) -> tuple[str, str]:
    """mask [B, 1, T] -> (mask rows [B, T, 1], the attention bias [B, 1, 1, T]: 0 on valid keys, -1e10 on the
    others)."""
    rows = _transpose(b, mask, "mask_rows")
    bias = b.node("Mul", [b.node("Sub", [mask, b.const("mask_one", np.array(1, np.float32))], hint="mask_off"),
                          b.const("big", np.array(1.0e10, np.float32))], hint="key_bias")
    return rows, b.node("Unsqueeze", [bias, _i64(b, "bias_axis", [1])], hint="key_bias_4d")


def _finish(b: GraphBuilder, outputs: Mapping[str, str], **metadata: str) -> Graph:
    """The graph with `outputs` (public name: value) and `metadata` recorded."""
    for name, value in outputs.items():
        b.g.outputs.append(b.rename(value, name))
    b.g.metadata.update(metadata)
    return b.g


# ---------------------------------------------------------------------------------------------------------------
# encoder
def _relative_positions(b: GraphBuilder, x: str, d: int, heads: int, hint: str) -> tuple[str, str]:
    """For frames x [1, T, d]: the sinusoids [2T - 1, d] of relative positions T - 1 .. -(T - 1) (sin at even, cos
    at odd columns of position x 10000^(-2i / d)) and the relative-shift index [1, heads, T, T], (T - 1) - i + j:
    the column of relative position i - j."""
    length = b.node("Gather", [b.node("Shape", [x], hint=f"{hint}_shape", dtype=I64), _i64(b, f"{hint}_axis1", 1)],
                    {"axis": 0}, hint=f"{hint}_len", dtype=I64)
    last = b.node("Sub", [length, _i64(b, f"{hint}_one", 1)], hint=f"{hint}_last", dtype=I64)
    rel = b.node("Range", [last, b.node("Neg", [length], hint=f"{hint}_end", dtype=I64), _i64(b, f"{hint}_down", -1)],
                 hint=f"{hint}_rel", dtype=I64)
    rel = b.node("Cast", [rel], {"to": F32}, hint=f"{hint}_rel_f")
    freq = np.exp(np.arange(0, d, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / d))).astype(np.float32)
    angle = b.node("Mul", [b.node("Unsqueeze", [rel, _i64(b, f"{hint}_col", [1])], hint=f"{hint}_rel_col"),
                           b.const(f"{hint}_freq", freq.reshape(1, -1))], hint=f"{hint}_angle")
    pair_axis = _i64(b, f"{hint}_pair", [2])
    parts = [b.node("Unsqueeze", [b.node(op, [angle], hint=f"{hint}_{op.lower()}"), pair_axis], hint=f"{hint}_{op}3")
             for op in ("Sin", "Cos")]
    pairs = b.node("Concat", parts, {"axis": 2}, hint=f"{hint}_pairs")                      # [2T - 1, d / 2, 2]
    pe = b.node("Reshape", [pairs, _i64(b, f"{hint}_rows", [-1, d])], hint=f"{hint}_pe")
    steps = b.node("Range", [_i64(b, f"{hint}_zero", 0), length, _i64(b, f"{hint}_up", 1)], hint=f"{hint}_steps",
                   dtype=I64)
    queries = b.node("Unsqueeze", [steps, _i64(b, f"{hint}_qaxis", [1])], hint=f"{hint}_queries", dtype=I64)
    keys = b.node("Unsqueeze", [steps, _i64(b, f"{hint}_kaxis", [0])], hint=f"{hint}_keys", dtype=I64)
    index = b.node("Add", [b.node("Sub", [last, queries], hint=f"{hint}_back", dtype=I64), keys], hint=f"{hint}_index",
                   dtype=I64)
    shape = b.node("Concat", [_i64(b, f"{hint}_lead", [1, heads]), b.node("Shape", [index], hint=f"{hint}_ishape",
                                                                         dtype=I64)],
                   {"axis": 0}, hint=f"{hint}_ishape4", dtype=I64)
    return pe, b.node("Expand", [index, shape], hint=f"{hint}_index_heads", dtype=I64)


def _conformer_layer(b: GraphBuilder, x: str, pe: str, index: str, cfg: CosyVoiceFlowConfig, prefix: str,
                     hint: str) -> str:
    """x + relative-position self-attention(norm_mha(x)), then + the SiLU feed-forward(norm_ff(x))."""
    d, H, dk = cfg.d, cfg.heads, cfg.d // cfg.heads
    a = prefix + "self_attn."
    h = _layer_norm(b, x, prefix + "norm_mha", d, f"{hint}_ln_mha")
    q, k, v = (b.linear(h, a + f"linear_{n}", f"{hint}_{n}", d, d) for n in "qkv")
    u = b.const(f"{hint}_bias_u", b.weight(a + "pos_bias_u", (H, dk)).reshape(d))
    bias_v = b.const(f"{hint}_bias_v", b.weight(a + "pos_bias_v", (H, dk)).reshape(d))
    heads_shape = _i64(b, f"{hint}_heads", [1, -1, H, dk])
    p = b.linear(pe, a + "linear_pos", f"{hint}_pos", d, d)                                     # [2T - 1, d]
    qv = b.node("Transpose", [b.node("Reshape", [b.node("Add", [q, bias_v], hint=f"{hint}_qv"), heads_shape],
                                     hint=f"{hint}_qv_h")], {"perm": [0, 2, 1, 3]}, hint=f"{hint}_qv_t")  # [1,H,T,dk]
    pk = b.node("Transpose", [b.node("Reshape", [p, heads_shape], hint=f"{hint}_pos_h")], {"perm": [0, 2, 3, 1]},
                hint=f"{hint}_pos_t")                                                          # [1, H, dk, 2T - 1]
    bd = b.node("GatherElements", [b.node("MatMul", [qv, pk], hint=f"{hint}_bd_all"), index], {"axis": -1},
                hint=f"{hint}_bd")                                                             # [1, H, T, T]
    bd = b.node("Mul", [bd, b.const(f"{hint}_scale", np.array(1.0 / math.sqrt(dk), np.float32))],
                hint=f"{hint}_bd_scaled")
    attn = b.mha([b.node("Add", [q, u], hint=f"{hint}_qu"), k, v, bd], H, f"{hint}_attn")
    x = b.linear(attn, a + "linear_out", f"{hint}_attn_out", d, d, residual=x)
    h = _layer_norm(b, x, prefix + "norm_ff", d, f"{hint}_ln_ff")
    h = b.linear(h, prefix + "feed_forward.w_1", f"{hint}_ff_in", d, cfg.units, activation="silu")
    return b.linear(h, prefix + "feed_forward.w_2", f"{hint}_ff_out", cfg.units, d, residual=x)


def _linear_embed(b: GraphBuilder, x: str, prefix: str, idim: int, d: int, hint: str) -> str:
    """Linear, LayerNorm, x sqrt(d) (LinearNoSubsampling with the ESPnet positions' scale)."""
    h = _layer_norm(b, b.linear(x, prefix + ".out.0", f"{hint}_linear", idim, d), prefix + ".out.1", d, f"{hint}_ln")
    return b.node("Mul", [h, b.const(f"{hint}_xscale", np.array(math.sqrt(d), np.float32))], hint=hint)


def build_cosyvoice_flow_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                       weight_format: str = "float32", group_size: int = 32) -> Graph:
    cfg = CosyVoiceFlowConfig(config)
    d, L = cfg.d, cfg.lookahead
    if "encoder.embed.out.0.weight" not in weights or "input_embedding.weight" not in weights:
        raise ConverterError("not a CosyVoice 2 flow checkpoint: no input_embedding / encoder.embed.out.0 tensors")
    b = GraphBuilder("cosyvoice_flow_encoder", weights, weight_format, group_size)
    x, spks = _encoder_inputs(b, cfg)   # [1, N, input_size]
    x = _linear_embed(b, x, "encoder.embed", cfg.input_size, d, "embed")
    p = "encoder.pre_lookahead_layer."
    h = b.node("LeakyRelu", [_frames_conv(b, x, p + "conv1", d, d, L + 1, (0, L), "ahead1")], {"alpha": 0.01},
               hint="ahead1_act")
    x = b.node("Add", [_frames_conv(b, h, p + "conv2", d, d, 3, (2, 0), "ahead2"), x], hint="ahead")
    pe, index = _relative_positions(b, x, d, cfg.heads, "rel")
    for i in range(cfg.blocks):
        x = _conformer_layer(b, x, pe, index, cfg, f"encoder.encoders.{i}.", f"enc{i}")

    r = cfg.ratio   # each frame repeated r times, then a kernel 2r + 1 convolution over 2r zeros on the left
    x = b.node("Expand", [b.node("Unsqueeze", [x, _i64(b, "rep_axis", [2])], hint="rep_4d"),
                          _i64(b, "rep_shape", [1, 1, r, 1])], hint="repeated")
    x = b.node("Reshape", [x, _i64(b, "rep_rows", [1, -1, d])], hint="repeated_rows")
    x = _frames_conv(b, x, "encoder.up_layer.conv", d, d, 2 * r + 1, (2 * r, 0), "up_conv")
    x = _linear_embed(b, x, "encoder.up_embed", d, d, "up_embed")
    pe, index = _relative_positions(b, x, d, cfg.heads, "up_rel")
    for i in range(cfg.up_blocks):
        x = _conformer_layer(b, x, pe, index, cfg, f"encoder.up_encoders.{i}.", f"up{i}")
    x = _layer_norm(b, x, "encoder.after_norm", d, "after_norm")
    mu = _transpose(b, b.linear(x, "encoder_proj", "encoder_proj", d, cfg.mel), "mu_cols")
    return _finish(b, {"mu": mu, "spks": spks}, producer=__name__, architecture="CosyVoice 2 flow "
                   "(UpsampleConformerEncoder + encoder_proj, x-vector affine)", head="encoder",
                   weight_format=weight_format)


# ---------------------------------------------------------------------------------------------------------------
# estimator
class _EstimatorBuilder:
    def __init__(self, b: GraphBuilder, cfg: CosyVoiceFlowConfig, mask_rows: str, attn_bias: str, temb_act: str):
        self.b, self.cfg = b, cfg
        self.mask, self.bias, self.temb = mask_rows, attn_bias, temb_act
        self.time_dim = 4 * cfg.channels[0]

    def causal_block(self, x: str, prefix: str, c_in: int, c_out: int, hint: str) -> str:
        """(x masked) -> causal kernel-3 convolution, LayerNorm over channels, Mish, masked."""
        b = self.b
        h = _frames_conv(b, b.node("Mul", [x, self.mask], hint=f"{hint}_masked"), prefix + ".block.0", c_in, c_out, 3,
                         (2, 0), f"{hint}_conv")
        h = b.node("Mish", [_layer_norm(b, h, prefix + ".block.2", c_out, f"{hint}_ln")], hint=f"{hint}_mish")
        return b.node("Mul", [h, self.mask], hint=hint)

    def resnet(self, x: str, prefix: str, c_in: int, c_out: int, hint: str) -> str:
        b = self.b
        h = self.causal_block(x, prefix + ".block1", c_in, c_out, f"{hint}_b1")
        t = b.linear(self.temb, prefix + ".mlp.1", f"{hint}_t", self.time_dim, c_out)
        h = b.node("Add", [h, b.node("Unsqueeze", [t, _i64(b, f"{hint}_t_axis", [1])], hint=f"{hint}_t_row")],
                   hint=f"{hint}_ht")
        h = self.causal_block(h, prefix + ".block2", c_out, c_out, f"{hint}_b2")
        masked = b.node("Mul", [x, self.mask], hint=f"{hint}_x_masked")
        return _pointwise(b, masked, prefix + ".res_conv", c_in, c_out, f"{hint}_res", residual=h)

    def transformer(self, x: str, prefix: str, hint: str) -> str:
        b, c = self.b, self.cfg.channels[0]
        inner = self.cfg.est_heads * self.cfg.head_dim
        h = _layer_norm(b, x, prefix + ".norm1", c, f"{hint}_ln1")
        q, k, v = (b.linear(h, f"{prefix}.attn1.to_{n}", f"{hint}_{n}", c, inner) for n in "qkv")
        a = b.mha([q, k, v, self.bias], self.cfg.est_heads, f"{hint}_attn")
        x = b.linear(a, prefix + ".attn1.to_out.0", f"{hint}_attn_out", inner, c, residual=x)
        h = _layer_norm(b, x, prefix + ".norm3", c, f"{hint}_ln3")
        h = b.linear(h, prefix + ".ff.net.0.proj", f"{hint}_ff_in", c, 4 * c, activation="gelu")
        return b.linear(h, prefix + ".ff.net.2", f"{hint}_ff_out", 4 * c, c, residual=x)

    def stage(self, x: str, prefix: str, c_in: int, hint: str) -> str:
        """A ResNet block (c_in -> channels), then its transformer blocks (prefix.0, prefix.1.i)."""
        c = self.cfg.channels[0]
        x = self.resnet(x, prefix + ".0", c_in, c, f"{hint}_res")
        for j in range(self.cfg.n_blocks):
            x = self.transformer(x, f"{prefix}.1.{j}", f"{hint}_tf{j}")
        return x


def build_cosyvoice_flow_estimator_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                         weight_format: str = "float32", group_size: int = 32) -> Graph:
    cfg = CosyVoiceFlowConfig(config)
    e = "decoder.estimator."
    if e + "time_mlp.linear_1.weight" not in weights:
        raise ConverterError("not a CosyVoice 2 flow checkpoint: no decoder.estimator.time_mlp tensors")
    c, mel = cfg.channels[0], cfg.mel
    b = GraphBuilder("cosyvoice_flow_estimator", weights, weight_format, group_size)
    x, mask, mu, t, spks, cond = _estimator_inputs(b, mel)

    # time: the sinusoids, then Linear, SiLU, Linear; Mish(temb) feeds every block
    temb = b.linear(_time_sinusoids(b, t, cfg.est_in), e + "time_mlp.linear_1", "time_1", cfg.est_in, 4 * c,
                    activation="silu")
    temb = b.linear(temb, e + "time_mlp.linear_2", "time_2", 4 * c, 4 * c)
    temb_act = b.node("Mish", [temb], hint="temb_mish")

    h = b.node("Concat", [x, mu, _spks_frames(b, spks, mu), cond], {"axis": 1}, hint="packed")  # [B, 4 mel, T]
    h = _transpose(b, h, "packed_rows")
    mask_rows, bias = _key_mask(b, mask)                                          # [B, T, 1], [B, 1, 1, T]
    eb = _EstimatorBuilder(b, cfg, mask_rows, bias, temb_act)

    skip = eb.stage(h, e + "down_blocks.0", cfg.est_in, "down")
    h = _frames_conv(b, b.node("Mul", [skip, mask_rows], hint="down_masked"), e + "down_blocks.0.2", c, c, 3, (2, 0),
                     "down_conv")
    for i in range(cfg.mid_blocks):
        h = eb.stage(h, f"{e}mid_blocks.{i}", c, f"mid{i}")
    h = eb.stage(b.node("Concat", [h, skip], {"axis": 2}, hint="up_in"), e + "up_blocks.0", 2 * c, "up")
    h = _frames_conv(b, b.node("Mul", [h, mask_rows], hint="up_masked"), e + "up_blocks.0.2", c, c, 3, (2, 0),
                     "up_conv")
    h = eb.causal_block(h, e + "final_block", c, c, "final")
    h = _pointwise(b, b.node("Mul", [h, mask_rows], hint="final_masked"), e + "final_proj", c, mel, "final_proj")
    h = b.node("Mul", [h, mask_rows], hint="dphi_rows")
    return _finish(b, {"dphi": _transpose(b, h, "dphi_cols")}, producer=__name__, architecture="CosyVoice 2 flow "
                   "CausalConditionalDecoder (one velocity evaluation)", head="estimator", weight_format=weight_format)
