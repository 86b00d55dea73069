"""One graph of a checkpoint directory, converted on first use: `<stem>[_<weight format>].ms` beside the checkpoint
(converter_lite's checkpoint path with the family's `head`), then loaded. The pipelines that run several graphs of
one model (CLIP's towers, BLIP's image side and decoder, Qwen3-ASR's audio encoder) share it."""
from __future__ import annotations

import os


def checkpoint_graph(model_dir: str, stem: str, head: str | None, weight_format: str = "float32", threads: int = 1):
    from . import Context, Model, ModelType
    path = os.path.join(model_dir, f"{stem}{'' if weight_format == 'float32' else '_' + weight_format}.ms")
    if not os.path.isfile(path):
        from converter.api import Converter, FmkType
        from converter.frontends.hf_frontend import CheckpointOptions
        Converter().convert(FmkType.HF, model_dir, path, verify_build=False,
                            checkpoint_options=CheckpointOptions(weight_format=weight_format, head=head))
    ctx = Context()
    ctx.cpu.thread_num = threads
    model = Model()
    model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
    return model
