"""The checkpoint path (`converter_lite --fmk=HF`): a checkpoint (Hugging Face directory of config.json and
safetensors shards, a PyTorch state dict, a MindSpore .ckpt or a GGUF file) becomes a .ms file without torch or an
ONNX export. The config's `model_type` picks the graph builder from model_zoo's registry; the builder emits the
graph in its final fused form, its matrices still in the checkpoint's files (DeferredArray); the writer reads,
encodes (float32 / bf16 / fp16 / int8 / int4) and writes them a block of rows at a time. Nothing of the model is
held in memory at once, and on any error no file is written."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from converter.ir import ConverterError, Graph

from .checkpoint import open_checkpoint

WEIGHT_FORMATS = ("float32", "bfloat16", "float16", "int8", "int4")


@dataclass
class CheckpointOptions:
    weight_format: str = "float32"     # how matrices are stored
    block_size: int = 16               # tokens per KV-cache block (decoders)
    kv_cache_dtype: str = "float32"    # decoders' cache element type
    group_size: int = 32               # int4: rows per scale block
    head: str | None = None            # the output: decoders "logits" (default) or "hidden" (last-token state);
                                       # encoders "masked_lm" or "hidden"; None: the family's default
    latent_shape: tuple[int, ...] | None = None   # generation transformers: (frames, height, width) of the latent
    text_len: int | None = None        # generation transformers with fixed text rows (FLUX): their count
    token_timesteps: bool = False      # Wan DiT: a timestep per token ([batch, tokens]: Wan 2.2 TI2V's expand_timesteps)
    rope_scale: tuple[float, ...] | None = None   # Kandinsky 5: the pipeline's (frame, row, column) RoPE divisors
    condition_shape: tuple[int, ...] | None = None   # Qwen-Image-Edit: ([1,] height, width) of the source image's
                                                      # latent, whose tokens follow the noise's

    def __post_init__(self):
        if self.weight_format not in WEIGHT_FORMATS:
            raise ConverterError(f"weight format must be one of {', '.join(WEIGHT_FORMATS)}, not "
                                 f"{self.weight_format!r}")
        if self.block_size <= 0 or self.group_size <= 0:
            raise ConverterError("block size and group size must be positive")


def build_graph(model_path: str, options: CheckpointOptions, config_file: str | None = None) -> tuple[Graph, object]:
    """The graph of the checkpoint at `model_path` and the open Checkpoint its constants read from (close it after
    writing)."""
    from model_zoo.registry import graph_builders

    weights, config = open_checkpoint(model_path, config_file)
    try:
        # a diffusers component (transformer/, vae/) names its class instead of a model_type
        model_type = config.get("model_type") or config.get("_class_name")
        builders = graph_builders()
        if model_type not in builders:
            raise ConverterError(f"model_type {model_type!r} has no graph builder in model_zoo's registry "
                                 f"(checkpoint architectures: {', '.join(sorted(builders))})")
        try:
            extra = {} if options.head is None else {"head": options.head}
            if options.latent_shape is not None:
                extra["latent_shape"] = tuple(options.latent_shape)
            if options.text_len is not None:
                extra["text_len"] = int(options.text_len)
            if options.token_timesteps:
                extra["token_timesteps"] = True
            if options.rope_scale is not None:
                extra["rope_scale"] = tuple(float(s) for s in options.rope_scale)
            if options.condition_shape is not None:
                extra["condition_shape"] = tuple(int(s) for s in options.condition_shape)
            graph = builders[model_type](config, weights, weight_format=options.weight_format,
                                         block_size=options.block_size, kv_cache_dtype=options.kv_cache_dtype,
                                         group_size=options.group_size, **extra)
        except (NotImplementedError, KeyError, ValueError) as e:
            raise ConverterError(f"{model_type} checkpoint: {e}") from e
    except BaseException:
        weights.close()
        raise
    graph.metadata["source_model"] = os.path.abspath(model_path)
    graph.metadata["source_format"] = weights.description
    graph.metadata["model_type"] = str(model_type)
    graph.metadata["config_json"] = json.dumps({k: v for k, v in config.items() if not k.startswith("_")},
                                               sort_keys=True, default=str)
    return graph, weights
