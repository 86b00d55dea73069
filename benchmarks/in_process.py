"""Timing for the benchmarks whose peers run in this process (PyTorch beside lite: benchmarks.pi05, .openvla):
each engine's calls warmed once, then alternated round by round (the order reversed every other round, so neither
engine always runs right after the other's caches were filled)."""
from __future__ import annotations

import time
from typing import Callable, Sequence


def timed(fn: Callable) -> tuple[float, object]:
    """(milliseconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1e3, out


def alternate(runs: dict[str, Sequence[Callable]], rounds: int) -> tuple[dict[str, list[list[float]]], dict]:
    """runs: engine -> its calls (e.g. (prefix, act)). Returns (engine -> per call the ms of each round, engine -> the
    warm-up result of its last call)."""
    outs = {}
    for name, calls in runs.items():
        for fn in calls:
            outs[name] = fn()
    times = {name: [[] for _ in calls] for name, calls in runs.items()}
    for r in range(rounds):
        for name in list(runs)[::1 if r % 2 == 0 else -1]:
            for k, fn in enumerate(runs[name]):
                times[name][k].append(timed(fn)[0])
    return times, outs


def arguments(doc: str):
    """--threads, --rounds, --out: what the in-process benchmarks take."""
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    return ap.parse_args()


def convert_heads(ckpt: str, heads: dict[str, str], formats: Sequence[str]) -> None:
    """Each of a checkpoint's graphs (file stem -> converter head) in each weight format, beside the checkpoint, as the
    pipelines look for them (<stem>[_<format>].ms)."""
    import os

    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    for fmt in formats:
        suffix = "" if fmt == "float32" else "_" + fmt
        for stem, head in heads.items():
            Converter().convert(FmkType.HF, ckpt, os.path.join(ckpt, f"{stem}{suffix}.ms"), verify_build=False,
                                checkpoint_options=CheckpointOptions(weight_format=fmt, head=head))
