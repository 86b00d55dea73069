"""Per layer, side by side: lite's per-node profile against OpenVINO's per-layer counters on one model, same
ONNX file, inputs and thread count. Where `benchmarks.compare` says how far apart two engines are, this says
which layers make the difference.

    python -m benchmarks.layers --model mobilenetv2 [--threads 1] [--precision f32|bf16|int8] [--runs 200]
                                [--out table.md]

--precision int8: lite's FULL_QUANT model against OpenVINO's NNCF int8 model (at its default precision), both
calibrated on the same samples as in benchmarks.int8 (8 seeded ones unless --calibration says otherwise).

lite: `Model.enable_profiling()`, the mean duration of each node over --runs predictions after warm-up (one clock
read per node). OpenVINO: `PERF_COUNT`, the mean `real_time` of each executed layer over the same number of
runs. OpenVINO names a Conv's layer after the ONNX node plus "/WithoutBiases" and fuses bias and activation into
it; those are matched to lite's node of the same name. Layers of one engine with no counterpart (OpenVINO's
layout reorders, lite's standalone nodes) are listed after the matched ones, so the totals are complete.
Profiling changes what it measures a little (a clock read per node; OpenVINO's counters): compare per-layer ratios,
and take whole-model figures from `benchmarks.compare`.
"""
from __future__ import annotations

import argparse
import collections
import os
import tempfile

from benchmarks.compare import (MODELS, PRECISION_VAR, compile_openvino, convert, load_lite, machine_line,
                                random_feeds)
from benchmarks.results_io import write_table

OPENVINO_SUFFIXES = ("/WithoutBiases",)


def mean_per_layer(run, layers, runs: int, warmup: int) -> dict[str, tuple]:
    """name -> (what, mean ms) over `runs` calls of run() after `warmup`; layers() yields (name, what, ms) of the
    last call."""
    for _ in range(warmup):
        run()
    total: dict[str, float] = collections.defaultdict(float)
    what: dict[str, object] = {}
    for _ in range(runs):
        run()
        for name, kind, ms in layers():
            total[name] += ms
            what[name] = kind
    return {name: (what[name], ms / runs) for name, ms in total.items()}


def lite_layers(ms_path: str, feeds: dict, threads: int, bf16: bool, runs: int, warmup: int) -> dict[str, tuple]:
    """node name -> ((op type, kernel), mean ms) over `runs` profiled predictions; the kernel is the implementation
    lite's profile names (e.g. "winograd_f4x4"), "-" where the operator has one."""
    model = load_lite(ms_path, threads, bf16)
    model.enable_profiling()
    return mean_per_layer(lambda: model.predict(feeds),
                          lambda: ((p["name"], (p["op"], p["kernel"] or "-"), p["duration_us"] / 1e3)
                                   for p in model.last_profile()),
                          runs, warmup)


def openvino_layers(model_path: str, feeds: dict, threads: int, bf16: bool, runs: int, warmup: int,
                    default_precision: bool = False) -> dict[str, tuple]:
    """layer name -> (layer type, exec type, mean ms) over `runs` inferences, executed layers only."""
    request = compile_openvino(model_path, threads, bf16, perf_count=True,
                               default_precision=default_precision).create_infer_request()
    executed = lambda: ((p.node_name, (p.node_type, p.exec_type), p.real_time.total_seconds() * 1e3)  # noqa: E731
                        for p in request.profiling_info if p.status == p.Status.EXECUTED)
    layers = mean_per_layer(lambda: request.infer(feeds), executed, runs, warmup)
    return {name: (*kind, ms) for name, (kind, ms) in layers.items()}


def match(lite: dict[str, tuple], openvino: dict[str, tuple]) -> tuple[list, list, list]:
    """(matched rows (name, op, lite ms, OpenVINO ms, OpenVINO kernel, lite kernel), lite-only (name, op, lite ms, lite
    kernel), OpenVINO-only), in lite's order."""
    by_name = {}
    for name in openvino:
        base = name
        for suffix in OPENVINO_SUFFIXES:
            if base.endswith(suffix):
                base = base[:-len(suffix)]
        by_name.setdefault(base, []).append(name)
    matched, lite_only, used = [], [], set()
    for name, ((op, kernel), ms) in lite.items():
        names = by_name.get(name, [])
        if not names:
            lite_only.append((name, op, ms, kernel))
            continue
        used.update(names)
        matched.append((name, op, ms, sum(openvino[n][2] for n in names), openvino[names[0]][1], kernel))
    openvino_only = [(n, t, e, ms) for n, (t, e, ms) in openvino.items() if n not in used]
    return matched, lite_only, openvino_only


def render(title: str, threads: int, precision: str, runs: int, matched: list, lite_only: list,
           openvino_only: list) -> str:
    lines = [machine_line(), "",
             f"{title}, {threads} thread(s), {precision}; mean ms per layer over {runs} profiled runs; "
             "'lite / OV' > 1: lite's layer is slower.", "",
             "| layer | op | lite ms | OpenVINO ms | lite / OV | lite kernel | OpenVINO kernel |",
             "|---|---|---|---|---|---|---|"]
    for name, op, ms, ov_ms, kernel, lite_kernel in matched:
        ratio = f"{ms / ov_ms:.2f}" if ov_ms > 0 else "-"
        lines.append(f"| {name} | {op} | {ms:.4f} | {ov_ms:.4f} | {ratio} | {lite_kernel} | {kernel} |")
    for name, op, ms, lite_kernel in lite_only:
        lines.append(f"| {name} | {op} | {ms:.4f} | - | - | {lite_kernel} | (lite only) |")
    for name, kind, kernel, ms in openvino_only:
        lines.append(f"| {name} | {kind} | - | {ms:.4f} | - | - | {kernel} (OpenVINO only) |")
    lite_total = sum(r[2] for r in matched) + sum(r[2] for r in lite_only)
    ov_total = sum(r[3] for r in matched) + sum(r[3] for r in openvino_only)
    lines += ["", f"Sum of layers: lite {lite_total:.3f} ms, OpenVINO {ov_total:.3f} ms "
                  f"({lite_total / ov_total:.2f}); {len(matched)} layers matched, {len(lite_only)} lite only, "
                  f"{len(openvino_only)} OpenVINO only."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, choices=list(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", choices=["f32", "bf16", "int8"], default="f32")
    ap.add_argument("--calibration", type=int, default=8, help="int8: calibration samples for both quantisers")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default=None, help="write the Markdown table here (atomically)")
    args = ap.parse_args()
    try:
        import openvino  # noqa: F401
    except ImportError:
        ap.error("OpenVINO is not installed (pip install -r benchmarks/requirements.txt)")
    os.environ[PRECISION_VAR] = "f32" if args.precision == "int8" else args.precision
    bf16 = args.precision == "bf16"
    title, build = MODELS[args.model]
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, f"{args.model}.onnx")
        shapes = build(onnx_path)
        feeds = random_feeds(shapes, 0)
        if args.precision == "int8":
            from benchmarks.int8 import calibration_samples, lite_models, openvino_models
            samples = calibration_samples(shapes, args.calibration)
            ms_path = lite_models(onnx_path, shapes, samples, tmp, args.model)["lite FULL_QUANT"]
            ov_models = openvino_models(onnx_path, samples, tmp, args.model)
            if not ov_models:
                ap.error("--precision int8 needs nncf (pip install -r benchmarks/requirements.txt)")
            ov_path = ov_models["OV int8"]
        else:
            ms_path, ov_path = convert(onnx_path, os.path.join(tmp, args.model), shapes), onnx_path
        lite = lite_layers(ms_path, feeds, args.threads, bf16, args.runs, args.warmup)
        openvino = openvino_layers(ov_path, feeds, args.threads, bf16, args.runs, args.warmup,
                                   default_precision=args.precision == "int8")
    text = render(title, args.threads, args.precision, args.runs, *match(lite, openvino))
    print(text)
    if args.out:
        write_table(args.out, text)


if __name__ == "__main__":
    main()
