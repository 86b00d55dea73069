"""The architecture rows of ultralytics' model yamls (ultralytics/cfg/models/v8/yolov8.yaml and v10/yolov10{n,x}.yaml),
transcribed as dicts: [from, repeats, module, args] per layer, with their scales. A checkpoint carries its own yaml
(the pickled model's `yaml` attribute); these serve the tests, the benchmark and a state dict saved without one."""
from __future__ import annotations

import copy

_V8_BACKBONE = [[-1, 1, "Conv", [64, 3, 2]], [-1, 1, "Conv", [128, 3, 2]], [-1, 3, "C2f", [128, True]],
                [-1, 1, "Conv", [256, 3, 2]], [-1, 6, "C2f", [256, True]], [-1, 1, "Conv", [512, 3, 2]],
                [-1, 6, "C2f", [512, True]], [-1, 1, "Conv", [1024, 3, 2]], [-1, 3, "C2f", [1024, True]],
                [-1, 1, "SPPF", [1024, 5]]]
_V8_HEAD = [[-1, 1, "nn.Upsample", [None, 2, "nearest"]], [[-1, 6], 1, "Concat", [1]], [-1, 3, "C2f", [512]],
            [-1, 1, "nn.Upsample", [None, 2, "nearest"]], [[-1, 4], 1, "Concat", [1]], [-1, 3, "C2f", [256]],
            [-1, 1, "Conv", [256, 3, 2]], [[-1, 12], 1, "Concat", [1]], [-1, 3, "C2f", [512]],
            [-1, 1, "Conv", [512, 3, 2]], [[-1, 9], 1, "Concat", [1]], [-1, 3, "C2f", [1024]],
            [[15, 18, 21], 1, "Detect", ["nc"]]]
YOLOV8 = {"nc": 80, "scales": {"n": [0.33, 0.25, 1024], "s": [0.33, 0.50, 1024], "m": [0.67, 0.75, 768],
                               "l": [1.00, 1.00, 512], "x": [1.00, 1.25, 512]},
          "backbone": _V8_BACKBONE, "head": _V8_HEAD}


def _v10(block: str) -> dict:
    """yolov10n (block C2f) / yolov10x (C2fCIB): the block at backbone P4 and P5 and at the head's P4 rows; the
    head's P5 C2fCIB has large-kernel CIBs (RepVGGDW) in yolov10n only."""
    head_args = [512, True] if block == "C2fCIB" else [512]
    top_args = [1024, True] if block == "C2fCIB" else [1024, True, True]
    backbone = [[-1, 1, "Conv", [64, 3, 2]], [-1, 1, "Conv", [128, 3, 2]], [-1, 3, "C2f", [128, True]],
                [-1, 1, "Conv", [256, 3, 2]], [-1, 6, "C2f", [256, True]], [-1, 1, "SCDown", [512, 3, 2]],
                [-1, 6, block, [512, True]], [-1, 1, "SCDown", [1024, 3, 2]], [-1, 3, block, [1024, True]],
                [-1, 1, "SPPF", [1024, 5]], [-1, 1, "PSA", [1024]]]
    head = [[-1, 1, "nn.Upsample", [None, 2, "nearest"]], [[-1, 6], 1, "Concat", [1]], [-1, 3, block, head_args],
            [-1, 1, "nn.Upsample", [None, 2, "nearest"]], [[-1, 4], 1, "Concat", [1]], [-1, 3, "C2f", [256]],
            [-1, 1, "Conv", [256, 3, 2]], [[-1, 13], 1, "Concat", [1]], [-1, 3, block, head_args],
            [-1, 1, "SCDown", [512, 3, 2]], [[-1, 10], 1, "Concat", [1]], [-1, 3, "C2fCIB", top_args],
            [[16, 19, 22], 1, "v10Detect", ["nc"]]]
    return {"backbone": backbone, "head": head}


YOLOV10N = {"nc": 80, "scales": {"n": [0.33, 0.25, 1024]}, **_v10("C2f")}
YOLOV10X = {"nc": 80, "scales": {"x": [1.00, 1.25, 512]}, **_v10("C2fCIB")}


def scaled_yaml(base: dict, scale: str, **changes) -> dict:
    """A copy of `base` at one of its scales (or with explicit `scales`, `nc` ... in `changes`)."""
    d = copy.deepcopy(base)
    d["scale"] = scale
    d.update(changes)
    return d
