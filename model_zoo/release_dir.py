"""A converted model directory written from a project's own release layout (FireRedASR's model.pth.tar, WeNet's
final.pt: no transformers config.json): each graph as `<stem>[_<weight format>].ms`, the config the graphs were built
from as config.json (written atomically), and the release's front-end / tokenizer files copied beside them."""
from __future__ import annotations

import json
import os
import shutil
from typing import Callable, Mapping, Sequence


def write_release(output: str, config: Mapping, graphs: Sequence[tuple[str, Callable]], checkpoint: str,
                  side_files: Sequence[str], weight_format: str = "float32") -> list[str]:
    """`graphs`: (stem, a function building the Graph); returns the written .ms paths in that order."""
    from converter.runtime_check import check_runtime_kernels
    from converter.writer import write_ms
    os.makedirs(output, exist_ok=True)
    suffix = "" if weight_format == "float32" else f"_{weight_format}"
    paths = []
    for stem, build in graphs:
        graph = build()
        check_runtime_kernels(graph)
        paths.append(write_ms(graph, os.path.join(output, f"{stem}{suffix}.ms")).path)
    tmp = os.path.join(output, "config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(dict(config), f, indent=1)
    os.replace(tmp, os.path.join(output, "config.json"))
    for name in side_files:
        src = os.path.join(checkpoint, name)
        if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(output, name)):
            shutil.copyfile(src, os.path.join(output, name))
    return paths
