"""Dynamic-quant products (Context.cpu.dynamic_quant: int8/int4 weights, activations quantised to int8 on the fly) at
an LLM prompt's shapes, on this CPU's kernels against the same build capped at another ISA (LITE_CPU_ISA), in
interleaved rounds: e.g. the AMX tiles (cpu/gemm/dq_amx) against the AVX512-VNNI kernels on a Xeon with AMX.

    python -m benchmarks.dq_gemm --rows 512 --threads 1 --against avx512 --out benchmarks/results/dq_gemm_amx.md
    python -m benchmarks.dq_gemm --rows 16 64 512 --against native --against-tall integer   # int4 on bf16 tiles

Each product is one MatMul model (a Qwen2.5-0.5B layer's shapes: q/k/v 896 x 1152, o 896 x 896, gate/up 896 x 4864,
down 4864 x 896), seeded random weights quantised as lite's LLM recipes store them (int8: a scale per column; int4:
blocks of 32 rows), timed through Model.predict (the activations' quantisation and the float32 output included)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from .machine import cpu_name
from .results_io import publish

SHAPES = {"qkv": (896, 1152), "o": (896, 896), "gate/up": (896, 4864), "down": (4864, 896)}
STORAGE = {"int8": (8, 1, 0), "int4": (4, 0, 32)}   # bits, axis, group (symmetric)

# Runs in a child process (so LITE_CPU_ISA applies): times every model file given, prints {name: seconds}.
_CHILD = r"""
import json, sys, time
import numpy as np, lite
rows, threads, runs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out, models = {}, []
for spec in sys.argv[4:]:
    name, path, k = spec.split("|")
    c = lite.Context(); c.cpu.thread_num = threads; c.cpu.dynamic_quant = True
    m = lite.Model(); m.build_from_file(path, lite.ModelType.MINDIR_LITE, c)
    models.append((name, m, np.random.default_rng(0).standard_normal((rows, int(k))).astype(np.float32)))
for _, m, x in models * 2:   # every model warm (and the thread pool spun up) before any is timed
    m.predict({"x": x})
for name, m, x in models:
    times = []
    for _ in range(runs):
        t = time.perf_counter(); m.predict({"x": x}); times.append(time.perf_counter() - t)
    out[name] = float(np.median(times))
print(json.dumps(out))
"""


def make_models(work: str, rows: int) -> list[tuple[str, str, int, int]]:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lite"))
    from converter.quantization import decode, quantize
    from test_skinny_gemm import matmul_file

    rng = np.random.default_rng(0)
    models = []
    for storage, (bits, axis, group) in STORAGE.items():
        for shape, (k, n) in SHAPES.items():
            w = rng.standard_normal((k, n)).astype(np.float32)
            stored = quantize(w, bits, axis, group, True)
            path = os.path.join(work, f"{storage}_{k}x{n}_{rows}.ms")
            matmul_file(path, decode(stored, w.shape), stored, rows)
            models.append((f"{storage} {shape}", path, k, n))
    return models


def time_models(models, rows: int, threads: int, runs: int, isa: str | None, tall: str | None = None
                ) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("LITE_CPU_ISA", None)
    env.pop("LITE_DQ_TALL_PRODUCTS", None)
    if isa and isa != "native":
        env["LITE_CPU_ISA"] = isa
    if tall:
        env["LITE_DQ_TALL_PRODUCTS"] = tall
    specs = [f"{name}|{path}|{k}" for name, path, k, _ in models]
    out = subprocess.run([sys.executable, "-c", _CHILD, str(rows), str(threads), str(runs), *specs], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[512])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--against", default="avx512",
                    help="LITE_CPU_ISA of the comparison (avx512: no AMX; native: no cap)")
    ap.add_argument("--against-tall", help="LITE_DQ_TALL_PRODUCTS of the comparison (integer: int4 prompts "
                    "on integer kernels, not bf16 tiles)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    other = args.against + (f", LITE_DQ_TALL_PRODUCTS={args.against_tall}" if args.against_tall else "")
    label = args.against if not args.against_tall else args.against_tall
    lines = [f"# Dynamic-quant products: this CPU's kernels against LITE_CPU_ISA={other}",
             "", f"{cpu_name()}; `python -m benchmarks.dq_gemm`; median over {args.rounds} interleaved rounds of "
             f"the median of {args.runs} predicts (activation quantisation and the float32 output included); "
             "GOP/s = 2 x rows x K x N / time.", "",
             f"| product | K x N | rows | threads | native ms | {label} ms | native GOP/s | "
             f"{label} GOP/s | speed-up |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as work:
        for rows in args.rows:
            models = make_models(work, rows)
            for threads in args.threads:
                native, capped = [], []
                for _ in range(args.rounds):
                    native.append(time_models(models, rows, threads, args.runs, None))
                    capped.append(time_models(models, rows, threads, args.runs, args.against, args.against_tall))
                for name, _, k, n in models:
                    a = float(np.median([r[name] for r in native]))
                    b = float(np.median([r[name] for r in capped]))
                    ops = 2.0 * rows * k * n
                    lines.append(f"| {name} | {k} x {n} | {rows} | {threads} | {a * 1e3:.2f} | {b * 1e3:.2f} | "
                                 f"{ops / a / 1e9:.0f} | {ops / b / 1e9:.0f} | {b / a:.2f}x |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
