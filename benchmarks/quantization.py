"""Compressed weight storage: file size, accuracy, conversion time and load/run time of each storage mode
against float32, per model, all in lite.

    python -m benchmarks.quantization [--models resnet50 mobilenetv2 bert_base qwen2_decoder]
                                      [--threads 1] [--runs 10] [--calibration 8]
                                      [--out benchmarks/results/quant_weights.md]

Modes: float32; --fp16=on; WEIGHT_QUANT int8 per output channel (symmetric, and asymmetric: a zero point per
channel, so the codes span the channel's own [min, max]); int4 in blocks of 128 along the reduction
axis (transformers; CNN layers have 9-1152 values per channel, so int4 is left to them only at group 32); each
integer mode both rounded to nearest (RTN) and with algorithm=GPTQ on --calibration seeded samples.
Accuracy: cosine and max abs error of each output against the float32 model, both run in lite, on 4 held-back
seeded inputs (seeds 0, 1000-1002; calibration uses seeds 1..N; images: standard normal; token ids: uniform in
[0, 1000); attention masks: ones); the worst output is shown. Latency is the median of --runs predictions in
one process per file, after two warm-up runs; the runtime decodes int8-per-column and float16 MatMul weights
block by block in the GEMM (a few percent slower than float32, far less memory) and other compressed weights
to float32 at load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.compare import MODELS, cosine, machine_line, random_feeds
from benchmarks.results_io import write_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELD_BACK_SEEDS = (0, 1000, 1001, 1002)

INT8 = "[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=8\nmin_quant_weight_channel=1\n[weight_quant_param]\n"
INT4 = "[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=4\nmin_quant_weight_channel=1\n[weight_quant_param]\n"
GPTQ = "algorithm=GPTQ\n"
MODES = {
    "float32": None,
    "fp16": "fp16",
    "int8 per channel": INT8,
    "int8 per channel GPTQ": INT8 + GPTQ,
    "int8 per channel asymmetric": INT8 + "symmetric=false\n",
    "int8 per channel asymmetric GPTQ": INT8 + "symmetric=false\n" + GPTQ,
    "int4 group 128": INT4 + "group_size=128\n",
    "int4 group 128 GPTQ": INT4 + "group_size=128\n" + GPTQ,
    "int4 group 32": INT4 + "group_size=32\n",
    "int4 group 32 GPTQ": INT4 + "group_size=32\n" + GPTQ,
}
CNNS = ("resnet50", "mobilenetv2")


def applies(mode: str, key: str) -> bool:
    if "group 32" in mode:
        return key in CNNS
    if "group 128" in mode:
        return key not in CNNS
    return True


def worst_output(got: list[np.ndarray], ref: list[np.ndarray]) -> tuple[float, float, float]:
    """(cosine, max abs error, max abs reference) of the output with the lowest cosine."""
    rows = []
    for g, r in zip(got, ref):
        rows.append((cosine(g, r), float(np.abs(g - r).max(initial=0.0)), float(np.abs(r).max(initial=0.0))))
    return min(rows)


def measure(path: str, samples: list[dict], threads: int, runs: int) -> tuple[float, float, list[np.ndarray]]:
    """Load ms, median run ms on the first sample, and each output over all samples (flattened), one model."""
    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    t0 = time.perf_counter()
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    load = (time.perf_counter() - t0) * 1e3
    for _ in range(2):
        m.predict(samples[0])
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        m.predict(samples[0])
        ts.append((time.perf_counter() - t) * 1e3)
    values = [[t.get_data_to_numpy().astype(np.float64).ravel() for t in m.predict(f)] for f in samples]
    return load, statistics.median(ts), [np.concatenate(v) for v in zip(*values)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["resnet50", "mobilenetv2", "bert_base", "qwen2_decoder"],
                    choices=list(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import converter
    lines = [machine_line(), "",
             f"lite only; {args.threads} thread(s); latency: median of {args.runs} runs after 2 warm-up runs; accuracy: "
             f"against the float32 model on {len(HELD_BACK_SEEDS)} held-back seeded inputs (worst output); GPTQ "
             f"calibrated on {args.calibration} other seeded inputs; convert s: the whole conversion.", "",
             "| model | storage | file MB | size vs float32 | cosine | 1 - cosine | max abs error (max abs output) | "
             "convert s | load ms | run ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models:
            title, build = MODELS[key]
            onnx_path = os.path.join(tmp, f"{key}.onnx")
            shapes = build(onnx_path)
            held = [random_feeds(shapes, seed) for seed in HELD_BACK_SEEDS]
            calibration = []
            for name in shapes:
                directory = os.path.join(tmp, f"cal_{key}_{name}")
                os.makedirs(directory)
                for seed in range(1, args.calibration + 1):
                    np.save(os.path.join(directory, f"{seed:03d}.npy"), random_feeds(shapes, seed)[name])
                calibration.append(f"{name}:{directory}")
            calibrate = f"[data_preprocess_param]\ncalibrate_path={','.join(calibration)}\ninput_type=NPY\n"
            spec = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
            float_size, reference = None, None
            for n, (mode, setting) in enumerate(MODES.items()):
                if not applies(mode, key):
                    continue
                kwargs = {}
                if setting == "fp16":
                    kwargs["fp16"] = True
                elif setting:
                    cfg = os.path.join(tmp, "q.cfg")
                    with open(cfg, "w") as f:
                        f.write(setting + (calibrate if "GPTQ" in setting else ""))
                    kwargs["config_file"] = cfg
                t0 = time.perf_counter()
                r = converter.Converter().convert("ONNX", onnx_path, os.path.join(tmp, f"{key}_{n}"),
                                                  input_shape=spec, **kwargs)
                convert_s = time.perf_counter() - t0
                load, run, got = measure(r.output_file, held, args.threads, args.runs)
                if float_size is None:
                    float_size, reference = r.file_bytes, got
                cos, err, ref_max = worst_output(got, reference)
                lines.append(f"| {title} | {mode} | {r.file_bytes / 1e6:.1f} | {r.file_bytes / float_size:.3f} | "
                             f"{cos:.6f} | {max(0.0, 1 - cos):.2e} | {err:.3g} ({ref_max:.3g}) | {convert_s:.1f} | {load:.0f} | "
                             f"{run:.1f} |")
                print(lines[-1], flush=True)
    if args.out:
        write_table(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
