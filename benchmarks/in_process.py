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
