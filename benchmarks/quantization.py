"""Compressed weight storage: file size, accuracy and load/run time of each storage mode against float32,
per model, all in lite.

    python -m benchmarks.quantization [--models resnet50 mobilenetv2 bert_base qwen2_decoder]
                                      [--threads 1] [--runs 10] [--out benchmarks/results/quant_weights.md]

Modes: float32; --fp16=on; WEIGHT_QUANT int8 per output channel; int4 in blocks of 128 along the reduction
axis (transformers; CNN layers have 9-1152 values per channel, so int4 is left to them only at group 32).
Accuracy is the converter's own report: cosine and errors of each output against the float32 model on the
same seeded inputs (images: standard normal; token ids: uniform in [0, 1000); attention masks: ones).
Latency is the median of --runs predictions in one process per file, after two warm-up runs; the runtime
decodes int8-per-column and float16 MatMul weights block by block in the GEMM (a few percent slower than
float32, far less memory) and other compressed weights to float32 at load.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.compare import MODELS, machine_line, make_feeds
from benchmarks.results_io import write_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = {
    "float32": None,
    "fp16": "fp16",
    "int8 per channel": "[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=8\nmin_quant_weight_channel=1\n",
    "int4 group 128": ("[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=4\nmin_quant_weight_channel=1\n"
                       "[weight_quant_param]\ngroup_size=128\n"),
    "int4 group 32": ("[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=4\nmin_quant_weight_channel=1\n"
                      "[weight_quant_param]\ngroup_size=32\n"),
}


def time_model(path: str, feeds: dict, threads: int, runs: int) -> tuple[float, float]:
    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    t0 = time.perf_counter()
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    load = (time.perf_counter() - t0) * 1e3
    for _ in range(2):
        m.predict(feeds)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        m.predict(feeds)
        ts.append((time.perf_counter() - t) * 1e3)
    return load, statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["resnet50", "mobilenetv2", "bert_base", "qwen2_decoder"],
                    choices=list(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import converter
    lines = [machine_line(), "",
             f"lite only; {args.threads} thread(s); latency: median of {args.runs} runs after 2 warm-up runs; accuracy: "
             "the converter's report against the float32 model on 4 seeded samples (worst output).", "",
             "| model | storage | file MB | size vs float32 | cosine | max abs error (max abs output) | load ms | run ms |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models:
            title, build = MODELS[key]
            onnx_path = os.path.join(tmp, f"{key}.onnx")
            shapes = build(onnx_path)
            feeds_path = os.path.join(tmp, f"{key}_feeds.npz")
            make_feeds(shapes, feeds_path)
            feeds = dict(np.load(feeds_path))
            spec = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
            float_size = None
            for mode, setting in MODES.items():
                if mode == "int4 group 32" and key not in ("resnet50", "mobilenetv2"):
                    continue
                if mode == "int4 group 128" and key in ("resnet50", "mobilenetv2"):
                    continue
                kwargs = {}
                if setting == "fp16":
                    kwargs["fp16"] = True
                elif setting:
                    cfg = os.path.join(tmp, "q.cfg")
                    with open(cfg, "w") as f:
                        f.write(setting)
                    kwargs["config_file"] = cfg
                r = converter.Converter().convert("ONNX", onnx_path, os.path.join(tmp, f"{key}_{len(kwargs)}"),
                                                  input_shape=spec, **kwargs)
                load, run = time_model(r.output_file, feeds, args.threads, args.runs)
                if float_size is None:
                    float_size = r.file_bytes
                if r.quant_report and "outputs" in r.quant_report:
                    worst = min(r.quant_report["outputs"], key=lambda o: o["cosine"])
                    acc = f"{worst['cosine']:.6f}", f"{worst['max_abs_error']:.3g} ({worst['max_abs_reference']:.3g})"
                else:
                    acc = "1", "0"
                lines.append(f"| {title} | {mode} | {r.file_bytes / 1e6:.1f} | {r.file_bytes / float_size:.3f} | "
                             f"{acc[0]} | {acc[1]} | {load:.0f} | {run:.1f} |")
                print(lines[-1], flush=True)
    if args.out:
        write_table(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
