"""docs/model_zoo.md, generated from the registry (`python -m model_zoo docs`; a test fails when it is stale)."""
from __future__ import annotations

import os

from .registry import CATEGORIES, CATEGORY_TITLES, entries

DOC_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "model_zoo.md")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render() -> str:
    all_entries = entries()
    out = ["# Model zoo", "",
           "Generated from the registry (`model_zoo/families/`, one module per family) by `python -m model_zoo docs`;",
           "do not edit by hand. A model is `supported` when a test converts a tiny configuration of it from a",
           "checkpoint with seeded random weights and matches its PyTorch reference; `planned` rows say what they lack.",
           "Full-size configurations are transcribed from published configs (each entry names its source; model hubs",
           "are not reachable from the build machines).", "",
           "Convert and run a supported model:", "",
           "```",
           "python -m model_zoo convert Qwen2.5-0.5B --checkpoint ./Qwen2.5-0.5B --output ./qwen25 --precision int4",
           "python -m model_zoo run Qwen2.5-0.5B --model ./qwen25 --prompt \"Hello\"",
           "converter_lite --fmk=HF --modelFile=./Qwen2.5-0.5B --outputFile=qwen25 --weightPrecision=int4",
           "```", "",
           "| category | models | supported | planned |", "|---|---:|---:|---:|"]
    for c in CATEGORIES:
        rows = [e for e in all_entries if e.category == c]
        sup = sum(e.status == "supported" for e in rows)
        out.append(f"| {CATEGORY_TITLES[c]} | {len(rows)} | {sup} | {len(rows) - sup} |")
    sup = sum(e.status == "supported" for e in all_entries)
    out.append(f"| **all** | {len(all_entries)} | {sup} | {len(all_entries) - sup} |")
    for c in CATEGORIES:
        out += ["", f"## {CATEGORY_TITLES[c]}", "",
                "| model | size | architecture | graphs | pipeline | status | proved by / missing |",
                "|---|---|---|---|---|---|---|"]
        for e in entries(c):
            why = f"`{e.test}`" if e.status == "supported" else e.missing
            out.append(f"| {_cell(e.name)} | {_cell(e.parameters)} | {_cell(e.architecture)} | "
                       f"{', '.join(e.graphs)} | {e.pipeline} | {e.status} | {_cell(why)} |")
    return "\n".join(out) + "\n"
