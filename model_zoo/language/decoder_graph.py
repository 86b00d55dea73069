"""The engine's step graph for a Llama-style decoder (Qwen2, Qwen3's q/k norms, Llama, Mistral's sliding window,
Gemma 2's soft-capping, extra norms and alternating windows: RMSNorm, rotary q/k, grouped-query attention, gated
MLP), built in the converter's IR straight from a checkpoint's tensors, so nothing is exported or traced.

One graph serves prefill chunks and decode steps of many sequences at once: its inputs are the step's tokens of
every sequence (sequence after sequence), their positions, the block tables and lengths of the paged KV cache, and
one key and one value cache per layer, which its paged Attention nodes write in place; its output is the logits of
each sequence's last token of the step."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.deferred import hstack
from converter.ir import ConverterError, Graph

from ..graph_builder import F32, I64, GraphBuilder



class DecoderConfig:
    """The fields of a transformers config.json the graph needs (Qwen2Config, LlamaConfig)."""

    def __init__(self, config: Mapping):
        get = config.get
        self.hidden = int(config["hidden_size"])
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.kv_heads = int(get("num_key_value_heads") or self.heads)
        self.head_dim = int(get("head_dim") or self.hidden // self.heads)
        self.intermediate = int(config["intermediate_size"])
        self.vocab = int(config["vocab_size"])
        self.eps = float(get("rms_norm_eps", 1e-6))
        self.max_positions = int(get("max_position_embeddings", 4096))
        self.tied = bool(get("tie_word_embeddings", False))
        rope = get("rope_parameters") or get("rope_scaling") or {}
        self.theta = float(get("rope_theta") or rope.get("rope_theta") or 10000.0)
        # Dynamic NTK scaling (InternVL3's Qwen2) changes the frequencies only past max_position_embeddings; the graph's
        # tables end there, so within them it is the plain rotation and a longer sequence fails its table lookup.
        if rope and rope.get("rope_type", rope.get("type", "default")) not in ("default", "dynamic", None):
            raise NotImplementedError(f"rope scaling '{rope.get('rope_type', rope.get('type'))}' is not supported yet")
        # Qwen2-VL / Qwen2.5-VL's multimodal RoPE: the rotary pairs split in sections rotated by the temporal, height
        # and width components of a token's 3-D position (all equal for text tokens).
        section = rope.get("mrope_section") if rope else None
        self.mrope_section = [int(s) for s in section] if section else None
        if self.mrope_section and (len(self.mrope_section) != 3 or sum(self.mrope_section) != self.head_dim // 2):
            raise ValueError(f"mrope_section {self.mrope_section} must be three parts summing to head_dim / 2 "
                             f"({self.head_dim // 2})")
        # Qwen3-VL interleaves them: pair j turns by height if j % 3 == 1 (j < 3 x its section), by width if
        # j % 3 == 2 (likewise), else by time.
        self.mrope_interleaved = bool(rope.get("mrope_interleaved")) if rope else False
        self.act = get("hidden_activation") or get("hidden_act") or "silu"
        if self.act not in ("silu", "gelu_pytorch_tanh", "gelu"):
            raise NotImplementedError(f"hidden activation '{self.act}' is not supported (SiLU or GELU gating)")
        # Gemma 2: norms scale by (1 + w), embeddings by sqrt(hidden), a norm after attention and around the MLP,
        # attention scores soft-capped and scaled by query_pre_attn_scalar, the final logits soft-capped.
        self.gemma2 = get("model_type") == "gemma2"
        self.scale = float(get("query_pre_attn_scalar")) ** -0.5 if get("query_pre_attn_scalar") else 0.0
        self.attn_softcap = float(get("attn_logit_softcapping") or 0.0)
        self.final_softcap = float(get("final_logit_softcapping") or 0.0)
        # Sliding-window layers (Mistral: all of them; Qwen2 with use_sliding_window and transformers' layer_types):
        # a query attends the keys less than sliding_window positions back.
        window = get("sliding_window")
        types = get("layer_types")
        if types is not None and len(types) != self.layers:
            raise ValueError(f"layer_types lists {len(types)} layers, the model has {self.layers}")
        if types is not None:
            sliding = [t == "sliding_attention" for t in types]
        else:
            sliding = [bool(window) and get("use_sliding_window", True) is not False] * self.layers
        if any(sliding) and not window:
            raise ValueError("sliding-attention layers need sliding_window")
        self.left_window = [int(window) - 1 if s else -1 for s in sliding]
        # Mixture of experts (Qwen2-MoE with its gated shared expert, Qwen3-MoE): layers whose MLP routes each token
        # to top_k of num_experts experts; decoder_sparse_step / mlp_only_layers keep some layers dense.
        # (transformers 5 writes num_local_experts for Qwen3-MoE)
        experts = get("num_experts") or get("num_local_experts") or 0
        self.experts = int(experts) if get("model_type") in ("qwen2_moe", "qwen3_moe") else 0
        self.top_k = int(get("num_experts_per_tok") or 0)
        self.norm_top_k = bool(get("norm_topk_prob", False))
        self.moe_intermediate = int(get("moe_intermediate_size") or 0)
        self.shared_intermediate = int(get("shared_expert_intermediate_size") or 0)
        step, dense = int(get("decoder_sparse_step") or 1), set(get("mlp_only_layers") or [])
        self.sparse = [self.experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(self.layers)]

    def mrope_components(self) -> np.ndarray:
        """The position component (0 time, 1 height, 2 width) that turns each rotary pair."""
        half = self.head_dim // 2
        if not self.mrope_interleaved:
            return np.repeat(np.arange(3), self.mrope_section)
        j, comp = np.arange(half), np.zeros(half, np.int64)
        for c in (1, 2):
            comp[(j % 3 == c) & (j < 3 * self.mrope_section[c])] = c
        return comp


class _Builder(GraphBuilder):
    """Emits the step graph in its final, fused form (bias, activation, residual and SwiGLU gate inside the MatMuls),
    so no pass needs to rewrite it. Matrices stay in the checkpoint until the writer stores them (DeferredArray, with
    the StoragePlan of `weight_format`); only norms and biases are read here."""

    def __init__(self, cfg: DecoderConfig, weights: Mapping[str, np.ndarray], weight_format: str, group_size: int):
        super().__init__("decoder_step", weights, weight_format, group_size)
        self.cfg = cfg

    def act(self) -> str:
        return {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}[self.cfg.act]

    def norm(self, x: str, name: str, hint: str, size: int | None = None) -> str:
        w = self.weight(name, (size or self.cfg.hidden,)) + (1.0 if self.cfg.gemma2 else 0.0)
        return self.node("RMSNormalization", [x, self.const(hint, w)], {"axis": -1, "epsilon": self.cfg.eps}, hint=hint)

    def mlp(self, h: str, prefix: str, tag: str, inner: int, residual: str = "") -> str:
        """down(act(gate(h)) * up(h)) (+ residual)."""
        H = self.cfg.hidden
        gate = self.linear(h, prefix + "gate_proj", f"gate{tag}", H, inner, activation=self.act())
        up = self.linear(h, prefix + "up_proj", f"up{tag}", H, inner, multiplier=gate)
        return self.linear(up, prefix + "down_proj", f"down{tag}", inner, H, residual=residual)

    def moe(self, h: str, prefix: str, i: int, residual: str) -> str:
        """The routed experts (one MoE node: only the chosen experts run), plus Qwen2-MoE's shared expert scaled by
        sigmoid(shared_expert_gate(h)). Experts as the Hub stores them (experts.E.gate_proj / up_proj / down_proj) or
        fused as transformers 5 holds them in memory (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I])."""
        cfg, H = self.cfg, self.cfg.hidden
        inner = cfg.moe_intermediate
        logits = self.linear(h, prefix + "gate", f"router{i}", H, cfg.experts)
        experts_up, experts_down = [], []
        fused = prefix + "experts.gate_up_proj" in self.w
        for e in range(cfg.experts):
            if fused:
                gate_up = self.source(prefix + "experts.gate_up_proj", (2 * inner, H), e).T
                down = self.source(prefix + "experts.down_proj", (H, inner), e).T
            else:
                p = f"{prefix}experts.{e}."
                gate_up = hstack([self.source(p + "gate_proj.weight", (inner, H)).T,
                                  self.source(p + "up_proj.weight", (inner, H)).T])
                down = self.source(p + "down_proj.weight", (H, inner)).T
            experts_up.append(self.matmul_weight(f"expert{i}_{e}_gate_up", gate_up))
            experts_down.append(self.matmul_weight(f"expert{i}_{e}_down", down))
        if fused and self.w_shape(prefix + "experts.gate_up_proj")[0] != cfg.experts:
            raise ConverterError(f"layer {i}: {self.w_shape(prefix + 'experts.gate_up_proj')[0]} experts' weights "
                                 f"for num_experts = {cfg.experts}")
        y = self.node("MoE", [h, logits] + experts_up + experts_down,
                      {"top_k": cfg.top_k, "normalize_top_k": cfg.norm_top_k, "activation": self.act()}, hint=f"moe{i}")
        if prefix + "shared_expert.gate_proj.weight" in self.w:
            weight = self.linear(h, prefix + "shared_expert_gate", f"shared_gate{i}", H, 1, activation="sigmoid")
            shared = self.mlp(h, prefix + "shared_expert.", f"_shared{i}", cfg.shared_intermediate)
            y = self.node("Add", [y, self.node("Mul", [shared, weight], hint=f"shared_scaled{i}")], hint=f"experts{i}")
        return self.node("Add", [residual, y], hint=f"res_mlp{i}") if residual else y

    def step_inputs(self, mrope: bool = False) -> tuple[str, ...]:
        """The step's token inputs: input_ids, positions (mrope_positions [3, tokens] for multimodal RoPE),
        block_tables, seq_lens, query_lens, last_token_index."""
        return tuple(self.input(name, shape, I64) for name, shape in (
            ("input_ids", [-1]), ("mrope_positions", [3, -1]) if mrope else ("positions", [-1]),
            ("block_tables", [-1, -1]), ("seq_lens", [-1]), ("query_lens", [-1]), ("last_token_index", [-1])))

    def rope_tables(self, positions: str, mrope: bool) -> tuple[str, str, str | None]:
        """(cos, sin, position_ids) for RotaryEmbedding: the (max_position, D/2) tables and the positions; with
        multimodal RoPE the step's own (1, tokens, D/2) rows instead (each section's columns gathered at its position
        component, then side by side) and no position_ids."""
        cfg, D = self.cfg, self.cfg.head_dim
        inv_freq = 1.0 / cfg.theta ** (np.arange(0, D, 2, dtype=np.float64) / D)
        angles = np.arange(cfg.max_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
        tables = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
        if not mrope:
            pos_row = self.node("Unsqueeze", [positions, self.const("axis0", np.array([0], np.int64))], hint="pos_row",
                                dtype=I64)
            return self.const("rope_cos", tables["cos"]), self.const("rope_sin", tables["sin"]), pos_row
        comp = cfg.mrope_components()
        columns = [np.flatnonzero(comp == c) for c in range(3)]
        order = np.concatenate(columns)   # the pairs grouped by component; put back in place after the gathers
        components = [self.node("Gather", [positions, self.const(f"mrope_axis{c}", np.array(c, np.int64))],
                                {"axis": 0}, hint=f"mrope_pos{c}", dtype=I64) for c in range(3)]
        rows = []
        for fn in ("cos", "sin"):
            parts = [self.node("Gather", [self.const(f"rope_{fn}{c}", np.ascontiguousarray(
                tables[fn][:, columns[c]])), components[c]], {"axis": 0}, hint=f"mrope_{fn}{c}")
                for c in range(3) if len(columns[c])]
            joined = self.node("Concat", parts, {"axis": -1}, hint=f"mrope_{fn}")
            if np.any(order != np.arange(len(order))):
                joined = self.node("Gather", [joined, self.const(f"mrope_{fn}_order", np.argsort(order))],
                                   {"axis": 1}, hint=f"mrope_{fn}_inplace")
            rows.append(self.node("Unsqueeze", [joined, self.const(f"mrope_{fn}_axis", np.array([0], np.int64))],
                                  hint=f"mrope_{fn}_rows"))
        return rows[0], rows[1], None

    def finish(self, x: str, head: str, table: str, embed_name: str, metadata: dict) -> Graph:
        """The graph's output from the final norm's rows `x`: "logits" (the language-model head: the embedding table
        itself when tied and float32, else lm_head.weight; Gemma 2's final soft-capping), "hidden" (the rows as
        they are) or "projector" (jina-reranker-v3's projector MLP, no biases)."""
        cfg, H, g = self.cfg, self.cfg.hidden, self.g
        if head == "projector":
            if "projector.0.weight" not in self.w or "projector.2.weight" not in self.w:
                raise ConverterError("head projector: the checkpoint has no projector.0.weight / projector.2.weight")
            inner, out = self.w_shape("projector.0.weight")[0], self.w_shape("projector.2.weight")[0]
            h = self.linear(x, "projector.0", "projector_up", H, inner, activation="relu")
            x = self.rename(self.linear(h, "projector.2", "projector_down", inner, out), "embeddings")
        elif head == "logits":
            name = embed_name if cfg.tied or "lm_head.weight" not in self.w else "lm_head.weight"
            if self.weight_format == "float32" and name == embed_name:   # the embedding table itself, as [V, H]
                x = self.node("MatMul", [x, table], {"b_transposed": True}, hint="logits")
            else:
                w, attrs = self.linear_weight("lm_head", self.source(name, (cfg.vocab, H)))
                x = self.node("MatMul", [x, w], attrs, hint="logits")
            if "lm_head.bias" in self.w:   # a head with a bias (CosyVoice's speech-token decoder)
                x = self.node("Add", [x, self.const("lm_head_bias", self.weight("lm_head.bias", (cfg.vocab,)))],
                              hint="logits_biased")
            if cfg.final_softcap:   # Gemma 2: cap * tanh(logits / cap)
                cap = self.const("final_softcap", np.array(cfg.final_softcap, np.float32))
                x = self.node("Mul", [self.node("Tanh", [self.node("Div", [x, cap], hint="logits_scaled")],
                                                hint="logits_tanh"), cap], hint="logits_capped")
        g.outputs.append(x)
        g.metadata.update({**metadata, "head": head} if head != "logits" else metadata)
        return g


KV_CACHE_DTYPES = ("float32", "bfloat16", "float16", "int8")
WEIGHT_FORMATS = ("float32", "bfloat16", "float16", "int8", "int4")


HEADS = ("logits", "hidden", "projector")


def checked_step_options(kv_cache_dtype: str, weight_format: str, head: str) -> np.dtype:
    """Refuses unknown step-graph options; returns the KV cache's element type."""
    from converter.dtypes import BFLOAT16

    for name, value, allowed in (("kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES),
                                 ("weight_format", weight_format, WEIGHT_FORMATS), ("head", head, HEADS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return {"float32": F32, "bfloat16": BFLOAT16, "float16": np.dtype(np.float16),
            "int8": np.dtype(np.int8)}[kv_cache_dtype]


def build_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], block_size: int,
                        kv_cache_dtype: str = "float32", weight_format: str = "float32", group_size: int = 32,
                        head: str = "logits", deepstack_levels: int = 0, image_rows: bool = False) -> Graph:
    """The step graph; `weights` maps the checkpoint's tensor names (transformers' naming) to arrays, or is a
    converter.frontends.checkpoint.Checkpoint (its matrices then stay in the files until written).
    `kv_cache_dtype`: the element type of the key/value cache inputs (bfloat16 / float16 halve the cache's memory;
    int8 rows hold head_dim codes and the row's float32 scale, a quarter plus 4 bytes; each key and value is rounded
    to it when written, per row and head for int8; attention computes in float32). `weight_format`: how the matrices
    (every MatMul weight, the experts' and the embedding table) are stored: float32, bfloat16 / float16 halves, int8
    codes with a scale per output column, int4 codes with a scale per block of `group_size` rows of each column
    (symmetric, round to nearest); norms and biases stay float32. `head`: "logits" (the language-model head) or
    "hidden" (the final norm's output at each sequence's last token: an embedding model's last-token pooling).
    `deepstack_levels` (Qwen3-VL): the vision tower's intermediate features, input `deepstack_embeds` [levels, image
    rows, hidden], are added to the image tokens' states after each of the first `levels` layers. `image_rows`: a
    vision-language model without multimodal RoPE (LLaVA): inputs embed_rows / embeds replace token embeddings
    (a multimodal-RoPE graph always has them)."""
    cache_dt = checked_step_options(kv_cache_dtype, weight_format, head)
    cfg = DecoderConfig(config)
    if deepstack_levels and (cfg.mrope_section is None or deepstack_levels >= cfg.layers):
        raise ValueError(f"{deepstack_levels} DeepStack levels need a multimodal model of more layers ({cfg.layers})")
    b = _Builder(cfg, weights, weight_format, group_size)
    H, D = cfg.hidden, cfg.head_dim
    mrope = cfg.mrope_section is not None
    ids, positions, tables, seq_lens, query_lens, last = b.step_inputs(mrope)
    row = D + (4 if kv_cache_dtype == "int8" else 0)   # int8: the codes, then the row's scale
    caches = [(b.input(f"key_cache.{i}", [-1, cfg.kv_heads, block_size, row], cache_dt),
               b.input(f"value_cache.{i}", [-1, cfg.kv_heads, block_size, row], cache_dt))
              for i in range(cfg.layers)]
    cos, sin, pos_row = b.rope_tables(positions, mrope)

    embed_name = "model.embed_tokens.weight"
    table = b.stored("embed", b.source(embed_name, (cfg.vocab, H)), reduce_axis=1)   # [V, H]: rows are gathered
    x = b.node("Gather", [table, ids], {"axis": 0}, hint="embed")
    if mrope or image_rows:   # a VLM: the vision tower's rows replace the image tokens' embeddings (none: text only)
        rows = b.input("embed_rows", [-1, 1], I64)
        x = b.node("ScatterND", [x, rows, b.input("embeds", [-1, H], F32)], hint="embed_mm")
        if deepstack_levels:
            deep = b.input("deepstack_embeds", [deepstack_levels, -1, H], F32)
            flat_rows = b.node("Reshape", [rows, b.const("rows_flat", np.array([-1], np.int64))], hint="mm_rows",
                               dtype=I64)
    if cfg.gemma2:   # transformers rounds the normaliser to the weights' dtype (float32 here)
        x = b.node("Mul", [x, b.const("embed_scale", np.array(H ** 0.5, np.float32))], hint="embed_scaled")
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        h = b.norm(x, p + "input_layernorm.weight", f"ln1_{i}")
        q = b.linear(h, p + "self_attn.q_proj", f"q{i}", H, cfg.heads * D)
        k = b.linear(h, p + "self_attn.k_proj", f"k{i}", H, cfg.kv_heads * D)
        v = b.linear(h, p + "self_attn.v_proj", f"v{i}", H, cfg.kv_heads * D)
        rotated = []
        for name, t, heads in (("q", q, cfg.heads), ("k", k, cfg.kv_heads)):
            width = heads * D   # [T, width] -> [1, T, width], RotaryEmbedding's 3-D form
            norm = p + f"self_attn.{name}_norm.weight"
            if norm in weights:   # Qwen3: RMSNorm of each head's q / k before the rotation
                heads_view = b.node("Reshape", [t, b.const(f"{name}{i}_heads", np.array([-1, heads, D], np.int64))],
                                    hint=f"{name}{i}_h")
                t = b.node("RMSNormalization", [heads_view, b.const(f"{name}norm{i}", b.weight(norm, (D,)))],
                           {"axis": -1, "epsilon": cfg.eps}, hint=f"{name}{i}_norm")
            t3 = b.node("Reshape", [t, b.const(f"{name}{i}_rows", np.array([1, -1, width], np.int64))],
                        hint=f"{name}{i}_rows")
            r = b.node("RotaryEmbedding", [t3, cos, sin] + ([pos_row] if pos_row else []),
                       {"interleaved": False, "num_heads": heads, "rotary_embedding_dim": 0}, hint=f"{name}{i}_rope")
            rotated.append(b.node("Reshape", [r, b.const(f"{name}{i}_flat", np.array([-1, width], np.int64))],
                                  hint=f"{name}{i}_flat"))
        attn = b.node("Attention", [rotated[0], rotated[1], v, "", caches[i][0], caches[i][1], tables, seq_lens,
                                    query_lens],
                      {"paged": True, "q_num_heads": cfg.heads, "kv_num_heads": cfg.kv_heads, "scale": cfg.scale,
                       "is_causal": True, "zero_masked_rows": True, "left_window_size": cfg.left_window[i],
                       "softcap": cfg.attn_softcap}, hint=f"attn{i}")
        if i == cfg.layers - 1:
            # Past the last attention only the rows whose logits are read matter (every other row's keys and values
            # are in the cache by now): the last layer's output projection and MLP run on those rows alone, as
            # llama.cpp does; a 512-token prompt computes 1 row there instead of 512 (4% of its products).
            attn = b.node("Gather", [attn, last], {"axis": 0}, hint="last_attn")
            x = b.node("Gather", [x, last], {"axis": 0}, hint="last_rows")
        if cfg.gemma2:   # norms after attention and around the MLP: the residual Adds stay separate
            o = b.norm(b.linear(attn, p + "self_attn.o_proj", f"o{i}", cfg.heads * D, H),
                       p + "post_attention_layernorm.weight", f"post_attn_ln{i}")
            x = b.node("Add", [x, o], hint=f"res_attn{i}")
            h = b.norm(x, p + "pre_feedforward_layernorm.weight", f"ln2_{i}")
            mlp = b.norm(b.mlp(h, p + "mlp.", str(i), cfg.intermediate), p + "post_feedforward_layernorm.weight",
                         f"post_ff_ln{i}")
            x = b.node("Add", [x, mlp], hint=f"res_mlp{i}")
            continue
        x = b.linear(attn, p + "self_attn.o_proj", f"o{i}", cfg.heads * D, H, residual=x)
        h = b.norm(x, p + "post_attention_layernorm.weight", f"ln2_{i}")
        x = b.moe(h, p + "mlp.", i, residual=x) if cfg.sparse[i] else \
            b.mlp(h, p + "mlp.", str(i), cfg.intermediate, residual=x)
        if i < deepstack_levels:   # DeepStack: level i of the vision features added at the image tokens
            level = b.node("Gather", [deep, b.const(f"deep_level{i}", np.array(i, np.int64))], {"axis": 0},
                           hint=f"deep{i}")
            added = b.node("Add", [b.node("Gather", [x, flat_rows], {"axis": 0}, hint=f"deep_rows{i}"), level],
                           hint=f"deep_sum{i}")
            x = b.node("ScatterND", [x, rows, added], hint=f"deepstack{i}")
    x = b.norm(x, "model.norm.weight", "norm")   # the last tokens' rows only (gathered in the last layer)
    return b.finish(x, head, table, embed_name, {
        "producer": "model_zoo.language.decoder_graph", "architecture": "llama-style decoder step (paged)",
        "kv_block_size": str(block_size), "num_layers": str(cfg.layers), "weight_format": weight_format})



def write_decoder(config: Mapping, weights: Mapping[str, np.ndarray], path: str, block_size: int = 16,
                  weight_format: str = "float32", group_size: int = 32, kv_cache_dtype: str = "float32",
                  head: str = "logits") -> str:
    """Builds the step graph (already fused: no pass rewrites it), stores its matrices as `weight_format` while
    writing `path` (.ms) a block of rows at a time, and returns the written path. `weights`: arrays by name, or a
    Checkpoint (converter.frontends.checkpoint), whose tensors are then read from their files as they are written."""
    from converter.runtime_check import check_runtime_kernels
    from converter.writer import write_ms

    from ..registry import graph_builders
    builder = graph_builders().get(config.get("model_type"))   # Qwen3.5's hybrid graph, ...
    if builder is not None:
        graph = builder(config, weights, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                        weight_format=weight_format, group_size=group_size, head=head)
    else:
        graph = build_decoder_graph(config, weights, block_size, kv_cache_dtype, weight_format, group_size, head)
    check_runtime_kernels(graph)
    return write_ms(graph, path if path.endswith(".ms") else path + ".ms").path


def build_from_checkpoint(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                          block_size: int = 16, kv_cache_dtype: str = "float32", group_size: int = 32,
                          head: str = "logits") -> Graph:
    """The registry's graph builder for decoder families (converter_lite --fmk=HF): the step graph, with the
    converter's options by name."""
    return build_decoder_graph(config, weights, block_size, kv_cache_dtype, weight_format, group_size, head)
