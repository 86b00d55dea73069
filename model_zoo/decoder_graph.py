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

from converter.ir import Graph, Node, Tensor

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)


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
        if rope and rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise NotImplementedError(f"rope scaling '{rope.get('rope_type', rope.get('type'))}' is not supported yet")
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
        experts = get("num_experts") or get("num_local_experts") or 0   # (transformers 5 writes the latter for Qwen3-MoE)
        self.experts = int(experts) if get("model_type") in ("qwen2_moe", "qwen3_moe") else 0
        self.top_k = int(get("num_experts_per_tok") or 0)
        self.norm_top_k = bool(get("norm_topk_prob", False))
        step, dense = int(get("decoder_sparse_step") or 1), set(get("mlp_only_layers") or [])
        self.sparse = [self.experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(self.layers)]


class _Builder:
    def __init__(self, cfg: DecoderConfig, weights: Mapping[str, np.ndarray]):
        self.cfg, self.w, self.g = cfg, weights, Graph(name="decoder_step")

    def value(self, hint: str, dtype=F32) -> str:
        name = self.g.unique_name(hint)
        self.g.tensors[name] = Tensor(name, dtype, None)
        return name

    def node(self, op: str, inputs: list[str], attrs: dict | None = None, hint: str = "", dtype=F32) -> str:
        out = self.value(hint or op.lower(), dtype)
        self.g.nodes.append(Node(self.g.unique_name(f"{hint or op}_node"), op, inputs, [out], attrs or {}))
        return out

    def const(self, hint: str, value: np.ndarray) -> str:
        return self.g.add_constant(hint, np.ascontiguousarray(value))

    def weight(self, name: str) -> np.ndarray:
        if name not in self.w:
            raise KeyError(f"the checkpoint has no tensor '{name}'")
        return np.asarray(self.w[name], dtype=np.float32)

    def norm(self, x: str, name: str, hint: str) -> str:
        w = self.weight(name) + (1.0 if self.cfg.gemma2 else 0.0)
        return self.node("RMSNormalization", [x, self.const(hint, w)], {"axis": -1, "epsilon": self.cfg.eps}, hint=hint)

    def linear(self, x: str, prefix: str, hint: str) -> str:
        y = self.node("MatMul", [x, self.const(f"{hint}_w", self.weight(prefix + ".weight").T)], hint=hint)
        if prefix + ".bias" in self.w:
            y = self.node("Add", [y, self.const(f"{hint}_b", self.weight(prefix + ".bias"))], hint=f"{hint}_bias")
        return y

    def mlp(self, h: str, prefix: str, tag: str) -> str:
        """The gated MLP: down(act(gate(h)) * up(h))."""
        gate = self.linear(h, prefix + "gate_proj", f"gate{tag}")
        if self.cfg.act == "silu":
            act = self.node("Mul", [gate, self.node("Sigmoid", [gate], hint=f"sig{tag}")], hint=f"silu{tag}")
        else:
            act = self.node("Gelu", [gate], {"tanh_approximation": self.cfg.act == "gelu_pytorch_tanh"},
                            hint=f"gelu{tag}")
        up = self.linear(h, prefix + "up_proj", f"up{tag}")
        return self.linear(self.node("Mul", [act, up], hint=f"glu{tag}"), prefix + "down_proj", f"down{tag}")

    def moe(self, h: str, prefix: str, i: int) -> str:
        """The routed experts (one MoE node: only the chosen experts run), plus Qwen2-MoE's shared expert scaled by
        sigmoid(shared_expert_gate(h))."""
        cfg = self.cfg
        logits = self.linear(h, prefix + "gate", f"router{i}")
        gate_up, down = self.weight(prefix + "experts.gate_up_proj"), self.weight(prefix + "experts.down_proj")
        if gate_up.shape[0] != cfg.experts or down.shape[0] != cfg.experts:
            raise ValueError(f"layer {i}: {gate_up.shape[0]} experts' weights for num_experts = {cfg.experts}")
        experts = [self.const(f"expert{i}_{e}_gate_up", gate_up[e].T) for e in range(cfg.experts)] + \
                  [self.const(f"expert{i}_{e}_down", down[e].T) for e in range(cfg.experts)]
        act = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}[cfg.act]
        y = self.node("MoE", [h, logits] + experts, {"top_k": cfg.top_k, "normalize_top_k": cfg.norm_top_k,
                                                     "activation": act}, hint=f"moe{i}")
        if prefix + "shared_expert.gate_proj.weight" in self.w:
            shared = self.mlp(h, prefix + "shared_expert.", f"_shared{i}")
            weight = self.node("Sigmoid", [self.linear(h, prefix + "shared_expert_gate", f"shared_gate{i}")],
                               hint=f"shared_weight{i}")
            y = self.node("Add", [y, self.node("Mul", [shared, weight], hint=f"shared_scaled{i}")], hint=f"experts{i}")
        return y

    def input(self, name: str, shape: list[int], dtype=F32) -> str:
        self.g.tensors[name] = Tensor(name, dtype, shape)
        self.g.inputs.append(name)
        return name


KV_CACHE_DTYPES = ("float32", "bfloat16", "float16", "int8")


def build_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], block_size: int,
                        kv_cache_dtype: str = "float32") -> Graph:
    """The step graph; `weights` maps the checkpoint's tensor names (transformers' naming) to arrays.
    `kv_cache_dtype`: the element type of the key/value cache inputs (bfloat16 / float16 halve the cache's memory;
    int8 rows hold head_dim codes and the row's float32 scale, a quarter plus 4 bytes; each key and value is rounded
    to it when written, per row and head for int8; attention computes in float32)."""
    from converter.dtypes import BFLOAT16

    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not {kv_cache_dtype!r}")
    cache_dt = {"float32": F32, "bfloat16": BFLOAT16, "float16": np.dtype(np.float16),
                "int8": np.dtype(np.int8)}[kv_cache_dtype]
    cfg = DecoderConfig(config)
    b = _Builder(cfg, weights)
    g = b.g
    ids = b.input("input_ids", [-1], I64)
    positions = b.input("positions", [-1], I64)
    tables = b.input("block_tables", [-1, -1], I64)
    seq_lens = b.input("seq_lens", [-1], I64)
    query_lens = b.input("query_lens", [-1], I64)
    last = b.input("last_token_index", [-1], I64)
    row = cfg.head_dim + (4 if kv_cache_dtype == "int8" else 0)   # int8: the codes, then the row's scale
    caches = [(b.input(f"key_cache.{i}", [-1, cfg.kv_heads, block_size, row], cache_dt),
               b.input(f"value_cache.{i}", [-1, cfg.kv_heads, block_size, row], cache_dt))
              for i in range(cfg.layers)]

    inv_freq = 1.0 / cfg.theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim)
    angles = np.arange(cfg.max_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = b.const("rope_cos", np.cos(angles).astype(np.float32)), b.const("rope_sin", np.sin(angles).astype(np.float32))
    pos_row = b.node("Unsqueeze", [positions, b.const("axis0", np.array([0], np.int64))], hint="pos_row", dtype=I64)

    x = b.node("Gather", [b.const("embed", b.weight("model.embed_tokens.weight")), ids], {"axis": 0}, hint="embed")
    if cfg.gemma2:   # transformers rounds the normaliser to the weights' dtype (float32 here)
        x = b.node("Mul", [x, b.const("embed_scale", np.array(cfg.hidden ** 0.5, np.float32))], hint="embed_scaled")
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        h = b.norm(x, p + "input_layernorm.weight", f"ln1_{i}")
        q = b.linear(h, p + "self_attn.q_proj", f"q{i}")
        k = b.linear(h, p + "self_attn.k_proj", f"k{i}")
        v = b.linear(h, p + "self_attn.v_proj", f"v{i}")
        rotated = []
        for name, t, heads in (("q", q, cfg.heads), ("k", k, cfg.kv_heads)):
            width = heads * cfg.head_dim   # [T, width] -> [1, T, width], RotaryEmbedding's 3-D form
            norm = p + f"self_attn.{name}_norm.weight"
            if norm in weights:   # Qwen3: RMSNorm of each head's q / k before the rotation
                heads_view = b.node("Reshape", [t, b.const(f"{name}{i}_heads", np.array([-1, heads, cfg.head_dim],
                                                                                       np.int64))], hint=f"{name}{i}_h")
                t = b.node("RMSNormalization", [heads_view, b.const(f"{name}norm{i}", b.weight(norm))],
                           {"axis": -1, "epsilon": cfg.eps}, hint=f"{name}{i}_norm")
            t3 = b.node("Reshape", [t, b.const(f"{name}{i}_rows", np.array([1, -1, width], np.int64))],
                        hint=f"{name}{i}_rows")
            r = b.node("RotaryEmbedding", [t3, cos, sin, pos_row],
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
        o = b.linear(attn, p + "self_attn.o_proj", f"o{i}")
        if cfg.gemma2:
            o = b.norm(o, p + "post_attention_layernorm.weight", f"post_attn_ln{i}")
        x = b.node("Add", [x, o], hint=f"res_attn{i}")
        h = b.norm(x, p + ("pre_feedforward_layernorm.weight" if cfg.gemma2 else "post_attention_layernorm.weight"),
                   f"ln2_{i}")
        mlp = b.moe(h, p + "mlp.", i) if cfg.sparse[i] else b.mlp(h, p + "mlp.", str(i))
        if cfg.gemma2:
            mlp = b.norm(mlp, p + "post_feedforward_layernorm.weight", f"post_ff_ln{i}")
        x = b.node("Add", [x, mlp], hint=f"res_mlp{i}")
    x = b.norm(x, "model.norm.weight", "norm")   # the last tokens' rows only (gathered in the last layer)
    head = b.weight("model.embed_tokens.weight" if cfg.tied or "lm_head.weight" not in weights else "lm_head.weight")
    logits = b.node("MatMul", [x, b.const("lm_head", head.T)], hint="logits")
    if cfg.final_softcap:   # Gemma 2: cap * tanh(logits / cap)
        cap = b.const("final_softcap", np.array(cfg.final_softcap, np.float32))
        logits = b.node("Mul", [b.node("Tanh", [b.node("Div", [logits, cap], hint="logits_scaled")], hint="logits_tanh"),
                                cap], hint="logits_capped")
    g.outputs.append(logits)
    g.metadata.update({"producer": "model_zoo.decoder_graph", "architecture": "llama-style decoder step (paged)",
                       "kv_block_size": str(block_size), "num_layers": str(cfg.layers)})
    return g


WEIGHT_FORMATS = ("float32", "bfloat16", "float16", "int8", "int4")


def compress_weights(graph: Graph, weights: str, group_size: int = 32) -> list[str]:
    """Stores the step graph's matrices (every MatMul weight, the experts' and the embedding table) as `weights`: bfloat16/float16
    halves, int8 codes with a scale per output column, or int4 codes with a scale per block of `group_size` rows
    of each column (symmetric, round to nearest). Norm weights and other small constants stay float32. The runtime
    reads the matrices in that form (cpu/gemm/skinny_gemm.h): a decode step reads 2x / 4x / ~7x fewer bytes than float32."""
    from converter.quantization.config import QuantConfig
    from converter.quantization.encoding import decode, to_bfloat16, to_float16
    from converter.quantization.weight_quant import apply_weight_quant

    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)}, not {weights!r}")
    if weights == "float32":
        return []
    ops = frozenset({"MatMul", "Gather", "MoE"})
    if weights in ("int8", "int4"):
        cfg = QuantConfig(bit_num=8 if weights == "int8" else 4, group_size=0 if weights == "int8" else group_size,
                          min_quant_weight_channel=1)
        return apply_weight_quant(graph, cfg, ops)
    matrices = {n.inputs[1] for n in graph.nodes if n.op_type == "MatMul"} | \
               {n.inputs[0] for n in graph.nodes if n.op_type == "Gather"} | \
               {w for n in graph.nodes if n.op_type == "MoE" for w in n.inputs[2:]}
    done = []
    for name in sorted(matrices):
        t = graph.tensors[name]
        if not t.is_constant or t.stored is not None or t.data.ndim != 2:
            continue
        t.stored = to_bfloat16(t.data) if weights == "bfloat16" else to_float16(t.data)
        t.data = decode(t.stored, t.data.shape)   # the values the runtime will read back
        done.append(name)
    return done


def write_decoder(config: Mapping, weights: Mapping[str, np.ndarray], path: str, block_size: int = 16,
                  optimize: str = "general", weight_format: str = "float32", group_size: int = 32,
                  kv_cache_dtype: str = "float32") -> str:
    """Builds the step graph, runs the converter's passes on it (bias and SwiGLU fusions into the MatMuls, ...),
    stores its matrices as `weight_format` (compress_weights) and writes `path` (.ms). Returns the written path."""
    from converter.passes import run_pipeline
    from converter.runtime_check import check_runtime_kernels
    from converter.writer import write_ms

    graph = build_decoder_graph(config, weights, block_size, kv_cache_dtype)
    run_pipeline(graph, optimize)
    compress_weights(graph, weight_format, group_size)
    graph.metadata["weight_format"] = weight_format
    check_runtime_kernels(graph)
    return write_ms(graph, path if path.endswith(".ms") else path + ".ms").path
