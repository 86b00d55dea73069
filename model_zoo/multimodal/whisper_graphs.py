"""Whisper (transformers WhisperForConditionalGeneration) built from a checkpoint's tensors in the converter's IR, as
the two graphs of encoder-decoder speech recognition with a KV cache:

- head "encoder": log-mel features [B, mels, 2 x max_source_positions] through the two GELU convolutions (the second
  of stride 2; as 2-D convolutions over a height of one), the stored sinusoidal positions and pre-LayerNorm layers;
  outputs encoder_states [B, S, D] and, computed once per audio, every decoder layer's cross-attention keys and
  values (cross_k.i / cross_v.i [B, S, D]).
- head "decoder": model_zoo.language.cross_decoder_graph's lock-step decoder step (learned positions, the paged KV
  cache, cross-attention to the audio's keys and values, a GELU MLP, the tied head)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT
from ..graph_builder import F32, GraphBuilder
from ..language.cross_decoder_graph import CrossDecoderLayout, build_cross_decoder_step


class WhisperConfig:
    def __init__(self, config: Mapping):
        get = config.get
        self.d = int(config["d_model"])
        self.mels = int(get("num_mel_bins", 80))
        self.enc_layers, self.dec_layers = int(config["encoder_layers"]), int(config["decoder_layers"])
        self.enc_heads = int(config["encoder_attention_heads"])
        self.dec_heads = int(config["decoder_attention_heads"])
        self.enc_ffn, self.dec_ffn = int(config["encoder_ffn_dim"]), int(config["decoder_ffn_dim"])
        self.vocab = int(config["vocab_size"])
        self.sources = int(get("max_source_positions", 1500))
        self.targets = int(get("max_target_positions", 448))
        self.embed_scale = float(np.sqrt(self.d)) if get("scale_embedding") else 1.0
        self.act = _ACT.get(get("activation_function", "gelu"))
        if self.act is None:
            raise NotImplementedError(f"Whisper activation_function {get('activation_function')!r}")
        for heads in (self.enc_heads, self.dec_heads):
            if self.d % heads:
                raise ConverterError(f"d_model {self.d} is not a multiple of {heads} attention heads")


def _layer_norm(b: GraphBuilder, x: str, prefix: str, size: int, hint: str) -> str:
    return b.node("LayerNormalization", [x, b.const(f"{hint}_w", b.weight(prefix + ".weight", (size,))),
                                         b.const(f"{hint}_b", b.weight(prefix + ".bias", (size,)))],
                  {"axis": -1, "epsilon": 1e-5}, hint=hint)


def _root(weights: Mapping) -> str:
    for root in ("model.", ""):
        if root + "encoder.conv1.weight" in weights:
            return root
    raise ConverterError("not a Whisper checkpoint: no model.encoder.conv1.weight")


def build_whisper_encoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                                group_size: int = 32) -> Graph:
    cfg, root = WhisperConfig(config), _root(weights)
    D, S = cfg.d, cfg.sources
    b = GraphBuilder("whisper_encoder", weights, weight_format, group_size)
    x = b.input("input_features", [-1, cfg.mels, 2 * S], F32)
    x = b.node("Unsqueeze", [x, b.const("height_axis", np.array([2], np.int64))], hint="features_2d")   # [B, M, 1, T]
    c_in = cfg.mels
    for i, stride in ((1, 1), (2, 2)):
        w = b.weight(f"{root}encoder.conv{i}.weight", (D, c_in, 3)).reshape(D, c_in, 1, 3)
        x = b.node("Conv", [x, b.const(f"conv{i}_w", w), b.const(f"conv{i}_b", b.weight(f"{root}encoder.conv{i}.bias",
                                                                                           (D,)))],
                   {"kernel_shape": [1, 3], "strides": [1, stride], "pads": [0, 1, 0, 1], "dilations": [1, 1],
                    "group": 1}, hint=f"conv{i}")
        x = b.node("Gelu", [x], hint=f"conv{i}_gelu")
        c_in = D
    x = b.node("Reshape", [x, b.const("steps_flat", np.array([0, D, S], np.int64))], hint="conv_rows")
    x = b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="steps_first")                    # [B, S, D]
    positions = b.weight(f"{root}encoder.embed_positions.weight", (S, D))
    x = b.node("Add", [x, b.const("positions", positions[None])], hint="positioned")
    p = f"{root}encoder."
    for i in range(cfg.enc_layers):
        lp = f"{p}layers.{i}."
        h = _layer_norm(b, x, lp + "self_attn_layer_norm", D, f"ln1_{i}")
        qkv = [b.linear(h, f"{lp}self_attn.{n}_proj", f"{n}{i}", D, D) for n in "qkv"]
        x = b.linear(b.mha(qkv, cfg.enc_heads, f"attn{i}"), lp + "self_attn.out_proj", f"o{i}", D, D, residual=x)
        h = _layer_norm(b, x, lp + "final_layer_norm", D, f"ln2_{i}")
        x = b.linear(b.linear(h, lp + "fc1", f"fc1_{i}", D, cfg.enc_ffn, activation=cfg.act), lp + "fc2", f"fc2_{i}",
                     cfg.enc_ffn, D, residual=x)
    x = b.rename(_layer_norm(b, x, p + "layer_norm", D, "encoder_ln"), "encoder_states")
    b.g.outputs.append(x)
    for i in range(cfg.dec_layers):   # every decoder layer's cross-attention keys and values, once per audio
        lp = f"{root}decoder.layers.{i}.encoder_attn."
        b.g.outputs.append(b.rename(b.linear(x, lp + "k_proj", f"cross_k{i}", D, D), f"cross_k.{i}"))
        b.g.outputs.append(b.rename(b.linear(x, lp + "v_proj", f"cross_v{i}", D, D), f"cross_v.{i}"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.whisper_graphs", "architecture": "WhisperEncoder",
                         "head": "encoder", "weight_format": weight_format})
    return b.g


def build_whisper_decoder_graph(config: Mapping, weights: Mapping[str, np.ndarray], block_size: int = 16,
                                kv_cache_dtype: str = "float32", weight_format: str = "float32",
                                group_size: int = 32) -> Graph:
    cfg, root = WhisperConfig(config), _root(weights)
    p = f"{root}decoder."
    layout = CrossDecoderLayout(
        embed=p + "embed_tokens.weight", layer=p + "layers.{}.", self_norm="self_attn_layer_norm",
        self_q="self_attn.q_proj", self_k="self_attn.k_proj", self_v="self_attn.v_proj", self_out="self_attn.out_proj",
        cross_norm="encoder_attn_layer_norm", cross_q="encoder_attn.q_proj", cross_out="encoder_attn.out_proj",
        mlp_norm="final_layer_norm", mlp_in="fc1", mlp_out="fc2", final_norm=p + "layer_norm",
        head=None if config.get("tie_word_embeddings", True) else "proj_out.weight")
    positions = GraphBuilder("positions", weights).weight(p + "embed_positions.weight", (cfg.targets, cfg.d))
    g = build_cross_decoder_step("whisper_decoder", layout, weights, cfg.d, cfg.dec_heads, cfg.dec_layers,
                                 cfg.dec_ffn, cfg.vocab, positions, cfg.embed_scale, cfg.act, block_size,
                                 kv_cache_dtype, weight_format, group_size)
    g.metadata.update({"producer": "model_zoo.multimodal.whisper_graphs",
                       "architecture": "WhisperDecoder step (paged self-attention, lock step)"})
    return g
