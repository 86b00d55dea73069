"""Qwen3-ASR's audio side (transformers Qwen3ASREncoder + Qwen3ASRMultiModalProjector) built from a checkpoint's
tensors, already fused, in the converter's IR.

The log-mel frames are cut on the host into chunks of 2 x n_window frames (lite.qwen3_asr_audio.encoder_inputs);
each chunk goes through three stride-2 3x3 convolutions (GELU), a linear map of the channels x frequency rows to
d_model and the sinusoidal positions of its own time steps (each chunk restarts at 0). The valid time steps of all
chunks are gathered into one sequence, whose blocks attend within windows of n_window_infer frames' worth of steps
(a block-diagonal mask), then the final LayerNorm and the projector (linear, GELU, linear).

Inputs: input_features [chunks, 1, mel bins, 2 n_window], valid_steps [steps] int64 (indices into chunks x steps per
chunk), window_mask [1, 1, steps, steps] bool. Output: audio_embeds [steps, output_dim]."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..encoders.clip_text_graph import _ACT
from ..graph_builder import F32, I64, GraphBuilder
from ..language.text_model_view import PrefixView

_BOOL = np.dtype(np.bool_)


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> np.ndarray:
    """[length, channels]: sin then cos of position x geometric frequencies (Whisper's encoder positions)."""
    if channels % 2:
        raise ConverterError(f"sinusoidal positions need an even width, got {channels}")
    increment = np.log(max_timescale) / (channels // 2 - 1)
    inv = np.exp(-increment * np.arange(channels // 2, dtype=np.float32)).astype(np.float32)
    scaled = np.arange(length, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def build_qwen3_asr_audio_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                                group_size: int = 32) -> Graph:
    cfg = dict(config.get("audio_config") or config)
    D, heads, ffn = int(cfg["d_model"]), int(cfg["encoder_attention_heads"]), int(cfg["encoder_ffn_dim"])
    mel, layers = int(cfg["num_mel_bins"]), int(cfg["encoder_layers"])
    channels, out_dim = int(cfg["downsample_hidden_size"]), int(cfg["output_dim"])
    chunk = 2 * int(cfg.get("n_window", 50))
    act = _ACT.get(cfg.get("activation_function", "gelu"))
    if act is None:
        raise NotImplementedError(f"Qwen3-ASR activation_function {cfg.get('activation_function')!r}")
    if cfg.get("scale_embedding"):
        raise NotImplementedError("Qwen3-ASR audio encoders with scale_embedding")
    if D % heads:
        raise ConverterError(f"d_model {D} is not a multiple of {heads} heads")
    tower = next((r for r in ("model.audio_tower.", "audio_tower.")
                  if r + "conv2d1.weight" in weights), None)
    projector = next((r for r in ("model.multi_modal_projector.", "multi_modal_projector.")
                      if r + "linear_1.weight" in weights), None)
    if tower is None or projector is None:
        raise ConverterError("not a transformers-layout Qwen3-ASR checkpoint (the -hf conversions): no "
                             "model.audio_tower.* or model.multi_modal_projector.*")
    b = GraphBuilder("qwen3_asr_audio", PrefixView(weights, tower), weight_format, group_size)
    x = b.input("input_features", [-1, 1, mel, chunk], F32)
    valid = b.input("valid_steps", [-1], I64)
    mask = b.input("window_mask", [1, 1, -1, -1], _BOOL)
    freq, steps, c_in = mel, chunk, 1
    for i in (1, 2, 3):
        w = b.const(f"conv{i}_w", b.weight(f"conv2d{i}.weight", (channels, c_in, 3, 3)))
        bias = b.const(f"conv{i}_b", b.weight(f"conv2d{i}.bias", (channels,)))
        x = b.node("Conv", [x, w, bias], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                          "dilations": [1, 1], "group": 1}, hint=f"conv{i}")
        x = b.node("Gelu", [x], hint=f"conv{i}_gelu")
        freq, steps, c_in = (freq - 1) // 2 + 1, (steps - 1) // 2 + 1, channels
    # [chunks, C, F, T] -> [chunks, T, C x F], as transformers flattens before conv_out
    x = b.node("Transpose", [x], {"perm": [0, 3, 1, 2]}, hint="steps_first")
    x = b.node("Reshape", [x, b.const("step_rows", np.array([0, steps, channels * freq], np.int64))], hint="step_rows")
    w_out, attrs = b.linear_weight("conv_out_w", b.source("conv_out.weight", (D, channels * freq)))
    positions = sinusoids(int(cfg.get("max_position_embeddings", steps)), D)
    if positions.shape[0] < steps:
        raise ConverterError(f"{positions.shape[0]} sinusoidal positions for {steps} steps per chunk")
    x = b.node("MatMul", [x, w_out], attrs, hint="conv_out")
    x = b.node("Add", [x, b.const("chunk_positions", positions[None, :steps])], hint="positioned")
    x = b.node("Reshape", [x, b.const("flat_steps", np.array([-1, D], np.int64))], hint="all_steps")
    x = b.node("Gather", [x, valid], {"axis": 0}, hint="valid_steps_rows")
    x = b.node("Unsqueeze", [x, b.const("batch_axis", np.array([0], np.int64))], hint="sequence")   # [1, S, D]
    eps = float(cfg.get("layer_norm_eps", 1e-5))

    def layer_norm(v: str, prefix: str, hint: str) -> str:
        return b.node("LayerNormalization", [v, b.const(f"{hint}_w", b.weight(prefix + ".weight", (D,))),
                                             b.const(f"{hint}_b", b.weight(prefix + ".bias", (D,)))],
                      {"axis": -1, "epsilon": eps}, hint=hint)

    for i in range(layers):
        p = f"layers.{i}."
        h = layer_norm(x, p + "self_attn_layer_norm", f"ln1_{i}")
        q, k, v = (b.linear(h, f"{p}self_attn.{n}_proj", f"{n}{i}", D, D) for n in "qkv")
        a = b.mha([q, k, v, mask], heads, f"attn{i}")
        x = b.linear(a, p + "self_attn.out_proj", f"o{i}", D, D, residual=x)
        h = layer_norm(x, p + "final_layer_norm", f"ln2_{i}")
        x = b.linear(b.linear(h, p + "fc1", f"fc1_{i}", D, ffn, activation=act), p + "fc2", f"fc2_{i}", ffn, D,
                     residual=x)
    x = layer_norm(x, "ln_post", "ln_post")
    x = b.node("Reshape", [x, b.const("rows", np.array([-1, D], np.int64))], hint="audio_rows")
    b.w = PrefixView(weights, projector)   # the same graph goes on with the projector's tensors
    x = b.linear(x, "linear_1", "proj1", D, D, activation=act)
    x = b.linear(x, "linear_2", "proj2", D, out_dim)
    b.g.outputs.append(b.rename(x, "audio_embeds"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.qwen3_asr_audio_graph", "architecture": "Qwen3ASREncoder",
                         "weight_format": weight_format, "chunk_frames": str(chunk),
                         "steps_per_chunk": str(steps)})
    return b.g
