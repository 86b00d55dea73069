"""One graph of a checkpoint directory, converted on first use: `<stem>[_<weight format>].ms` beside the checkpoint
(converter_lite's checkpoint path with the family's `head`), then loaded. The pipelines that run several graphs of
one model (CLIP's towers, BLIP's image side and decoder, Qwen3-ASR's audio encoder, Whisper, FireRedASR, WeNet)
share it, and `load_graph` / `converted_weight_format` / `read_token_ids` below."""
from __future__ import annotations

import json
import os


def load_graph(path: str, threads: int = 1, precision_mode: str = "enforce_fp32"):
    """A .ms file loaded on the CPU with `threads` threads (and Context.cpu.precision_mode)."""
    from . import Context, Model, ModelType
    ctx = Context()
    ctx.cpu.thread_num = threads
    ctx.cpu.precision_mode = precision_mode
    model = Model()
    model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
    return model


def checkpoint_graph(model_dir: str, stem: str, head: str | None, weight_format: str = "float32", threads: int = 1,
                     precision_mode: str = "enforce_fp32"):
    path = os.path.join(model_dir, f"{stem}{'' if weight_format == 'float32' else '_' + weight_format}.ms")
    if not os.path.isfile(path):
        from converter.api import Converter, FmkType
        from converter.frontends.hf_frontend import CheckpointOptions
        Converter().convert(FmkType.HF, model_dir, path, verify_build=False,
                            checkpoint_options=CheckpointOptions(weight_format=weight_format, head=head))
    return load_graph(path, threads, precision_mode)


def converted_weight_format(model_dir: str, default: str = "float32") -> str:
    """The weight format `python -m model_zoo convert` wrote into the directory (model_zoo.json), else `default`."""
    manifest = os.path.join(model_dir, "model_zoo.json")
    if os.path.isfile(manifest):
        with open(manifest) as f:
            return json.load(f).get("weight_format") or default
    return default


def read_token_ids(path: str, what: str) -> dict[int, str]:
    """id -> token of a speech model's token list (FireRedASR's dict.txt, WeNet's units.txt: "token id" a line)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {what} '{path}' ({os.path.basename(path)}: a token and its id a line)")
    table = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"{path}:{n}: expected 'token id', got {line.strip()!r}")
            table[int(parts[1])] = parts[0]
    return table
