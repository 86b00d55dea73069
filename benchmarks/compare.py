"""Side-by-side latency: lite vs ONNX Runtime (CPU provider) on the same ONNX models, inputs and thread
counts, in one run. Each timing runs in its own subprocess, so one runtime's spinning worker threads
never steal cores from the other. Writes a Markdown table; ratios > 1 mean lite is faster.

    python benchmarks/compare.py [--threads 1 2] [--runs 50] [--out benchmarks/results/baseline.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import json
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import converter  # noqa: E402
import lite  # noqa: E402
from model_zoo.tiny import mlp, small_cnn  # noqa: E402


def encoder_block(path: str) -> None:
    import torch

    from model_zoo.tiny import torch_encoder_block
    block = torch_encoder_block(d=256, heads=4, ff=1024, with_mask=False)
    torch.onnx.export(block, (torch.randn(1, 128, 256),), path, input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)


def _zoo(name: str):
    """A full-size architecture from model_zoo (random weights), exported once into tests/.cache."""
    def build(path: str) -> None:
        import shutil

        from model_zoo.hf_tiny import export_onnx
        cache = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", ".cache")
        shutil.copy(export_onnx(name, cache), path)
    return build


MODELS = {
    "small_cnn b4 3x32x32": (lambda p: onnx.save(small_cnn(), p), {"x": (4, 3, 32, 32)}, "float32"),
    "mlp 64-128-128-10 b32": (lambda p: onnx.save(mlp(), p), {"x": (32, 64)}, "float32"),
    "encoder block d256 s128": (encoder_block, {"x": (1, 128, 256)}, "float32"),
    "ResNet-50 b1 224": (_zoo("resnet50"), {"pixel_values": (1, 3, 224, 224)}, "float32"),
    "BERT-base s128": (_zoo("bert_base"), {"input_ids": (1, 128), "attention_mask": (1, 128)}, "int64"),
}


def median_ms(fn, runs: int) -> float:
    for _ in range(max(3, runs // 10)):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_worker(runtime: str, path: str, feeds_path: str, threads: int, runs: int) -> None:
    """Runs in a subprocess: prints {"ms": median, "out": path of the first output}."""
    feeds = dict(np.load(feeds_path))
    if runtime == "lite":
        ctx = lite.Context()
        ctx.cpu.thread_num = threads
        model = lite.Model()
        model.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
        run = lambda: model.predict(feeds)[0].get_data_to_numpy()  # noqa: E731
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feeds)[0]  # noqa: E731
    out = feeds_path + f".{runtime}.npy"
    np.save(out, run())
    print(json.dumps({"ms": median_ms(run, runs), "out": out}))


def measure(runtime: str, path: str, feeds_path: str, threads: int, runs: int) -> tuple[float, np.ndarray]:
    proc = subprocess.run([sys.executable, __file__, "--worker", runtime, path, feeds_path, str(threads), str(runs)],
                          capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["ms"], np.load(result["out"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        runtime, path, feeds_path, threads, runs = sys.argv[2:7]
        time_worker(runtime, path, feeds_path, int(threads), int(runs))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", nargs="*", help="substrings of model names to run (default: all)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (build, shapes, dtype) in MODELS.items():
            if args.models and not any(m.lower() in name.lower() for m in args.models):
                continue
            path = os.path.join(tmp, "m.onnx")
            build(path)
            ms = converter.Converter().convert("ONNX", path, os.path.join(tmp, "m")).output_file
            feeds_path = os.path.join(tmp, "feeds.npz")
            if dtype == "int64":   # token ids and an all-ones mask
                feeds = {k: (rng.integers(0, 1000, s) if "ids" in k else np.ones(s)).astype(np.int64)
                         for k, s in shapes.items()}
            else:
                feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
            np.savez(feeds_path, **feeds)
            for threads in args.threads:
                lite_ms, lite_out = measure("lite", ms, feeds_path, threads, args.runs)
                ort_ms, ort_out = measure("ort", path, feeds_path, threads, args.runs)
                diff = float(np.abs(lite_out - ort_out).max())
                rows.append((name, threads, lite_ms, ort_ms, ort_ms / lite_ms, diff))
                print(f"{name:28s} t={threads} lite {lite_ms:8.3f} ms  ort {ort_ms:8.3f} ms  "
                      f"ratio {ort_ms / lite_ms:5.2f}  max|diff| {diff:.1e}", flush=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [f"Machine: {cpu}, {os.cpu_count()} cores; lite GEMM ISA: {lite._lite.gemm_isa()}; "
             f"onnxruntime {ort.__version__}; median of {args.runs} runs.", "",
             "| model | threads | lite ms | onnxruntime ms | speed ratio (ort/lite) | max abs diff |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {t} | {a:.3f} | {b:.3f} | {r:.2f} | {d:.1e} |" for n, t, a, b, r, d in rows]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
