"""lite beside the mobile runtimes it competes with, MNN and ncnn (and ONNX Runtime), on the same ONNX models, inputs
and thread counts, in one interleaved run (benchmarks.compare's workers): the script for an ARM64 machine (issue 39),
which runs as well on x86.

    pip install --no-deps mnn==3.6.1 ncnn==1.0.20261020 pnnx==20261020     # aarch64 and x86-64 wheels on PyPI
    python -m benchmarks.mobile_peers [--models mobilenetv2 resnet50] [--threads 1 2 4] [--precision f32 f16]
                                      [--rounds 10] [--out benchmarks/results/mobile_peers_<machine>.md]

Each model is exported once (model_zoo's architectures, seeded random weights) and converted by each engine's own
tool: lite's converter (.ms), MNN's `mnnconvert` (.mnn) and ncnn's `pnnx` (.ncnn.param / .bin, with the input shape
fixed). Precisions: f32 (MNN `precision: high`, ncnn's fp16 / bf16 options off) and f16 (lite `preferred_fp16`: float16
arithmetic on ARMv8.2 FP16 and AVX512-FP16; MNN `precision: low`; ncnn fp16 packed / storage / arithmetic), where each
engine computes in float16 only if the CPU has it (f16 on a CPU without it measures the same float32 paths again).
ONNX Runtime stays float32 and is the reference for the outputs' differences. On a phone, pin the process to the big
cores first (`taskset`), as benchmark_lite's `--cpuBindMode` would.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchmarks import compare
from benchmarks.results_io import publish

MODELS = ("mobilenetv2", "resnet50")
# (engine, file suffix): the engines besides lite and ONNX Runtime, when their packages are installed
PEERS = {"mnn": "MNN", "ncnn": "ncnn"}


def installed_peers() -> list[str]:
    found = []
    for engine, module in PEERS.items():
        try:
            __import__(module)
        except ImportError:
            continue
        tool = "mnnconvert" if engine == "mnn" else "pnnx"
        if shutil.which(tool) or os.path.exists(os.path.join(os.path.dirname(sys.executable), tool)):
            found.append(engine)
    return found


def _tool(name: str) -> str:
    return shutil.which(name) or os.path.join(os.path.dirname(sys.executable), name)


def convert_mnn(onnx_path: str, out: str) -> str:
    path = out + ".mnn"
    p = subprocess.run([_tool("mnnconvert"), "-f", "ONNX", "--modelFile", onnx_path, "--MNNModel", path,
                        "--bizCode", "lite"], capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"mnnconvert failed on {onnx_path}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return path


def convert_ncnn(onnx_path: str, shapes: dict[str, tuple]) -> str:
    """pnnx writes NAME.ncnn.param / .bin (and intermediates) beside the ONNX file; the shapes fixed as given."""
    spec = ",".join("[" + ",".join(map(str, s)) + "]" for s in shapes.values())
    p = subprocess.run([_tool("pnnx"), onnx_path, f"inputshape={spec}"], capture_output=True, text=True,
                       cwd=os.path.dirname(onnx_path))
    param = onnx_path[: -len(".onnx")] + ".ncnn.param"
    if p.returncode != 0 or not os.path.exists(param):
        raise RuntimeError(f"pnnx failed on {onnx_path}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return param


def versions() -> str:
    out = []
    for engine, module in PEERS.items():
        try:
            m = __import__(module)
            v = m.version() if engine == "mnn" else m.__version__
            out.append(f"{engine} {v}")
        except ImportError:
            out.append(f"{engine} not installed")
    return ", ".join(out)


def run(args, engines: list[str], tmp: str) -> list[str]:
    others = [e for e in engines if e != "lite"]
    summary = ["| model | precision | threads | " + " | ".join(f"{e} ms" for e in engines) + " | " +
               " | ".join(f"lite / {e}" for e in others) + " |",
               "|---|---|---|" + "---:|" * (len(engines) + len(others))]
    detail = ["| model | precision | threads | engine | median ms | p90 ms | load ms | peak RSS MB | "
              "max abs diff vs ORT float32 (max abs output) | cosine vs ORT |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key in args.models:
        title, build = compare.MODELS[key]
        onnx_path = os.path.join(tmp, f"{key}.onnx")
        shapes = build(onnx_path)
        paths = {"lite": compare.convert(onnx_path, os.path.join(tmp, key), shapes), "onnxruntime": onnx_path}
        if "mnn" in engines:
            paths["mnn"] = convert_mnn(onnx_path, os.path.join(tmp, key))
        if "ncnn" in engines:
            paths["ncnn"] = convert_ncnn(onnx_path, shapes)
        feeds_path = os.path.join(tmp, f"{key}_feeds.npz")
        compare.make_feeds(shapes, feeds_path)
        for precision in args.precision:
            os.environ[compare.PRECISION_VAR] = precision
            for threads in args.threads:
                ws = compare.measure(engines, paths, feeds_path, threads, args.rounds, args.batch, args.pause)
                med = {e: statistics.median(w.times) for e, w in ws.items()}
                ref = ws["onnxruntime"].out
                for e, w in ws.items():
                    detail.append(f"| {title} | {precision} | {threads} | {e} | {med[e]:.2f} | "
                                  f"{compare.p90(w.times):.2f} | {w.load_ms:.0f} | {w.rss_mb:.0f} | "
                                  f"{compare.diff_cells(w.out, ref)} |")
                summary.append(f"| {title} | {precision} | {threads} | " +
                               " | ".join(f"{med[e]:.2f}" for e in engines) + " | " +
                               " | ".join(f"{med['lite'] / med[e]:.2f}" for e in others) + " |")
                print(summary[-1], flush=True)
    return summary + [""] + detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(compare.MODELS))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--precision", nargs="+", choices=["f32", "f16"], default=["f32"])
    ap.add_argument("--engines", nargs="*", default=None,
                    help="peers besides lite and onnxruntime (default: those of mnn / ncnn installed)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds per engine")
    ap.add_argument("--batch", type=int, default=5, help="timed runs per engine per round")
    ap.add_argument("--pause", type=float, default=0.3)
    ap.add_argument("--out", default=None, help="write the Markdown tables here (atomically)")
    args = ap.parse_args()
    peers = installed_peers() if args.engines is None else args.engines
    missing = [e for e in peers if e not in PEERS]
    if missing:
        ap.error(f"unknown engines {missing}: choose from {list(PEERS)}")
    if not peers:
        print("[mobile_peers] neither MNN nor ncnn is installed: measuring lite and ONNX Runtime only", flush=True)
    engines = ["lite", "onnxruntime", *peers]
    header = [compare.machine_line() + f" Peers: {versions()}.", "",
              f"Medians and 90th percentiles over {args.rounds} interleaved rounds of {args.batch} runs per engine, "
              "batch 1; 'lite / engine' < 1 means lite is faster. f32: every engine in float32 (MNN precision high, "
              "ncnn's fp16 options off); f16: lite preferred_fp16, MNN precision low, ncnn fp16 storage and "
              "arithmetic, each only where the CPU has float16 arithmetic; ONNX Runtime float32 throughout.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        body = run(args, engines, tmp)
    publish(header + body, args.out)


if __name__ == "__main__":
    main()
