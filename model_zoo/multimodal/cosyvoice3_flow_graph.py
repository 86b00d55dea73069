"""CosyVoice 3's flow-matching acoustic model (CausalMaskedDiffWithDiT with the DiT estimator) built from its
flow.pt tensors (names as model_zoo.reference.cosyvoice3_flow has them) in the converter's IR, for non-streaming
inference. The two graphs have CosyVoice 2's interfaces (model_zoo.multimodal.cosyvoice_flow_graph), so
lite.cosyvoice_flow.CosyVoiceFlow runs the Euler loop around them as it does for CosyVoice 2.

- "encoder": inputs tokens int64 [1, N] (the prompt's speech tokens, then the target's) and embedding float32
  [1, spk_embed_dim] (the x-vector); outputs mu float32 [1, 80, r N] (the embedded tokens through the look-ahead
  layer, each frame repeated r = token_mel_ratio times, channels first) and spks float32 [1, 80] (the x-vector
  L2-normalised, then spk_embed_affine_layer).
- "estimator": one evaluation of the DiT, inputs x, mu, cond [B, 80, T], mask [B, 1, T], t [B], spks [B, 80] (B = 2
  for classifier-free guidance, T any) -> dphi [B, 80, T]. Every frame attends to the frames `mask` marks valid;
  the attention output is zeroed on the others; the output itself is not masked (as the original). Rotary tables
  are computed in the graph from the length and the checkpoint's rotary_embed.inv_freq, and applied (interleaved
  pairs) to the first dim_head channels of the projected queries and keys: the first head only, as x-transformers
  does when handed the heads side by side.

Linear layers, the token table and the convolutions are stored in `weight_format` (int8: a scale per output row /
channel; int4: blocks along the reduction axis); norms, biases and the adaLN projections' biases stay float32."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder
# CosyVoice 2's graph parts: the same flow-level sizes, interfaces, x-vector affine, time sinusoids and key mask
from .cosyvoice_flow_graph import (FlowSizes, _conv, _encoder_inputs, _estimator_inputs, _finish, _i64, _key_mask,
                                   _spks_frames, _sub, _time_sinusoids, _transpose)

TIME_SINUSOIDS = 256              # the DiT's TimestepEmbedding frequency width
POS_KERNEL, POS_GROUPS = 31, 16   # CausalConvPositionEmbedding's defaults, which the DiT keeps


class CosyVoice3FlowConfig(FlowSizes):
    """The sizes a CosyVoice 3 flow config (the yaml's `flow:` kwargs as a dict, yaml tags stripped) implies; what is
    not built is refused by name (NotImplementedError), sizes that do not fit together by ConverterError."""

    def __init__(self, config: Mapping):
        super().__init__(config, input_size=80)
        look, dec = _sub(config, "pre_lookahead_layer"), _sub(config, "decoder")
        est, cfm = _sub(dec, "estimator"), _sub(dec, "cfm_params")
        self.lookahead = int(look.get("pre_lookahead_len", config.get("pre_lookahead_len", 3)))
        self.look_channels = int(look.get("channels", 1024))
        self.dim = int(est.get("dim", 1024))
        self.depth = int(est.get("depth", 22))
        self.heads = int(est.get("heads", 16))
        self.head_dim = int(est.get("dim_head", 64))
        self.ff_inner = int(self.dim * float(est.get("ff_mult", 2)))
        self.mel_dim = int(est.get("mel_dim", 80))
        self.mu_dim = int(est.get("mu_dim") or self.mel_dim)
        self.est_spk = int(est.get("spk_dim") or 0)
        if est.get("long_skip_connection"):
            raise NotImplementedError("DiT long_skip_connection=True (CosyVoice 3 builds it without)")
        for key, (where, want) in {"output_type": (config, "mel"), "solver": (cfm, "euler")}.items():
            if where.get(key, want) != want:
                raise NotImplementedError(f"CosyVoice 3 flow {key}={where[key]!r} (built: {want!r})")
        if self.t_scheduler not in ("cosine", "linear"):
            raise NotImplementedError(f"CosyVoice 3 flow t_scheduler {self.t_scheduler!r} (built: cosine, linear)")
        if int(look.get("in_channels", self.input_size)) != self.input_size:
            raise ConverterError(f"pre_lookahead_layer in_channels {look['in_channels']} differs from the flow's "
                                 f"input_size {self.input_size}")
        # the Euler loop (lite.cosyvoice_flow) keeps x, mu, cond and spks all output_size wide
        for what, size in {"input_size": self.input_size, "estimator mel_dim": self.mel_dim,
                           "estimator mu_dim": self.mu_dim, "estimator spk_dim": self.est_spk}.items():
            if size != self.mel:
                raise ConverterError(f"CosyVoice 3 flow {what} {size} differs from output_size {self.mel} (x, mu, "
                                     "cond and spks are all as wide as the mel bins)")
        if self.dim % POS_GROUPS or self.head_dim % 2:
            raise ConverterError(f"DiT dim {self.dim} must split into {POS_GROUPS} convolution groups and dim_head "
                                 f"{self.head_dim} be even")
        if min(self.ratio, self.lookahead + 1, self.depth + 1, self.heads, self.head_dim, self.ff_inner,
               self.look_channels) < 1:
            raise ConverterError("token_mel_ratio, heads and sizes must be positive and the counts not negative")

    @property
    def proj_in(self) -> int:
        """The input embedding's width: x, cond, mu and spks side by side."""
        return 2 * self.mel_dim + self.mu_dim + self.est_spk


# ---------------------------------------------------------------------------------------------------------------
def build_cosyvoice3_flow_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                        weight_format: str = "float32", group_size: int = 32) -> Graph:
    cfg = CosyVoice3FlowConfig(config)
    C, L = cfg.input_size, cfg.lookahead
    if "pre_lookahead_layer.conv1.weight" not in weights or "input_embedding.weight" not in weights:
        raise ConverterError("not a CosyVoice 3 flow checkpoint: no input_embedding / pre_lookahead_layer tensors")
    b = GraphBuilder("cosyvoice3_flow_encoder", weights, weight_format, group_size)
    x, spks = _encoder_inputs(b, cfg)
    x = _transpose(b, x, "token_cols")   # [1, C, N]
    p = "pre_lookahead_layer."
    h = b.node("LeakyRelu", [_conv(b, x, p + "conv1", C, cfg.look_channels, L + 1, (0, L), "ahead1")],
               {"alpha": 0.01}, hint="ahead1_act")
    x = b.node("Add", [_conv(b, h, p + "conv2", cfg.look_channels, C, 3, (2, 0), "ahead2"), x], hint="ahead")
    # each token's column repeated r times: [1, C, N] -> [1, C, N, r] -> [1, C, r N]
    x = b.node("Expand", [b.node("Unsqueeze", [x, _i64(b, "rep_axis", [3])], hint="rep_4d"),
                          _i64(b, "rep_shape", [1, 1, 1, cfg.ratio])], hint="repeated")
    mu = b.node("Reshape", [x, _i64(b, "rep_cols", [1, C, -1])], hint="mu_cols")
    return _finish(b, {"mu": mu, "spks": spks}, producer=__name__, architecture="CosyVoice 3 flow "
                   "(token embedding, PreLookaheadLayer, repeat; x-vector affine)", head="encoder",
                   weight_format=weight_format)


# ---------------------------------------------------------------------------------------------------------------
class _DiTBuilder:
    def __init__(self, b: GraphBuilder, cfg: CosyVoice3FlowConfig, temb_act: str, mask_rows: str, key_bias: str,
                 cos: str, sin: str):
        self.b, self.cfg = b, cfg
        self.temb, self.mask, self.bias, self.cos, self.sin = temb_act, mask_rows, key_bias, cos, sin
        self.ln_scale = b.const("ln_ones", np.ones(cfg.dim, F32))
        self.ln_bias = b.const("ln_zeros", np.zeros(cfg.dim, F32))
        self.one = b.const("one", np.ones(1, F32))

    def modulations(self, prefix: str, parts: int, hint: str) -> list[str]:
        """The `parts` vectors [B, 1, dim] of an adaLN projection Linear(SiLU(time)) (rows i dim .. (i + 1) dim)."""
        b, d = self.b, self.cfg.dim
        axis = _i64(b, f"{hint}_axis", [1])
        return [b.node("Unsqueeze", [b.rows_linear(self.temb, prefix, f"{hint}{i}", d, parts * d,
                                                   np.arange(i * d, (i + 1) * d)), axis], hint=f"{hint}{i}_row")
                for i in range(parts)]

    def modulated_norm(self, x: str, shift: str, scale: str, hint: str) -> str:
        """LayerNorm without affine (eps 1e-6), x (1 + scale) + shift."""
        b = self.b
        n = b.node("LayerNormalization", [x, self.ln_scale, self.ln_bias], {"axis": -1, "epsilon": 1e-6},
                   hint=f"{hint}_ln")
        scaled = b.node("Mul", [n, b.node("Add", [scale, self.one], hint=f"{hint}_1s")], hint=f"{hint}_sc")
        return b.node("Add", [scaled, shift], hint=hint)

    def gated_residual(self, x: str, y: str, gate: str, hint: str) -> str:
        b = self.b
        return b.node("Add", [x, b.node("Mul", [y, gate], hint=f"{hint}_gated")], hint=hint)

    def block(self, x: str, prefix: str, hint: str) -> str:
        b, cfg = self.b, self.cfg
        d, inner = cfg.dim, cfg.heads * cfg.head_dim
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.modulations(prefix + "attn_norm.linear", 6,
                                                                              f"{hint}_mod")
        h = self.modulated_norm(x, shift_a, scale_a, f"{hint}_attn_in")
        q, k, v = (b.linear(h, f"{prefix}attn.to_{n}", f"{hint}_{n}", d, inner) for n in "qkv")
        rope = {"interleaved": True, "num_heads": 1, "rotary_embedding_dim": cfg.head_dim}
        q, k = (b.node("RotaryEmbedding", [y, self.cos, self.sin], rope, hint=f"{hint}_{n}_rot")
                for y, n in ((q, "q"), (k, "k")))
        a = b.mha([q, k, v, self.bias], cfg.heads, f"{hint}_attn")
        a = b.linear(a, prefix + "attn.to_out.0", f"{hint}_attn_out", inner, d)
        a = b.node("Mul", [a, self.mask], hint=f"{hint}_attn_masked")        # zero on padded frames
        x = self.gated_residual(x, a, gate_a, f"{hint}_attn_res")
        h = self.modulated_norm(x, shift_f, scale_f, f"{hint}_ff_in")
        h = b.linear(h, prefix + "ff.ff.0.0", f"{hint}_ff1", d, cfg.ff_inner, activation="gelu_tanh")
        h = b.linear(h, prefix + "ff.ff.2", f"{hint}_ff2", cfg.ff_inner, d)
        return self.gated_residual(x, h, gate_f, f"{hint}_ff_res")


def _rotary_tables(b: GraphBuilder, x: str, inv_freq: np.ndarray) -> tuple[str, str]:
    """cos / sin [1, T, dim_head / 2] of the angles p x inv_freq, p = 0 .. T - 1, T the length (axis 2) of x."""
    length = b.node("Gather", [b.node("Shape", [x], hint="x_shape", dtype=I64), _i64(b, "len_axis", 2)],
                    {"axis": 0}, hint="frames", dtype=I64)
    steps = b.node("Range", [_i64(b, "rope_zero", 0), length, _i64(b, "rope_step", 1)], hint="rope_pos_i",
                   dtype=I64)
    pos = b.node("Unsqueeze", [b.node("Cast", [steps], {"to": F32}, hint="rope_pos"), _i64(b, "rope_col", [1])],
                 hint="rope_pos_col")
    angle = b.node("Mul", [pos, b.const("rope_inv_freq", inv_freq.reshape(1, -1))], hint="rope_angle")
    batch_axis = _i64(b, "rope_batch", [0])
    return tuple(b.node("Unsqueeze", [b.node(op, [angle], hint=f"rope_{op.lower()}"), batch_axis],
                        hint=f"rope_{op.lower()}_3d") for op in ("Cos", "Sin"))


def build_cosyvoice3_flow_estimator_graph(config: Mapping, weights: Mapping[str, np.ndarray],
                                          weight_format: str = "float32", group_size: int = 32) -> Graph:
    cfg = CosyVoice3FlowConfig(config)
    e = "decoder.estimator."
    if e + "time_embed.time_mlp.0.weight" not in weights or e + "input_embed.proj.weight" not in weights:
        raise ConverterError("not a CosyVoice 3 flow checkpoint: no decoder.estimator.time_embed / input_embed "
                             "tensors (CosyVoice 2's U-Net estimator is model_zoo.multimodal.cosyvoice_flow_graph's)")
    d = cfg.dim
    b = GraphBuilder("cosyvoice3_flow_estimator", weights, weight_format, group_size)
    x, mask, mu, t, spks, cond = _estimator_inputs(b, cfg.mel)

    # time: sinusoids (as CosyVoice 2's, 256 wide), Linear, SiLU, Linear; SiLU(temb) feeds every adaLN projection
    temb = b.linear(_time_sinusoids(b, t, TIME_SINUSOIDS), e + "time_embed.time_mlp.0", "time_1", TIME_SINUSOIDS, d,
                    activation="silu")
    temb = b.linear(temb, e + "time_embed.time_mlp.2", "time_2", d, d)
    temb_act = b.node("Mul", [temb, b.node("Sigmoid", [temb], hint="temb_sigmoid")], hint="temb_silu")

    # input embedding: [x, cond, mu, spks] per frame, Linear, plus the causal convolutional position embedding
    packed = b.node("Concat", [x, cond, mu, _spks_frames(b, spks, mu)], {"axis": 1}, hint="packed")  # [B, 4 mel, T]
    h = b.linear(_transpose(b, packed, "packed_rows"), e + "input_embed.proj", "proj_in", cfg.proj_in, d)
    pe = e + "input_embed.conv_pos_embed."
    c = _transpose(b, h, "h_cols")
    for i in (1, 2):
        c = b.node("Mish", [_conv(b, c, f"{pe}conv{i}.0", d, d, POS_KERNEL, (POS_KERNEL - 1, 0), f"pos{i}",
                                  group=POS_GROUPS)], hint=f"pos{i}_mish")
    h = b.node("Add", [_transpose(b, c, "pos_rows"), h], hint="embedded")

    inv_name = e + "rotary_embed.inv_freq"
    inv_freq = (b.weight(inv_name, (cfg.head_dim // 2,)) if inv_name in weights else
                (1.0 / 10000 ** (np.arange(0, cfg.head_dim, 2, dtype=np.float32) / cfg.head_dim)).astype(F32))
    cos, sin = _rotary_tables(b, x, inv_freq)
    mask_rows, bias = _key_mask(b, mask)                                                    # [B, T, 1], [B, 1, 1, T]
    db = _DiTBuilder(b, cfg, temb_act, mask_rows, bias, cos, sin)
    for i in range(cfg.depth):
        h = db.block(h, f"{e}transformer_blocks.{i}.", f"blk{i}")

    scale, shift = db.modulations(e + "norm_out.linear", 2, "final_mod")
    h = db.modulated_norm(h, shift, scale, "final")
    h = b.linear(h, e + "proj_out", "proj_out", d, cfg.mel_dim)
    return _finish(b, {"dphi": _transpose(b, h, "dphi_cols")}, producer=__name__, architecture="CosyVoice 3 flow "
                   "DiT (one velocity evaluation)", head="estimator", weight_format=weight_format)
