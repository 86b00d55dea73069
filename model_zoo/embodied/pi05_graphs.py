"""openpi pi0.5 (transformers `PI05ForConditionalGeneration`) from its checkpoint's tensors, fused, in the converter's
IR, as the two graphs of its act loop:

- head "prefix" (the vision-language side, run once per observation): the SigLIP tower over every camera image, the
  PaliGemma projector, the image rows followed by the prompt's token embeddings (x sqrt(hidden), Gemma's scaled
  embedding), then the Gemma layers with bidirectional attention over the valid tokens (`attention_mask`, right or
  left padding; positions count the valid tokens: cumsum(mask) - 1). Inputs pixel_values [batch, cameras, 3, S, S],
  input_ids [batch, text tokens] (the prompt after the image tokens: bos, task, discretised state) and
  attention_mask [batch, cameras x image tokens + text tokens]; outputs key.i / value.i [batch, tokens,
  kv_heads x head_dim] of every layer (keys rotated): the KV cache the action expert attends to. The last layer's
  attention output and MLP feed nothing the expert reads and are not built.
- head "action_expert" (one flow-matching step, run num_inference_steps times): the noisy action chunk through
  action_in_proj, the step's time through the sinusoid and the time MLP, then the expert's Gemma layers whose norms
  are adaptive (adaRMS: RMSNorm without weight, x (1 + scale) + shift, and a gate on the residual branch, all three
  from a Linear of the time embedding); each layer's queries attend to the prefix's keys / values of the same layer
  and to the chunk's own (bidirectional within the chunk); positions continue after the valid prefix tokens. Inputs
  noisy_actions [batch, chunk, action_dim], timestep [batch], prefix_mask [batch, prefix tokens] and the prefix's
  key.i / value.i; output velocity [batch, chunk, action_dim] (action_out_proj of the final adaRMS norm).

RoPE tables follow transformers' float32 arithmetic (inverse frequencies and angles in float32)."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT, clip_encoder, clip_layer_norm
from ..graph_builder import F32, I64, GraphBuilder
from ..language.decoder_graph import DecoderConfig
from ..language.text_model_view import RenamedView

BOOL = np.dtype(np.bool_)


def _sub(config: Mapping, key: str) -> dict:
    part = config.get(key)
    if not isinstance(part, Mapping):
        raise ConverterError(f"a pi0.5 config needs its {key} (got {type(part).__name__})")
    return dict(part)


def rope_tables(cfg: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) [max_position_embeddings, head_dim / 2] as transformers computes them in float32."""
    D = cfg.head_dim
    inv_freq = (1.0 / (np.float32(cfg.theta) ** (np.arange(0, D, 2, dtype=np.float32) / np.float32(D)))).astype(
        np.float32)
    angles = np.arange(cfg.max_positions, dtype=np.float32)[:, None] * inv_freq[None, :]   # float32 products
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class _Pi05Builder(GraphBuilder):
    """The pieces both graphs share: rotary q / k, grouped-query attention under a keep mask, the gated MLP."""

    def __init__(self, name: str, weights, weight_format: str, group_size: int, cfg: DecoderConfig):
        super().__init__(name, weights, weight_format, group_size)
        self.cfg = cfg
        cos, sin = rope_tables(cfg)
        self.cos, self.sin = self.const("rope_cos", cos), self.const("rope_sin", sin)

    def i64(self, hint: str, values) -> str:
        return self.const(hint, np.array(values, np.int64))

    def rotate(self, t: str, heads: int, positions: str, hint: str) -> str:
        return self.node("RotaryEmbedding", [t, self.cos, self.sin, positions],
                         {"interleaved": False, "num_heads": heads, "rotary_embedding_dim": 0}, hint=hint)

    def attention(self, q: str, k: str, v: str, keep: str, hint: str) -> str:
        cfg = self.cfg
        return self.node("Attention", [q, k, v, keep], {"q_num_heads": cfg.heads, "kv_num_heads": cfg.kv_heads,
                                                        "scale": cfg.head_dim ** -0.5, "is_causal": False,
                                                        "q_layout": "BSND", "k_layout": "BSND", "v_layout": "BSND",
                                                        "out_layout": "BSND"}, hint=hint)

    def qkv(self, h: str, prefix: str, positions: str, i: int) -> tuple[str, str, str]:
        cfg, H = self.cfg, self.cfg.hidden
        q = self.linear(h, prefix + "self_attn.q_proj", f"q{i}", H, cfg.heads * cfg.head_dim)
        k = self.linear(h, prefix + "self_attn.k_proj", f"k{i}", H, cfg.kv_heads * cfg.head_dim)
        v = self.linear(h, prefix + "self_attn.v_proj", f"v{i}", H, cfg.kv_heads * cfg.head_dim)
        return (self.rotate(q, cfg.heads, positions, f"q{i}_rope"), self.rotate(k, cfg.kv_heads, positions,
                                                                                f"k{i}_rope"), v)

    def mlp(self, h: str, prefix: str, i: int, residual: str = "") -> str:
        cfg, H, inner = self.cfg, self.cfg.hidden, self.cfg.intermediate
        act = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu_tanh"}[cfg.act]   # Gemma's gelu: tanh
        up = self.linear(h, prefix + "mlp.up_proj", f"up{i}", H, inner)
        gate = self.linear(h, prefix + "mlp.gate_proj", f"gate{i}", H, inner, activation=act, multiplier=up)
        return self.linear(gate, prefix + "mlp.down_proj", f"down{i}", inner, H, residual=residual)

    def batch_of(self, x: str) -> str:
        return self.node("Gather", [self.node("Shape", [x], hint=f"{x}_shape", dtype=I64), self.i64("zero", [0])],
                         {"axis": 0}, hint=f"{x}_batch", dtype=I64)


# Where each part's tensors live: transformers' module names (canonical here) and the LeRobot / openpi PyTorch layout
# save_pretrained writes (transformers maps it back on load: conversion_mapping's "pi0" rules).
_LAYOUTS = (("model.vlm.vision_tower.", ("model.vlm.vision_tower.vision_model.",
                                         "paligemma_with_expert.paligemma.model.vision_tower.",
                                         "paligemma_with_expert.paligemma.model.vision_tower.vision_model.")),
            ("model.vlm.language_model.", ("paligemma_with_expert.paligemma.model.language_model.model.",
                                           "paligemma_with_expert.paligemma.model.language_model.")),
            ("model.vlm.multi_modal_projector.", ("paligemma_with_expert.paligemma.model.multi_modal_projector.",)),
            ("model.dit.", ("paligemma_with_expert.gemma_expert.model.",)),
            ("embed_action_time.", ("",)))
# a tied embedding saved only as the language model's head (LeRobot's Hub files)
_EMBED, _HEAD = "model.vlm.language_model.embed_tokens.weight", "paligemma_with_expert.paligemma.lm_head.weight"


class Pi05Weights(RenamedView):
    """A pi0.5 checkpoint's tensors under transformers' module names, whichever layout the file uses."""

    def _name(self, name: str) -> str:
        if name in self.w:
            return name
        for canonical, stored in _LAYOUTS:
            if name.startswith(canonical):
                for prefix in stored:
                    if prefix + name[len(canonical):] in self.w:
                        return prefix + name[len(canonical):]
        if name == _EMBED and _HEAD in self.w:
            return _HEAD
        return name


def build_pi05_prefix_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                            group_size: int = 32) -> Graph:
    vlm = _sub(config, "vlm_config")
    vision, text = _sub(vlm, "vision_config"), _sub(vlm, "text_config")
    cfg = DecoderConfig({"vocab_size": vlm.get("vocab_size", text.get("vocab_size")), **text})
    Hv, size, patch = int(vision["hidden_size"]), int(vision["image_size"]), int(vision["patch_size"])
    channels, veps = int(vision.get("num_channels", 3)), float(vision.get("layer_norm_eps", 1e-6))
    vact = _ACT.get(vision.get("hidden_act", "gelu_pytorch_tanh"))
    if vact is None:
        raise NotImplementedError(f"SigLIP hidden_act {vision.get('hidden_act')!r} is not supported")
    if size % patch:
        raise ConverterError(f"image_size {size} is not a multiple of patch_size {patch}")
    patches, H = (size // patch) ** 2, cfg.hidden
    weights = Pi05Weights(weights)
    vp, lp = "model.vlm.vision_tower.", "model.vlm.language_model."
    if vp + "embeddings.patch_embedding.weight" not in weights:
        raise ConverterError(f"not a pi0.5 checkpoint: no SigLIP patch embedding ({vp}embeddings.patch_embedding "
                             "or the LeRobot layout's paligemma_with_expert.paligemma.model.vision_tower.*)")
    b = _Pi05Builder("pi05_prefix", weights, weight_format, group_size, cfg)
    pixels = b.input("pixel_values", [-1, -1, channels, size, size], F32)
    ids = b.input("input_ids", [-1, -1], I64)
    mask = b.input("attention_mask", [-1, -1], I64)

    # SigLIP: patch Conv (with bias), learned positions, pre-LayerNorm blocks, post_layernorm; then the projector
    images = b.node("Reshape", [pixels, b.i64("image_stack", [-1, channels, size, size])], hint="images")
    w = b.const("patch_w", b.weight(vp + "embeddings.patch_embedding.weight", (Hv, channels, patch, patch)))
    pb = b.const("patch_b", b.weight(vp + "embeddings.patch_embedding.bias", (Hv,)))
    x = b.node("Conv", [images, w, pb], {"kernel_shape": [patch, patch], "strides": [patch, patch], "pads": [0] * 4,
                                         "dilations": [1, 1], "group": 1}, hint="patches")
    x = b.node("Transpose", [b.node("Reshape", [x, b.i64("patch_flat", [0, Hv, patches])], hint="patch_flat")],
               {"perm": [0, 2, 1]}, hint="patch_rows")
    positions = b.weight(vp + "embeddings.position_embedding.weight", (patches, Hv))
    x = b.node("Add", [x, b.const("vision_positions", positions[None])], hint="vision_embeddings")
    x, _ = clip_encoder(b, x, vp, vision, vact, causal=False)
    x = clip_layer_norm(b, x, vp + "post_layernorm", Hv, veps, "post_ln")
    x = b.linear(x, "model.vlm.multi_modal_projector.linear", "projector", Hv, H)          # [B x cams, P, H]
    image_rows = b.node("Reshape", [x, b.node("Concat", [b.batch_of(pixels), b.i64("rows_rest", [-1, H])],
                                              {"axis": 0}, hint="image_rows_shape", dtype=I64)], hint="image_rows")

    # the prompt: Gemma's embedding x sqrt(hidden) (in float32, as GemmaTextScaledWordEmbedding), after the images
    table = b.stored("embed", b.source(lp + "embed_tokens.weight", (cfg.vocab, H)), reduce_axis=1)
    text_rows = b.node("Mul", [b.node("Gather", [table, ids], {"axis": 0}, hint="embed"),
                               b.const("embed_scale", np.array(math.sqrt(H), np.float32))], hint="embed_scaled")
    x = b.node("Concat", [image_rows, text_rows], {"axis": 1}, hint="prefix_rows")

    # bidirectional over the valid tokens; positions count them (cumsum - 1; left padding's leading -1 clamped: those
    # rows are masked as keys and their own outputs are never read)
    pos = b.node("Sub", [b.node("CumSum", [mask, b.i64("seq_axis", 1)], hint="mask_cumsum", dtype=I64),
                         b.i64("one", 1)], hint="positions_raw", dtype=I64)
    pos = b.node("Max", [pos, b.i64("zero_pos", 0)], hint="positions", dtype=I64)
    keep = b.node("Reshape", [b.node("Cast", [mask], {"to": BOOL}, hint="keep_flat", dtype=BOOL),
                              b.i64("keep_shape", [0, 1, 1, -1])], hint="keep", dtype=BOOL)

    def norm(h: str, name: str, hint: str) -> str:   # GemmaRMSNorm: x / rms(x) x (1 + w)
        return b.node("RMSNormalization", [h, b.const(hint, b.weight(name, (H,)) + 1.0)],
                      {"axis": -1, "epsilon": cfg.eps}, hint=hint)

    outputs = []
    for i in range(cfg.layers):
        p = f"{lp}layers.{i}."
        h = norm(x, p + "input_layernorm.weight", f"ln1_{i}")
        q, k, v = b.qkv(h, p, pos, i)
        outputs += [b.rename(k, f"key.{i}"), b.rename(v, f"value.{i}")]
        if i == cfg.layers - 1:
            break   # the expert reads only the caches
        a = b.attention(q, f"key.{i}", f"value.{i}", keep, f"attn{i}")
        x = b.linear(a, p + "self_attn.o_proj", f"o{i}", cfg.heads * cfg.head_dim, H, residual=x)
        x = b.mlp(norm(x, p + "post_attention_layernorm.weight", f"ln2_{i}"), p, i, residual=x)
    b.g.outputs.extend(outputs)
    b.g.metadata.update({"producer": "model_zoo.embodied.pi05_graphs", "architecture": "PI05ForConditionalGeneration",
                         "head": "prefix", "image_size": str(size), "image_tokens": str(patches),
                         "weight_format": weight_format})
    return b.g


def build_pi05_expert_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                            group_size: int = 32) -> Graph:
    vlm, dit = _sub(config, "vlm_config"), _sub(config, "dit_config")
    text = _sub(vlm, "text_config")
    cfg = DecoderConfig({"vocab_size": text.get("vocab_size", 1), **dit})
    prefix_cfg = DecoderConfig({"vocab_size": text.get("vocab_size", 1), **text})
    if (cfg.layers, cfg.kv_heads, cfg.head_dim) != (prefix_cfg.layers, prefix_cfg.kv_heads, prefix_cfg.head_dim):
        raise ConverterError(f"the action expert ({cfg.layers} layers, {cfg.kv_heads} kv heads of {cfg.head_dim}) "
                             f"must match the VLM's layers and KV heads ({prefix_cfg.layers}, {prefix_cfg.kv_heads} of "
                             f"{prefix_cfg.head_dim}): each expert layer attends to its VLM layer's cache")
    Hd, chunk, A = cfg.hidden, int(config.get("chunk_size", 50)), int(config.get("max_action_dim", 32))
    if Hd % 2:
        raise ConverterError(f"the expert's hidden size {Hd} must be even (sin / cos halves of the time embedding)")
    kv_width = cfg.kv_heads * cfg.head_dim
    weights, dp = Pi05Weights(weights), "model.dit."
    b = _Pi05Builder("pi05_action_expert", weights, weight_format, group_size, cfg)
    noisy = b.input("noisy_actions", [-1, chunk, A], F32)
    time = b.input("timestep", [-1], F32)
    prefix_mask = b.input("prefix_mask", [-1, -1], I64)
    caches = [(b.input(f"key.{i}", [-1, -1, kv_width], F32), b.input(f"value.{i}", [-1, -1, kv_width], F32))
              for i in range(cfg.layers)]

    x = b.linear(noisy, "embed_action_time.action_in_proj", "action_in", A, Hd)
    # sinusoid of the time (periods min_period .. max_period, geometric, float32 as transformers), then the time MLP
    fraction = np.linspace(0.0, 1.0, Hd // 2, dtype=np.float32)
    lo, hi = np.float32(config.get("min_period", 4e-3)), np.float32(config.get("max_period", 4.0))
    freq = ((np.float32(1.0) / (lo * (hi / lo) ** fraction).astype(np.float32)) * np.float32(2 * math.pi)).astype(
        np.float32)
    angle = b.node("Mul", [b.node("Unsqueeze", [time, b.i64("time_axis", [1])], hint="time_col"),
                           b.const("time_freq", freq[None])], hint="time_angle")
    temb = b.node("Concat", [b.node("Sin", [angle], hint="time_sin"), b.node("Cos", [angle], hint="time_cos")],
                  {"axis": -1}, hint="time_sinusoid")
    temb = b.linear(temb, "embed_action_time.time_mlp_in", "time_in", Hd, Hd, activation="silu")
    temb = b.linear(temb, "embed_action_time.time_mlp_out", "time_out", Hd, Hd, activation="silu")

    # positions continue after the valid prefix tokens; keys: the valid prefix and the whole chunk
    batch = b.batch_of(noisy)
    valid = b.node("ReduceSum", [prefix_mask, b.i64("sum_axis", [1])], {"keepdims": 1}, hint="prefix_valid",
                   dtype=I64)
    pos = b.node("Add", [valid, b.i64("chunk_steps", np.arange(chunk)[None])], hint="positions", dtype=I64)
    ones = b.node("Expand", [b.const("chunk_keep", np.ones((1, chunk), bool)),
                             b.node("Concat", [batch, b.i64("chunk_len", [chunk])], {"axis": 0}, hint="chunk_shape",
                                    dtype=I64)], hint="chunk_keep_rows", dtype=BOOL)
    keep = b.node("Concat", [b.node("Cast", [prefix_mask], {"to": BOOL}, hint="prefix_keep", dtype=BOOL), ones],
                  {"axis": 1}, hint="keep_flat", dtype=BOOL)
    keep = b.node("Reshape", [keep, b.i64("keep_shape", [0, 1, 1, -1])], hint="keep", dtype=BOOL)
    one_plus = b.const("one_f", np.array(1.0, np.float32))

    def ada_norm(h: str, prefix: str, hint: str, gated: bool = True) -> tuple[str, str]:
        """(RMSNorm(h) x (1 + scale) + shift, gate), the three rows of prefix.dense(temb) as [batch, 1, Hd]."""
        def third(j: int) -> str:
            r = b.rows_linear(temb, prefix + ".dense", f"{hint}_{'ssg'[j]}{j}", Hd, 3 * Hd,
                              np.arange(j * Hd, (j + 1) * Hd))
            return b.node("Unsqueeze", [r, b.i64(f"{hint}_axis{j}", [1])], hint=f"{hint}_row{j}")
        scale = b.node("Add", [third(0), one_plus], hint=f"{hint}_scale")
        n = b.node("RMSNormalization", [h, b.const(f"{hint}_unit", np.ones(Hd, np.float32))],
                   {"axis": -1, "epsilon": cfg.eps}, hint=f"{hint}_rms")
        out = b.node("Add", [b.node("Mul", [n, scale], hint=f"{hint}_scaled"), third(1)], hint=hint)
        return out, (third(2) if gated else "")

    for i in range(cfg.layers):
        p = f"{dp}layers.{i}."
        h, gate = ada_norm(x, p + "input_layernorm", f"ada1_{i}")
        q, k, v = b.qkv(h, p, pos, i)
        keys = b.node("Concat", [caches[i][0], k], {"axis": 1}, hint=f"keys{i}")
        values = b.node("Concat", [caches[i][1], v], {"axis": 1}, hint=f"values{i}")
        a = b.linear(b.attention(q, keys, values, keep, f"attn{i}"), p + "self_attn.o_proj", f"o{i}",
                     cfg.heads * cfg.head_dim, Hd)
        x = b.node("Add", [x, b.node("Mul", [a, gate], hint=f"attn_gated{i}")], hint=f"res1_{i}")
        h, gate = ada_norm(x, p + "post_attention_layernorm", f"ada2_{i}")
        x = b.node("Add", [x, b.node("Mul", [b.mlp(h, p, i), gate], hint=f"mlp_gated{i}")], hint=f"res2_{i}")
    x, _ = ada_norm(x, dp + "norm", "final", gated=False)
    velocity = b.linear(x, "action_out_proj", "action_out", Hd, A)
    b.g.outputs.append(b.rename(velocity, "velocity"))
    b.g.metadata.update({"producer": "model_zoo.embodied.pi05_graphs", "architecture": "PI05ForConditionalGeneration",
                         "head": "action_expert", "chunk_size": str(chunk), "action_dim": str(A),
                         "weight_format": weight_format})
    return b.g
