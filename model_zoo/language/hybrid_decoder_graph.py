"""The engine's step graph for Qwen3.5 / Qwen3.6 (transformers model_type "qwen3_5", text path Qwen3_5ForCausalLM): a
hybrid decoder whose layers are either gated DeltaNet linear attention or full softmax attention (layer_types; by
default every full_attention_interval-th layer is full attention), built straight from a checkpoint's tensors.

Linear-attention layer: in_proj_qkv -> CausalConv1D (depthwise, kernel 4, SiLU; its window carried across steps in
conv_state.<i>) -> GatedDeltaRule (L2-normalised q/k, log decay g = -exp(A_log) softplus(a + dt_bias), beta =
sigmoid(b); the [value heads, Dk, Dv] state carried in recurrent_state.<i>) -> RMSNorm per value head * SiLU(z) ->
out_proj. Full-attention layer: q_proj writes [query | gate] per head (split here into two products by regrouping the
weight's rows), q/k RMSNorm per head, rotary on the first partial_rotary_factor of each head (M-RoPE is plain RoPE
for text positions: its three sections see the same position), paged attention with the KV cache, output times
sigmoid(gate). Every RMSNorm outside the gated one scales by (1 + w).

Besides the decoder step graph's inputs (model_zoo.language.decoder_graph) it takes state_slots [sequences]: each
sequence's slot in the state tensors (-1: start from zeros, keep nothing), which the engine owns like the KV cache."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from .decoder_graph import DecoderConfig, _Builder, checked_step_options
from ..graph_builder import F32, I64


def text_config(config: Mapping) -> dict:
    """The text model's config: Qwen3_5ForConditionalGeneration's config.json nests it under text_config."""
    text = dict(config.get("text_config") or config)
    for key in ("tie_word_embeddings",):   # kept at the top level by the multimodal config
        if key not in text and key in config:
            text[key] = config[key]
    return text


class HybridConfig(DecoderConfig):
    def __init__(self, config: Mapping):
        text = text_config(config)
        rope = dict(text.get("rope_parameters") or {})
        super().__init__({**text, "rope_parameters": {k: v for k, v in rope.items()
                                                     if k not in ("mrope_section", "mrope_interleaved")}})
        get = text.get
        partial = float(rope.get("partial_rotary_factor", get("partial_rotary_factor", 1.0)))
        self.rotary_dim = int(self.head_dim * partial)
        if self.rotary_dim <= 0 or self.rotary_dim % 2:
            raise ConverterError(f"partial_rotary_factor {partial} of head_dim {self.head_dim} is not an even size")
        types = get("layer_types")
        if types is None:
            interval = int(get("full_attention_interval") or 4)
            types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(self.layers)]
        if len(types) != self.layers or set(types) - {"full_attention", "linear_attention"}:
            raise ConverterError(f"layer_types must list full_attention / linear_attention for {self.layers} layers, "
                                 f"got {types}")
        self.linear = [t == "linear_attention" for t in types]
        self.left_window = [-1] * self.layers   # (DecoderConfig read layer_types as sliding windows)
        self.k_heads = int(get("linear_num_key_heads") or 16)
        self.v_heads = int(get("linear_num_value_heads") or 32)
        self.k_dim = int(get("linear_key_head_dim") or 128)
        self.v_dim = int(get("linear_value_head_dim") or 128)
        self.conv_kernel = int(get("linear_conv_kernel_dim") or 4)
        if self.v_heads % self.k_heads:
            raise ConverterError(f"{self.v_heads} linear value heads do not share {self.k_heads} key heads")
        self.output_gate = bool(get("attn_output_gate", True))
        self.conv_dim = 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim


class _HybridBuilder(_Builder):
    def norm(self, x: str, name: str, hint: str, size: int | None = None) -> str:
        """Qwen3.5's RMSNorm: zero-centred weights, scale (1 + w)."""
        w = self.weight(name, (size or self.cfg.hidden,)) + 1.0
        return self.node("RMSNormalization", [x, self.const(hint, w)], {"axis": -1, "epsilon": self.cfg.eps}, hint=hint)

    def head_norm(self, t: str, name: str, heads: int, dim: int, hint: str) -> str:
        view = self.node("Reshape", [t, self.const(f"{hint}_heads", np.array([-1, heads, dim], np.int64))],
                         hint=f"{hint}_h")
        return self.norm(view, name, hint, dim)


def build_hybrid_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], block_size: int,
                               kv_cache_dtype: str = "float32", weight_format: str = "float32", group_size: int = 32,
                               head: str = "logits") -> Graph:
    """The step graph (options as model_zoo.language.decoder_graph.build_decoder_graph's). `weights` by transformers'
    names, text-only (model.layers.*) or the multimodal checkpoint's (model.language_model.layers.*; its vision tower
    and MTP layer are not read)."""
    cache_dt = checked_step_options(kv_cache_dtype, weight_format, head)
    cfg = HybridConfig(config)
    b = _HybridBuilder(cfg, weights, weight_format, group_size)
    H, D = cfg.hidden, cfg.head_dim
    root = "model.language_model." if "model.language_model.embed_tokens.weight" in weights else "model."

    ids, positions, tables, seq_lens, query_lens, last = b.step_inputs()
    slots = b.input("state_slots", [-1], I64)
    row = D + (4 if kv_cache_dtype == "int8" else 0)
    caches, states = {}, {}
    for i in range(cfg.layers):
        if cfg.linear[i]:
            states[i] = (b.input(f"conv_state.{i}", [-1, cfg.conv_dim, cfg.conv_kernel - 1], F32),
                         b.input(f"recurrent_state.{i}", [-1, cfg.v_heads, cfg.k_dim, cfg.v_dim], F32))
        else:
            caches[i] = (b.input(f"key_cache.{i}", [-1, cfg.kv_heads, block_size, row], cache_dt),
                         b.input(f"value_cache.{i}", [-1, cfg.kv_heads, block_size, row], cache_dt))

    rot = cfg.rotary_dim
    inv_freq = 1.0 / cfg.theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    angles = np.arange(cfg.max_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos = b.const("rope_cos", np.cos(angles).astype(np.float32))
    sin = b.const("rope_sin", np.sin(angles).astype(np.float32))
    pos_row = b.node("Unsqueeze", [positions, b.const("axis0", np.array([0], np.int64))], hint="pos_row", dtype=I64)

    embed_name = root + "embed_tokens.weight"
    table = b.stored("embed", b.source(embed_name, (cfg.vocab, H)), reduce_axis=1)
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="embed")
    for i in range(cfg.layers):
        p = f"{root}layers.{i}."
        h = b.norm(x, p + "input_layernorm.weight", f"ln1_{i}")
        if cfg.linear[i]:
            a = p + "linear_attn."
            hv, dv = cfg.v_heads, cfg.v_dim
            qkv = b.linear(h, a + "in_proj_qkv", f"qkv{i}", H, cfg.conv_dim)
            conv_w = b.weight(a + "conv1d.weight", (cfg.conv_dim, 1, cfg.conv_kernel)).reshape(cfg.conv_dim, -1)
            mixed = b.node("CausalConv1D", [qkv, b.const(f"conv{i}_w", conv_w), states[i][0], slots, query_lens],
                           {"activation": "silu"}, hint=f"conv{i}")
            z = b.linear(h, a + "in_proj_z", f"z{i}", H, hv * dv, activation="silu")
            beta = b.linear(h, a + "in_proj_b", f"beta{i}", H, hv, activation="sigmoid")
            a_w, a_attrs = b.linear_weight(f"a{i}_w", b.source(a + "in_proj_a.weight", (hv, H)))
            dt = b.node("MatMul", [h, a_w, b.const(f"dt_bias{i}", b.weight(a + "dt_bias", (hv,)))], a_attrs,
                        hint=f"a{i}")
            rate = b.const(f"neg_A{i}", -np.exp(b.weight(a + "A_log", (hv,)).astype(np.float64)).astype(np.float32))
            decay = b.node("Mul", [b.node("Softplus", [dt], hint=f"softplus{i}"), rate], hint=f"g{i}")
            core = b.node("GatedDeltaRule", [mixed, decay, beta, states[i][1], slots, query_lens],
                          {"qk_l2norm": True}, hint=f"delta{i}")
            heads_view = b.node("Reshape", [core, b.const(f"core{i}_heads", np.array([-1, dv], np.int64))],
                                hint=f"core{i}_h")
            normed = b.node("RMSNormalization", [heads_view, b.const(f"gnorm{i}", b.weight(a + "norm.weight", (dv,)))],
                            {"axis": -1, "epsilon": cfg.eps}, hint=f"gnorm{i}")
            flat = b.node("Reshape", [normed, b.const(f"core{i}_flat", np.array([-1, hv * dv], np.int64))],
                          hint=f"core{i}_flat")
            mixer, out_proj, width = b.node("Mul", [flat, z], hint=f"gated{i}"), a + "out_proj", hv * dv
        else:
            a = p + "self_attn."
            heads, kvh = cfg.heads, cfg.kv_heads
            if cfg.output_gate:   # q_proj rows: per head, D query rows then D gate rows
                base = np.arange(heads)[:, None] * 2 * D + np.arange(D)[None, :]
                q = b.rows_linear(h, a + "q_proj", f"q{i}", H, 2 * heads * D, base.reshape(-1))
                gate = b.rows_linear(h, a + "q_proj", f"gate{i}", H, 2 * heads * D, (base + D).reshape(-1),
                                     activation="sigmoid")
            else:
                q, gate = b.linear(h, a + "q_proj", f"q{i}", H, heads * D), ""
            k = b.linear(h, a + "k_proj", f"k{i}", H, kvh * D)
            v = b.linear(h, a + "v_proj", f"v{i}", H, kvh * D)
            rotated = []
            for name, t, n in (("q", q, heads), ("k", k, kvh)):
                t = b.head_norm(t, a + f"{name}_norm.weight", n, D, f"{name}{i}_norm")
                t3 = b.node("Reshape", [t, b.const(f"{name}{i}_rows", np.array([1, -1, n * D], np.int64))],
                            hint=f"{name}{i}_rows")
                r = b.node("RotaryEmbedding", [t3, cos, sin, pos_row],
                           {"interleaved": False, "num_heads": n, "rotary_embedding_dim": rot}, hint=f"{name}{i}_rope")
                rotated.append(b.node("Reshape", [r, b.const(f"{name}{i}_flat", np.array([-1, n * D], np.int64))],
                                      hint=f"{name}{i}_flat"))
            attn = b.node("Attention", [rotated[0], rotated[1], v, "", caches[i][0], caches[i][1], tables, seq_lens,
                                        query_lens],
                          {"paged": True, "q_num_heads": heads, "kv_num_heads": kvh, "scale": 0.0, "is_causal": True,
                           "zero_masked_rows": True, "left_window_size": -1, "softcap": 0.0}, hint=f"attn{i}")
            mixer = b.node("Mul", [attn, gate], hint=f"gated{i}") if gate else attn
            out_proj, width = a + "o_proj", heads * D
        if i == cfg.layers - 1:   # only the rows whose logits are read go on (as in model_zoo.language.decoder_graph)
            mixer = b.node("Gather", [mixer, last], {"axis": 0}, hint="last_mixer")
            x = b.node("Gather", [x, last], {"axis": 0}, hint="last_rows")
        x = b.linear(mixer, out_proj, f"o{i}", width, H, residual=x)
        h = b.norm(x, p + "post_attention_layernorm.weight", f"ln2_{i}")
        x = b.mlp(h, p + "mlp.", str(i), cfg.intermediate, residual=x)
    x = b.norm(x, root + "norm.weight", "norm")
    return b.finish(x, head, table, embed_name, {
        "producer": "model_zoo.language.hybrid_decoder_graph", "kv_block_size": str(block_size),
        "num_layers": str(cfg.layers), "weight_format": weight_format,
        "architecture": "hybrid decoder step (gated DeltaNet + paged attention)"})


def build_from_checkpoint(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                          block_size: int = 16, kv_cache_dtype: str = "float32", group_size: int = 32,
                          head: str = "logits") -> Graph:
    """The registry's graph builder for model_type qwen3_5 / qwen3_5_text (converter_lite --fmk=HF)."""
    return build_hybrid_decoder_graph(config, weights, block_size, kv_cache_dtype, weight_format, group_size, head)
