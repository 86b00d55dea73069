"""The layer list of an ultralytics model yaml, as ultralytics' parse_model reads it: each row [from, repeats,
module, args]; repeats scale by depth_multiple (rounded, at least 1); the channel modules' output width is capped at
max_channels, scaled by width_multiple and rounded up to a multiple of 8 (a width equal to the class count is kept);
C2f / C2fCIB take the repeat count as their bottleneck count. Shared by the graph builder and the PyTorch reference."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CHANNEL_MODULES = {"Conv", "C2f", "SPPF", "SCDown", "C2fCIB", "PSA"}
REPEATED_INSIDE = {"C2f", "C2fCIB"}
HEADS = {"Detect", "v10Detect"}
KNOWN = CHANNEL_MODULES | HEADS | {"Concat", "nn.Upsample"}


@dataclass(frozen=True)
class LayerRow:
    index: int
    source: int | list[int]      # -1: the previous layer; a list: several (Concat, the head)
    repeats: int                 # copies of the module in sequence (1 for C2f-style modules)
    module: str
    args: list[Any]              # constructor arguments: (c1, c2, ...) for channel modules, (nc, (ch...)) for heads
    channels: int                # output channels


def make_divisible(x: float, divisor: int = 8) -> int:
    return int(math.ceil(x / divisor) * divisor)


def scales(model_yaml: dict) -> tuple[float, float, float]:
    """(depth_multiple, width_multiple, max_channels): the `scale` row of `scales` (the first when unnamed), else the
    yaml's explicit multiples."""
    table, scale = model_yaml.get("scales"), model_yaml.get("scale")
    if table:
        d, w, mc = table[scale] if scale in table else next(iter(table.values()))
        return float(d), float(w), float(mc)
    return (float(model_yaml.get("depth_multiple", 1.0)), float(model_yaml.get("width_multiple", 1.0)),
            float(model_yaml.get("max_channels", math.inf)))


def layer_rows(model_yaml: dict, in_channels: int = 3) -> list[LayerRow]:
    try:
        nc = int(model_yaml["nc"])
        rows = list(model_yaml["backbone"]) + list(model_yaml["head"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not an ultralytics model yaml (needs nc, backbone and head): {e}") from None
    depth, width, max_channels = scales(model_yaml)
    ch: list[int] = [in_channels]
    out = []
    for i, row in enumerate(rows):
        f, n, m, args = row
        if m not in KNOWN:
            raise NotImplementedError(f"layer {i}: ultralytics module {m!r} is not supported (supported: "
                                      f"{', '.join(sorted(KNOWN))})")
        args = [nc if a == "nc" else a for a in args]
        n = max(round(n * depth), 1) if n > 1 else n
        if m in CHANNEL_MODULES:
            c1, c2 = ch[f], args[0]
            c2 = make_divisible(min(c2, max_channels) * width, 8) if c2 != nc else c2
            args = [c1, c2, *args[1:]]
            if m in REPEATED_INSIDE:
                args.insert(2, n)
                n = 1
        elif m == "Concat":
            c2 = sum(ch[x] for x in f)
        elif m in HEADS:
            args = [args[0], tuple(ch[x] for x in f)]
            c2 = ch[f[-1]]
        else:
            c2 = ch[f]
        out.append(LayerRow(i, f, n, m, args, c2))
        ch = ch[1:] if i == 0 else ch
        ch.append(c2)
    return out
