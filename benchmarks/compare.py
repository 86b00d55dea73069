"""Side-by-side CPU benchmark: lite vs ONNX Runtime (CPU provider) and OpenVINO (CPU, f32) when installed,
on the same ONNX files, inputs and thread counts, in one run.

    python -m benchmarks.compare [--threads 1 2] [--rounds 10] [--batch 5] [--models resnet50 ...]
                                 [--gemm] [--out benchmarks/results/cpu_fp32.md]

How it measures:
- Every engine runs in its own worker process, started fresh per (model, thread count): its load time
  (lite: build_from_file; ONNX Runtime: session creation; OpenVINO: read + compile) and its peak RSS
  (ru_maxrss of that process: Python, the engine's libraries, the model, the runs) are its own.
- The engines are interleaved: `rounds` times, each worker in turn runs `batch` timed inferences, with a
  0.3 s pause between turns so one engine's spinning threads never overlap another's timing (OpenBLAS,
  behind NumPy, busy-waits ~0.1 s after each call). Slow drift of the
  machine then hits every engine alike. Medians and 90th percentiles are over all rounds.
- Outputs are compared with ONNX Runtime's on the same inputs (max abs difference of the first output).
- `--gemm` adds a GEMM micro-benchmark: one-MatMul models (A fed, B a constant weight) in lite and ONNX
  Runtime, and NumPy's BLAS, at the same thread count, plus the measured single-thread fp32 FMA peak.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.results_io import publish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "tests", ".cache")
ENGINES = ("lite", "onnxruntime", "openvino")
# --precision bf16, passed to the workers: lite with precision_mode preferred_bf16, OpenVINO with
# INFERENCE_PRECISION_HINT bf16 (its default on CPUs with bf16 arithmetic); ONNX Runtime's CPU provider has no bf16
# mode and stays float32. --precision f16 likewise: lite preferred_fp16, OpenVINO f16, ONNX Runtime float32.
PRECISION_VAR = "LITE_BENCH_PRECISION"


# ----------------------------------------------------------------------------------------------- models
def _zoo(name: str, shapes: dict[str, tuple[int, ...]]):
    """A transformers architecture from model_zoo (seeded random weights), exported once into tests/.cache,
    with its inputs fixed to `shapes` so every engine sees the same static graph."""
    def build(path: str) -> dict[str, tuple]:
        sys.path.insert(0, ROOT)
        from model_zoo.hf_tiny import export_onnx
        model = onnx.load(export_onnx(name, CACHE))
        for inp in model.graph.input:
            for d, v in zip(inp.type.tensor_type.shape.dim, shapes.get(inp.name, ())):
                d.Clear()
                d.dim_value = v
        onnx.save(model, path)
        return shapes
    return build


def _encoder_block(path: str) -> dict[str, tuple]:
    import torch
    sys.path.insert(0, ROOT)
    from model_zoo.tiny import torch_encoder_block
    block = torch_encoder_block(d=256, heads=4, ff=1024, with_mask=False)
    torch.onnx.export(block, (torch.randn(1, 128, 256),), path, input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    return {"x": (1, 128, 256)}


def yolo_reference(base: str, scale: str):
    """(model, yaml): an ultralytics detector, model_zoo's PyTorch reference at full size (80 classes) with seeded
    random weights; base names a yaml of model_zoo.detection.yolo_yamls."""
    sys.path.insert(0, ROOT)
    from model_zoo.detection import yolo_yamls
    from model_zoo.reference.ultralytics_yolo import YoloDetector, randomize_
    model_yaml = yolo_yamls.scaled_yaml(getattr(yolo_yamls, base), scale)
    return randomize_(YoloDetector(model_yaml), seed=0, scale=1.0), model_yaml


def export_yolo(model, path: str, size: int) -> None:
    """torch.onnx's export of the detector: what `yolo export format=onnx` writes (the decoded head, no NMS)."""
    import torch
    with torch.no_grad():
        torch.onnx.export(model, (torch.zeros(1, 3, size, size),), path, input_names=["images"],
                          output_names=["output0"], opset_version=17, dynamo=False)


def _yolo(base: str, scale: str, size: int = 640):
    def build(path: str) -> dict[str, tuple]:
        export_yolo(yolo_reference(base, scale)[0], path, size)
        return {"images": (1, 3, size, size)}
    return build


def _small_cnn(path: str) -> dict[str, tuple]:
    sys.path.insert(0, ROOT)
    from model_zoo.tiny import small_cnn
    onnx.save(small_cnn(), path)
    return {"x": (4, 3, 32, 32)}


def _vae_decoder(path: str) -> dict[str, tuple]:
    """Stable Diffusion's image VAE decoder (diffusers AutoencoderKL at SD's widths 128-512, seeded random weights) on a
    16x16 latent (a 128x128 image): 3x3 Convs beside GroupNorm, SiLU and nearest 2x upsampling, which keep NCHW."""
    import torch
    from diffusers import AutoencoderKL
    torch.manual_seed(0)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
                        layers_per_block=2, norm_num_groups=32).eval()

    class Decoder(torch.nn.Module):
        def __init__(self, v):
            super().__init__()
            self.v = v

        def forward(self, z):
            return self.v.decode(z).sample

    torch.onnx.export(Decoder(vae), (torch.randn(1, 4, 16, 16),), path, input_names=["latents"],
                      output_names=["images"], opset_version=17, dynamo=False)
    return {"latents": (1, 4, 16, 16)}


MODELS = {
    "resnet50": ("ResNet-50 1x3x224x224", _zoo("resnet50", {"pixel_values": (1, 3, 224, 224)})),
    "mobilenetv2": ("MobileNetV2 1x3x224x224", _zoo("mobilenet_v2_full", {"pixel_values": (1, 3, 224, 224)})),
    "convnext_tiny": ("ConvNeXt-Tiny 1x3x224x224", _zoo("convnext_tiny", {"pixel_values": (1, 3, 224, 224)})),
    # Not part of the default set (issue 5 covers transformers; the small CNN is the runner's own test):
    "small_cnn": ("small CNN 4x3x32x32", _small_cnn),
    "encoder_block": ("encoder block d256 s128", _encoder_block),
    "bert_base": ("BERT-base s128", _zoo("bert_base", {"input_ids": (1, 128), "attention_mask": (1, 128)})),
    "vit_base": ("ViT-B/16 1x3x224x224", _zoo("vit_base", {"pixel_values": (1, 3, 224, 224)})),
    "qwen2_decoder": ("Qwen2-style decoder s128", _zoo("qwen2_decoder", {"input_ids": (1, 128)})),
    "whisper_tiny_encoder": ("Whisper-tiny encoder 80x3000", _zoo("whisper_tiny_encoder",
                                                                   {"input_features": (1, 80, 3000)})),
    "vae_decoder": ("SD VAE decoder 1x4x16x16", _vae_decoder),
    "yolov8n": ("YOLOv8n 1x3x640x640", _yolo("YOLOV8", "n")),
    "yolov10n": ("YOLOv10n 1x3x640x640", _yolo("YOLOV10N", "n")),
}
DEFAULT_MODELS = ("resnet50", "mobilenetv2", "convnext_tiny")

# GEMM shapes (M, K, N) for A[M,K] x B[K,N]: squares, then the shapes the convolutions and MLPs of the
# models above run (lite computes Conv as W[M=out channels, K=in*kh*kw] x im2col[K, N=pixels]).
GEMM_SHAPES = {
    "256": (256, 256, 256), "1024": (1024, 1024, 1024), "2048": (2048, 2048, 2048),
    "ResNet-50 stem 7x7": (64, 147, 12544), "ResNet-50 stage 1 3x3": (64, 576, 3136),
    "ResNet-50 stage 4 3x3": (512, 4608, 49), "ResNet-50 stage 1 1x1": (256, 64, 3136),
    "MobileNetV2 expand 1x1": (96, 16, 12544), "ConvNeXt-T MLP": (3136, 96, 384),
    "decoder MLP": (128, 512, 1408), "decoder LM head": (128, 512, 32000), "BERT MLP": (128, 768, 3072),
    "Whisper fc1": (1500, 384, 1536), "Whisper fc2": (1500, 1536, 384),
}


def _matmul_model(path: str, m: int, k: int, n: int) -> dict[str, tuple]:
    w = np.random.default_rng(1).standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return {"a": (m, k)}


# ----------------------------------------------------------------------------------------------- worker
def _peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries that across exec from the
    forking parent, so every worker would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_lite(model_path: str, threads: int, bf16: bool, fp16: bool = False):
    """A lite Model built from model_path with `threads` threads (precision bfloat16 / float16 where preferred)."""
    sys.path.insert(0, ROOT)
    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    if bf16 or fp16:
        ctx.cpu.precision_mode = "preferred_bf16" if bf16 else "preferred_fp16"
    model = lite.Model()
    model.build_from_file(model_path, lite.ModelType.MINDIR_LITE, ctx)
    return model


def compile_openvino(model_path: str, threads: int, bf16: bool, perf_count: bool = False,
                     default_precision: bool = False, fp16: bool = False):
    """An OpenVINO CPU model compiled for latency with `threads` threads, f32 or bf16 inference precision (or, with
    default_precision, OpenVINO's own choice for the CPU: bf16 where it has AMX / AVX512_BF16)."""
    import openvino as ov
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    if not default_precision:
        config["INFERENCE_PRECISION_HINT"] = "bf16" if bf16 else "f16" if fp16 else "f32"
    if perf_count:
        config["PERF_COUNT"] = True
    return core.compile_model(core.read_model(model_path), "CPU", config)


def _worker(engine: str, model_path: str, feeds_path: str, threads: int) -> None:
    """Runs in a fresh process. Loads the model, then answers 'run N' with N latencies (ms)."""
    # The answers go to the original stdout; whatever the engines print themselves (MNN writes to the C library's
    # stdout) goes to stderr instead of into the answers.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    feeds = dict(np.load(feeds_path))
    bf16, fp16 = os.environ.get(PRECISION_VAR) == "bf16", os.environ.get(PRECISION_VAR) == "f16"
    t0 = time.perf_counter()
    if engine == "lite":
        model = load_lite(model_path, threads, bf16, fp16)
        run = lambda: model.predict(feeds)[0].get_data_to_numpy()  # noqa: E731
    elif engine == "onnxruntime":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feeds)[0]  # noqa: E731
    elif engine in ("openvino", "openvino_default"):   # _default: OpenVINO's own precision (an NNCF int8 model's)
        compiled = compile_openvino(model_path, threads, bf16, default_precision=engine == "openvino_default",
                                    fp16=fp16)
        request = compiled.create_infer_request()
        run = lambda: np.array(request.infer(feeds)[compiled.output(0)])  # noqa: E731
    elif engine == "mnn":   # benchmarks.mobile_peers: MNN's session API on a .mnn file (mnnconvert)
        import MNN
        interp = MNN.Interpreter(model_path)
        sess = interp.createSession({"numThread": threads, "backend": "CPU", "precision": "low" if fp16 else "high"})
        inputs = interp.getSessionInputAll(sess)
        hosts = {k: MNN.Tensor(v.shape, MNN.Halide_Type_Float, v, MNN.Tensor_DimensionType_Caffe)
                 for k, v in feeds.items()}

        def run():
            for k, t in hosts.items():
                inputs[k].copyFrom(t)
            interp.runSession(sess)
            out = interp.getSessionOutputAll(sess)
            o = out[sorted(out)[0]] if len(out) > 1 else next(iter(out.values()))
            host = MNN.Tensor(o.getShape(), MNN.Halide_Type_Float, np.zeros(o.getShape(), np.float32),
                              MNN.Tensor_DimensionType_Caffe)
            o.copyToHostTensor(host)
            return host.getNumpyData().copy()
    elif engine == "ncnn":   # benchmarks.mobile_peers: ncnn on a .ncnn.param / .bin pair (pnnx); batch 1
        import ncnn
        net = ncnn.Net()
        net.opt.num_threads = threads
        net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = fp16
        net.opt.use_bf16_storage = False
        net.load_param(model_path)
        net.load_model(model_path[: -len(".param")] + ".bin")
        names = net.input_names()
        mats = {n: ncnn.Mat(np.ascontiguousarray(feeds[k][0])) for n, k in zip(names, feeds)}

        def run():
            ex = net.create_extractor()
            for n, m in mats.items():
                ex.input(n, m)
            _, out = ex.extract(net.output_names()[0])
            return np.array(out)[None]
    elif engine == "numpy":
        a = feeds["a"]
        w = dict(np.load(feeds_path + ".w.npz"))["w"]
        run = lambda: a @ w  # noqa: E731
    else:
        raise ValueError(engine)
    load_ms = (time.perf_counter() - t0) * 1e3
    out = run()
    out_path = f"{feeds_path}.{engine}.npy"
    np.save(out_path, out)
    for _ in range(3):
        run()
    print(json.dumps({"load_ms": load_ms, "out": out_path}), file=answers, flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "run":
            break
        times = []
        for _ in range(int(cmd[1])):
            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) * 1e3)
        rss_mb = _peak_rss_mb()
        print(json.dumps({"ms": times, "rss_mb": rss_mb}), file=answers, flush=True)


class Worker:
    def __init__(self, engine: str, model_path: str, feeds_path: str, threads: int, env_extra: dict | None = None):
        env = dict(os.environ, **(env_extra or {}))
        # NumPy's BLAS (and any OpenMP runtime an engine brings) gets the same thread count.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(threads)
        self.engine = engine
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.compare", "--worker", engine, model_path,
                                      feeds_path, str(threads)], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        hello = self._read()
        self.load_ms, self.out = hello["load_ms"], np.load(hello["out"])
        self.times: list[float] = []
        self.rss_mb = 0.0

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.engine} worker failed:\n{self.proc.stderr.read()[-3000:]}")
        return json.loads(line)

    def run(self, n: int, untimed: int = 0) -> None:
        """n timed runs, after `untimed` runs whose times are dropped."""
        for count, keep in ((untimed, False), (n, True)):
            if count <= 0:
                continue
            self.proc.stdin.write(f"run {count}\n")
            self.proc.stdin.flush()
            r = self._read()
            if keep:
                self.times += r["ms"]
            self.rss_mb = r["rss_mb"]

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


def measure(engines: list[str], paths: dict[str, str], feeds_path: str, threads: int, rounds: int, batch: int,
            pause: float = 0.3, warm_runs: int = 0) -> dict[str, Worker]:
    """Starts one worker per engine, then interleaves their timed batches in a shuffled order per round."""
    return measure_variants({e: (e, paths[e]) for e in engines}, feeds_path, threads, rounds, batch, pause, warm_runs)


def measure_variants(variants: dict[str, tuple], feeds_path: str, threads: int, rounds: int, batch: int,
                     pause: float = 0.3, warm_runs: int = 0) -> dict[str, Worker]:
    """As measure, for labelled (engine, model path[, environment variables]) tuples: several models or settings per
    engine in one interleaved run. warm_runs: untimed runs at the start of every turn (after the pause the vCPU is
    cold: an AMX model's first runs take 1.4-1.6x its warm time, docs/performance.md); 0 times the turn from its
    first run."""
    workers = {}
    try:
        for label, (engine, path, *env) in variants.items():
            workers[label] = Worker(engine, path, feeds_path, threads, env[0] if env else None)
        order = list(variants)
        rng = random.Random(0)
        for _ in range(rounds):
            rng.shuffle(order)
            for e in order:
                time.sleep(pause)   # let the previous engine's threads go idle
                workers[e].run(batch, warm_runs)
    finally:
        for w in workers.values():
            w.close()
    return workers


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


def p90(v: list[float]) -> float:
    return float(np.percentile(v, 90))


def diff_cells(out: np.ndarray, ref: np.ndarray) -> str:
    """Two table cells: the max abs difference of out from ref (with ref's max abs value) and their cosine."""
    if out.shape != ref.shape:
        return "nan | nan"
    diff = float(np.abs(out.astype(np.float64) - ref).max())
    return f"{diff:.1e} ({float(np.abs(ref).max()):.2g}) | {cosine(out, ref):.6f}"


# ----------------------------------------------------------------------------------------------- main
def available_engines() -> list[str]:
    engines = ["lite", "onnxruntime"]
    try:
        import openvino  # noqa: F401
        engines.append("openvino")
    except ImportError:
        pass
    return engines


def convert(onnx_path: str, out_base: str, shapes: dict[str, tuple]) -> str:
    sys.path.insert(0, ROOT)
    import converter
    spec = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
    return converter.Converter().convert("ONNX", onnx_path, out_base, input_shape=spec).output_file


def random_feeds(shapes: dict[str, tuple], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs: token ids uniform in [0, 1000), attention masks of ones, other inputs standard normal."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for k, s in shapes.items():
        if "ids" in k:
            feeds[k] = rng.integers(0, 1000, s).astype(np.int64)
        elif "mask" in k:
            feeds[k] = np.ones(s, np.int64)
        else:
            feeds[k] = rng.standard_normal(s).astype(np.float32)
    return feeds


def make_feeds(shapes: dict[str, tuple], path: str) -> None:
    np.savez(path, **random_feeds(shapes, 0))


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import onnxruntime as ort
    sys.path.insert(0, ROOT)
    import lite
    versions = f"onnxruntime {ort.__version__}"
    try:
        import openvino
        versions += f", openvino {openvino.__version__.split('-')[0]}"
    except ImportError:
        versions += ", openvino not installed"
    return (f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}; lite GEMM ISA "
            f"{lite._lite.gemm_isa()}; {versions}.")


def core_placement() -> str:
    """CPU 0 <-> 1 cache-line round trip in ns, rounded: ~80 where the two share an L3 cache, ~400 where a VM's
    vCPUs sit on different ones (multi-threaded timings then run slower, by engine and model)."""
    sys.path.insert(0, ROOT)
    import lite
    ns = lite._lite.measure_core_round_trip_ns(0, 1)
    return f"{ns:.0f}" if ns > 0 else "n/a"


def with_placement(threads: int, measure_fn):
    """measure_fn()'s result and the CPU placement before / after it ("-" for one thread: no placement to report)."""
    if threads < 2:
        return measure_fn(), "-"
    before = core_placement()
    result = measure_fn()
    return result, f"{before} / {core_placement()}"


def run_models(args, engines: list[str], tmp: str) -> list[str]:
    lines = ["| model | threads | engine | median ms | p90 ms | ours / engine | load ms | peak RSS MB | max abs diff vs ORT (max abs output) | cosine vs ORT |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    summary = ["| model | threads | lite ms | ORT ms | OpenVINO ms | ours / ORT | ours / min(ORT, OV) | vCPU round trip ns |",
               "|---|---|---|---|---|---|---|---|"]
    for key in args.models:
        title, build = MODELS[key]
        onnx_path = os.path.join(tmp, f"{key}.onnx")
        shapes = build(onnx_path)
        ms_path = convert(onnx_path, os.path.join(tmp, key), shapes)
        feeds_path = os.path.join(tmp, f"{key}_feeds.npz")
        make_feeds(shapes, feeds_path)
        paths = {"lite": ms_path, "onnxruntime": onnx_path, "openvino": onnx_path}
        for threads in args.threads:
            ws, placement = with_placement(
                threads, lambda: measure(engines, paths, feeds_path, threads, args.rounds, args.batch, args.pause,
                                           args.warm_runs))
            med = {e: statistics.median(w.times) for e, w in ws.items()}
            ref = ws["onnxruntime"].out
            for e, w in ws.items():
                lines.append(f"| {title} | {threads} | {e} | {med[e]:.2f} | {p90(w.times):.2f} | "
                             f"{med['lite'] / med[e]:.2f} | {w.load_ms:.0f} | {w.rss_mb:.0f} | "
                             f"{diff_cells(w.out, ref)} |")
            best = min(med[e] for e in med if e != "lite")
            ov = f"{med['openvino']:.2f}" if "openvino" in med else "-"
            summary.append(f"| {title} | {threads} | {med['lite']:.2f} | {med['onnxruntime']:.2f} | {ov} | "
                           f"{med['lite'] / med['onnxruntime']:.2f} | {med['lite'] / best:.2f} | {placement} |")
            print(summary[-1], flush=True)
    return summary + [""] + lines


def run_gemm(args, tmp: str) -> list[str]:
    sys.path.insert(0, ROOT)
    import lite
    peak = lite._lite.measure_fma_peak(2.0)
    lines = [f"Measured fp32 FMA peak, 1 thread: {peak:.1f} GFLOP/s (12 independent {lite._lite.gemm_isa()} FMA "
             "chains for 2 s, best repetition; `lite._lite.measure_fma_peak`). With 2 threads the ceiling is twice that.",
             "", "| GEMM (M x K x N) | threads | lite GFLOP/s | ORT MatMul GFLOP/s | NumPy BLAS GFLOP/s | lite / ORT | lite / peak (1 thread) |",
             "|---|---|---|---|---|---|---|"]
    for name, (m, k, n) in GEMM_SHAPES.items():
        if args.gemm_shapes and name not in args.gemm_shapes:
            continue
        onnx_path = os.path.join(tmp, f"gemm_{m}_{k}_{n}.onnx")
        shapes = _matmul_model(onnx_path, m, k, n)
        ms_path = convert(onnx_path, os.path.join(tmp, f"gemm_{m}_{k}_{n}"), shapes)
        feeds_path = os.path.join(tmp, f"gemm_{m}_{k}_{n}_feeds.npz")
        make_feeds(shapes, feeds_path)
        np.savez(feeds_path + ".w.npz", w=numpy_helper.to_array(onnx.load(onnx_path).graph.initializer[0]))
        flops = 2.0 * m * k * n
        rounds = max(3, min(args.rounds, int(2e10 / flops)))
        for threads in args.threads:
            ws = measure(["lite", "onnxruntime", "numpy"], {"lite": ms_path, "onnxruntime": onnx_path, "numpy": ""},
                         feeds_path, threads, rounds, args.batch, args.pause)
            g = {e: flops / statistics.median(w.times) / 1e6 for e, w in ws.items()}
            eff = f"{g['lite'] / peak:.0%}" if threads == 1 else "-"
            lines.append(f"| {name} ({m} x {k} x {n}) | {threads} | {g['lite']:.1f} | {g['onnxruntime']:.1f} | "
                         f"{g['numpy']:.1f} | {g['lite'] / g['onnxruntime']:.2f} | {eff} |")
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        engine, model_path, feeds_path, threads = sys.argv[2:6]
        _worker(engine, model_path, feeds_path, int(threads))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds per engine")
    ap.add_argument("--batch", type=int, default=5, help="timed runs per engine per round")
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds between two engines' turns, for the previous one's threads to go idle")
    ap.add_argument("--warm-runs", type=int, default=0,
                    help="untimed runs at the start of every turn, after the pause (default 0: timed from the first)")
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS), choices=list(MODELS))
    ap.add_argument("--engines", nargs="*", default=None, help=f"subset of {ENGINES} (default: those installed)")
    ap.add_argument("--gemm", action="store_true", help="also run the GEMM micro-benchmark")
    ap.add_argument("--gemm-shapes", nargs="*", default=None, help="names from GEMM_SHAPES (default: all)")
    ap.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32",
                    help="bf16 / f16: lite preferred_bf16 / preferred_fp16 and OpenVINO bf16 / f16 (ONNX Runtime "
                         "stays float32)")
    ap.add_argument("--out", default=None, help="write the Markdown tables here (atomically)")
    args = ap.parse_args()
    os.environ[PRECISION_VAR] = args.precision
    engines = args.engines or available_engines()
    if "lite" not in engines or "onnxruntime" not in engines:
        ap.error("lite and onnxruntime are always measured")
    header = [machine_line(), "",
              f"Medians and 90th percentiles over {args.rounds} interleaved rounds of {args.batch} runs per engine; "
              "'ours / engine' < 1 means lite is faster. Load = model build / session creation; peak RSS of the "
              "engine's fresh worker process.", ""]
    if args.warm_runs:
        header += [f"Each turn begins with {args.warm_runs} untimed runs after its {args.pause} s pause (warm "
                   "turns: the vCPU's first AMX runs after a pause are 1.4-1.6x slower for every engine).", ""]
    if args.precision == "bf16":
        header += ["Precision: lite `preferred_bf16` (compute precision bfloat16 where the CPU has AVX512_BF16), "
                   "OpenVINO `INFERENCE_PRECISION_HINT=bf16`; ONNX Runtime float32 (its CPU provider has no bf16 "
                   "mode). Output differences are against ONNX Runtime's float32 output.", ""]
    if args.precision == "f16":
        header += ["Precision: lite `preferred_fp16` (compute precision float16 where the CPU has AVX512-FP16), "
                   "OpenVINO `INFERENCE_PRECISION_HINT=f16`; ONNX Runtime float32 (its CPU provider has no float16 "
                   "arithmetic for a float32 model). Output differences are against ONNX Runtime's float32 output.",
                   ""]
    body = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.models:
            body += run_models(args, engines, tmp)
        if args.gemm:
            body += ["", "GEMM micro-benchmark (one MatMul, B constant; NumPy: `a @ w` on its BLAS):", ""]
            body += run_gemm(args, tmp)
    publish(header + body, args.out)


if __name__ == "__main__":
    main()
