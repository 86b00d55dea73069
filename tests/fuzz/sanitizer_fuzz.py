"""The sanitizer job (./build.sh asan; issue 35): a corpus of mutated models run through the ASan + UBSan build of the
runtime (build/asan/fuzz_load), which must refuse bad files with errors, never crash or report.

Mutations are structure-aware, not only byte flips:
- .ms files: the graph is unpacked with the FlatBuffers object API, then tensor shapes, dtypes, weight offsets and
  lengths, node inputs and outputs, operator codes, attribute values (kernel shapes, strides, pads, axes, perms,
  groups, ...) and graph inputs/outputs are changed, the graph repacked and the header's sizes and checksum rewritten
  so the file gets past the checksum to the semantic checks; plus byte flips in the weights and the graph.
- ONNX models: attribute values, value-info and initializer dims are changed and the result converted (the converter
  refuses or writes a file); the files it writes join the .ms corpus.
The seeds: float models of each kernel family, plus FULL_QUANT, DYNAMIC_QUANT, weight-only int8 / int4 and float16
conversions (quantised_seeds). The driver runs the corpus at the default precision, then a share of it
(--bf16-share) again with precision_mode=preferred_bf16, a quarter (--fp16-share) with preferred_fp16, and a quarter
(--threaded-share) again on two threads.

    python -m tests.fuzz.sanitizer_fuzz --driver build/asan/fuzz_load --ms 300 --onnx 40 [--seed 0] [--bf16-share 0.5]
                                          [--threaded-share 0.25] [--fp16-share 0.25]
"""
from __future__ import annotations

import argparse
import copy
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import flatbuffers
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.dirname(HERE)]

from converter.writer import ALIGN, FORMAT_MAJOR, FORMAT_MINOR, HEADER, MAGIC  # noqa: E402
from ms_schema.Model import Model, ModelT  # noqa: E402

INTERESTING = [0, 1, -1, 2, 3, 7, 64, 255, 1 << 20, (1 << 31) - 1, -(1 << 31), 1 << 40, (1 << 62), -(1 << 62)]


def seed_models() -> dict[str, onnx.ModelProto]:
    """Small models covering the kernel families: convolution network, products and attention, shape operators,
    reductions and control flow."""
    from model_zoo.tiny import small_cnn
    rng = np.random.default_rng(0)
    models = {"cnn": small_cnn()}
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["s"], axis=-1),
             helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0]),
             helper.make_node("ReduceMean", ["t"], ["r"], keepdims=1),
             helper.make_node("Reshape", ["t", "shape"], ["y0"]), helper.make_node("Add", ["y0", "r"], ["y"])]
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, shape])
    models["matmul"] = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("LayerNormalization", ["e", "gamma"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("Slice", ["n", "starts", "ends", "axes"], ["sl"]),
             helper.make_node("Concat", ["sl", "sl"], ["c"], axis=1),
             helper.make_node("TopK", ["c", "k"], ["v", "i"], axis=-1)]
    inits = [numpy_helper.from_array(rng.standard_normal((50, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
             numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([6], np.int64), "ends"),
             numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array([3], np.int64), "k")]
    g = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", 5])],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)], inits)
    models["gather"] = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return models


def convert(model: onnx.ModelProto, workdir: str, name: str, config: str | None = None,
            fp16: bool = False) -> str | None:
    """The .ms file of `model` (quantised as the INI text `config` says, if given), or None where the converter
    refuses it."""
    import converter
    path = os.path.join(workdir, f"{name}.onnx")
    onnx.save(model, path)
    cfg = None
    if config is not None:
        cfg = os.path.join(workdir, f"{name}.cfg")
        with open(cfg, "w") as f:
            f.write(config)
    try:
        return converter.Converter().convert("ONNX", path, os.path.join(workdir, name), verify_build=False,
                                             config_file=cfg, fp16=fp16).output_file
    except converter.ConverterError:
        return None


def quantised_seeds(workdir: str) -> list[str]:
    """.ms seeds for the kernels float models never reach (their mutants test those kernels' loading checks):
    FULL_QUANT (uint8 codes through 1x1, 3x3 and depthwise 3x3 / 5x5 Convs at strides 1 and 2, 24- and 48-channel
    outputs, a residual Add: the pixel-major, depthwise and channel-major integer kernels), DYNAMIC_QUANT products,
    4-bit grouped and 8-bit weight-only products, and float16 weights."""
    from model_zoo.tiny import mlp
    rng = np.random.default_rng(1)

    def init(name, shape):
        fan_in = int(np.prod(shape[1:]))
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name)

    inits = [init("w1", (32, 16, 1, 1)), init("w2", (32, 32, 3, 3)), init("w3", (32, 1, 3, 3)),
             init("w4", (48, 32, 1, 1)), init("w5", (48, 1, 5, 5)), init("w6", (24, 48, 1, 1)),
             init("w7", (24, 32, 1, 1)), numpy_helper.from_array(np.full(32, 0.3, np.float32), "b1"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["b"]),
             helper.make_node("Conv", ["b", "w3"], ["c3"], pads=[1, 1, 1, 1], group=32),
             helper.make_node("Clip", ["c3", "lo", "hi"], ["c"]),
             helper.make_node("Conv", ["c", "w4"], ["e"]),
             helper.make_node("Conv", ["e", "w5"], ["c5"], pads=[2, 2, 2, 2], strides=[2, 2], group=48),
             helper.make_node("Relu", ["c5"], ["d"]), helper.make_node("Conv", ["d", "w6"], ["f"]),
             helper.make_node("Conv", ["c", "w7"], ["g"], strides=[2, 2]), helper.make_node("Add", ["f", "g"], ["h"]),
             helper.make_node("GlobalAveragePool", ["h"], ["y"])]
    g = helper.make_graph(nodes, "int8_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    block = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    calibration = os.path.join(workdir, "calibration")
    os.makedirs(calibration, exist_ok=True)
    for i in range(4):
        np.save(os.path.join(calibration, f"{i}.npy"), rng.standard_normal((1, 16, 14, 14)).astype(np.float32))
    common = "[common_quant_param]\nquant_type={}\nbit_num={}\nmin_quant_weight_channel=1\n"
    products = mlp(dims=(64, 128, 128, 10))
    seeds = [convert(block, workdir, "full_quant", common.format("FULL_QUANT", 8)
                     + f"[data_preprocess_param]\ncalibrate_path=x:{calibration}\ninput_type=NPY\n"),
             convert(products, workdir, "dynamic_quant", common.format("DYNAMIC_QUANT", 8)),
             convert(products, workdir, "weight_int4", common.format("WEIGHT_QUANT", 4)
                     + "[weight_quant_param]\ngroup_size=16\n"),
             convert(products, workdir, "weight_int8", common.format("WEIGHT_QUANT", 8)),
             convert(block, workdir, "fp16", fp16=True)]
    if not all(seeds):
        raise RuntimeError("a quantised seed model did not convert")
    return seeds


# ------------------------------------------------------------------------------------------------ .ms mutations
def _split(data: bytes) -> tuple[ModelT, bytes]:
    f = HEADER.unpack_from(data)
    graph_offset, graph_size, weights_offset, weights_size = f[4], f[5], f[6], f[7]
    model = ModelT.InitFromObj(Model.GetRootAs(data[graph_offset:graph_offset + graph_size], 0))
    return model, data[weights_offset:weights_offset + weights_size]


def _join(model: ModelT, weights: bytes) -> bytes:
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"LMS1")
    fb = bytes(b.Output())
    graph_offset = HEADER.size
    weights_offset = -(-(graph_offset + len(fb)) // ALIGN) * ALIGN
    header = HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER.size, graph_offset, len(fb), weights_offset,
                         len(weights), zlib.crc32(fb) & 0xFFFFFFFF, 0, 0)
    return header + fb + b"\0" * (weights_offset - graph_offset - len(fb)) + weights


def _pick(rng, seq):
    return seq[int(rng.integers(0, len(seq)))] if seq else None


def _mutate_value(rng, v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return int(_pick(rng, INTERESTING)) if rng.random() < 0.7 else v + int(rng.integers(-3, 4))
    if isinstance(v, float):
        return float(_pick(rng, [0.0, -1.0, 1e30, -1e30, float("nan"), float("inf"), 1e-30]))
    if isinstance(v, list) and v and all(isinstance(x, (int, np.integer)) for x in v):
        v = [int(x) for x in v]
        k = int(rng.integers(0, 4))
        if k == 0:
            v[int(rng.integers(0, len(v)))] = int(_pick(rng, INTERESTING))
        elif k == 1:
            v = v[:-1]
        elif k == 2:
            v = v + [int(_pick(rng, INTERESTING))]
        else:
            v = []
        return v
    if isinstance(v, np.ndarray) and v.size and np.issubdtype(v.dtype, np.integer):
        v = v.copy()
        v.flat[int(rng.integers(0, v.size))] = int(_pick(rng, INTERESTING)) % (1 << 31)
        return v
    return v


def _mutate_object(rng, obj) -> bool:
    """Changes one field of a FlatBuffers object-API table (recursing into nested tables)."""
    fields = [k for k, v in vars(obj).items() if v is not None and not isinstance(v, (str, bytes))]
    if not fields:
        return False
    key = _pick(rng, fields)
    value = getattr(obj, key)
    if hasattr(value, "__dict__") and not isinstance(value, (list, np.ndarray)):
        return _mutate_object(rng, value)
    if isinstance(value, list) and value and hasattr(value[0], "__dict__"):
        return _mutate_object(rng, _pick(rng, value))
    setattr(obj, key, _mutate_value(rng, value))
    return True


def mutate_ms(data: bytes, rng: np.random.Generator) -> bytes:
    """A mutated copy of a .ms file (a value out of its field's range is drawn again)."""
    for _ in range(20):
        try:
            return _mutate_ms_once(data, rng)
        except (TypeError, ValueError, OverflowError, struct.error):
            continue
    return data


def _mutate_ms_once(data: bytes, rng: np.random.Generator) -> bytes:
    model, weights = _split(data)
    for _ in range(int(rng.integers(1, 4))):
        graph = _pick(rng, model.graphs)
        target = int(rng.integers(0, 6))
        if target == 0 and graph.tensors:
            _mutate_object(rng, _pick(rng, graph.tensors))
        elif target == 1 and graph.nodes:
            node = _pick(rng, graph.nodes)
            if node.attr is not None and rng.random() < 0.6:
                _mutate_object(rng, node.attr)
            else:
                _mutate_object(rng, node)
        elif target == 2:
            which = "inputs" if rng.random() < 0.5 else "outputs"
            setattr(graph, which, _mutate_value(rng, list(getattr(graph, which) or [0])))
        elif target == 3 and graph.nodes and len(graph.nodes) > 1:   # reorder: a reader before its producer
            i, j = (int(x) for x in rng.choice(len(graph.nodes), 2, replace=False))
            graph.nodes[i], graph.nodes[j] = graph.nodes[j], graph.nodes[i]
        elif target == 4 and weights:
            w = bytearray(weights)
            for _ in range(int(rng.integers(1, 16))):
                w[int(rng.integers(0, len(w)))] = int(rng.integers(0, 256))
            weights = bytes(w)
        elif graph.tensors:   # a tensor's shape: the most productive single change
            t = _pick(rng, graph.tensors)
            t.shape = _mutate_value(rng, list(t.shape if t.shape is not None else [1]))
    return _join(model, weights)


# ----------------------------------------------------------------------------------------------- ONNX mutations
def mutate_onnx(model: onnx.ModelProto, rng: np.random.Generator) -> onnx.ModelProto:
    m = copy.deepcopy(model)
    g = m.graph
    for _ in range(int(rng.integers(1, 3))):
        k = int(rng.integers(0, 3))
        if k == 0:   # an attribute value
            nodes = [n for n in g.node if n.attribute]
            if not nodes:
                continue
            a = _pick(rng, list(_pick(rng, nodes).attribute))
            if a.type == onnx.AttributeProto.INT:
                a.i = int(_pick(rng, INTERESTING)) % (1 << 62)
            elif a.type == onnx.AttributeProto.INTS and len(a.ints):
                a.ints[int(rng.integers(0, len(a.ints)))] = int(_pick(rng, [-5, -1, 0, 3, 99, 1 << 40]))
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f = float(_pick(rng, [0.0, -1.0, float("nan"), float("inf"), 1e30]))
        elif k == 1:   # a declared input dim
            inp = _pick(rng, list(g.input))
            dims = inp.type.tensor_type.shape.dim
            if len(dims):
                d = dims[int(rng.integers(0, len(dims)))]
                d.Clear()
                d.dim_value = int(_pick(rng, [0, 1, 3, 1 << 20, 1 << 40]))
        elif g.initializer:   # an initializer's dims against its data
            t = _pick(rng, list(g.initializer))
            if len(t.dims):
                t.dims[int(rng.integers(0, len(t.dims)))] = int(_pick(rng, [0, 1, 2, 5, 1 << 20]))
    return m


def build_corpus(workdir: str, ms_count: int, onnx_count: int, seed: int) -> tuple[list[str], dict]:
    rng = np.random.default_rng(seed)
    models = seed_models()
    seeds = {name: convert(m, workdir, name) for name, m in models.items()}
    quantised = quantised_seeds(workdir)
    paths = [p for p in seeds.values() if p] + quantised
    stats = {"onnx_mutations": 0, "onnx_refused": 0, "onnx_converted": 0, "onnx_internal_errors": 0}
    for i in range(onnx_count):
        name = _pick(rng, sorted(models))
        stats["onnx_mutations"] += 1
        try:
            out = convert(mutate_onnx(models[name], rng), workdir, f"onnx_{i}")
        except Exception:  # noqa: BLE001 - a converter fault is counted, the run goes on
            stats["onnx_internal_errors"] += 1
            continue
        if out:
            stats["onnx_converted"] += 1
            paths.append(out)
        else:
            stats["onnx_refused"] += 1
    sources = [open(p, "rb").read() for p in paths]
    quantised_sources = [open(p, "rb").read() for p in quantised]
    for i in range(ms_count):
        # a third of the mutants from the quantised seeds (a handful among the float files the ONNX mutants add)
        data = mutate_ms(_pick(rng, quantised_sources if rng.random() < 1 / 3 else sources), rng)
        path = os.path.join(workdir, f"ms_{i}.ms")
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    stats["ms_files"] = len(paths)
    return paths, stats


def run_driver(driver: str, paths: list[str], workdir: str, timeout: int,
               bf16_share: float, threaded_share: float = 0.0, fp16_share: float = 0.0) -> subprocess.CompletedProcess:
    """One driver process over the corpus, then over every 1 / threaded_share-th file again on two threads (the
    kernels' threaded splits), then over every 1 / bf16_share-th file again with precision_mode=preferred_bf16 (the
    bf16 kernels: AMX or AVX512-BF16 where the CPU has them, else the float32 fallback), then over every
    1 / fp16_share-th one with preferred_fp16 (AVX512-FP16 or ARM64 FP16 kernels where the CPU has them)."""
    listing = os.path.join(workdir, "corpus.txt")
    with open(listing, "w") as f:
        f.write("\n".join(paths) + "\n")
    args = [driver, "--trace", "@" + listing]
    if threaded_share > 0:
        step = max(1, round(1 / threaded_share))
        threaded_listing = os.path.join(workdir, "corpus_threaded.txt")
        with open(threaded_listing, "w") as f:
            f.write("\n".join(paths[::step]) + "\n")
        args += ["--threads=2", "@" + threaded_listing, "--threads=1"]
    if bf16_share > 0:
        step = max(1, round(1 / bf16_share))
        bf16_listing = os.path.join(workdir, "corpus_bf16.txt")
        with open(bf16_listing, "w") as f:
            f.write("\n".join(paths[::step]) + "\n")
        args += ["--precision=preferred_bf16", "@" + bf16_listing]
    if fp16_share > 0:
        step = max(1, round(1 / fp16_share))
        fp16_listing = os.path.join(workdir, "corpus_fp16.txt")
        with open(fp16_listing, "w") as f:
            f.write("\n".join(paths[1::step]) + "\n")   # (offset: not the files the bf16 pass took)
        args += ["--precision=preferred_fp16", "@" + fp16_listing]
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:allocator_may_return_null=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", default=os.path.join(ROOT, "build", "asan", "fuzz_load"))
    ap.add_argument("--ms", type=int, default=300, help="mutated .ms files")
    ap.add_argument("--onnx", type=int, default=40, help="mutated ONNX models converted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--keep-dir", default=os.path.join(ROOT, "build"),
                    help="where the file a failing run died on is kept (fuzz-failure.ms)")
    ap.add_argument("--bf16-share", type=float, default=0.5,
                    help="share of the corpus run a second time with precision_mode=preferred_bf16 (0: none)")
    ap.add_argument("--threaded-share", type=float, default=0.25,
                    help="share of the corpus run a second time on two threads (0: none)")
    ap.add_argument("--fp16-share", type=float, default=0.25,
                    help="share of the corpus run a second time with precision_mode=preferred_fp16 (0: none)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        paths, stats = build_corpus(workdir, a.ms, a.onnx, a.seed)
        proc = run_driver(a.driver, paths, workdir, a.timeout, a.bf16_share, a.threaded_share, a.fp16_share)
        probes = [line for line in proc.stderr.splitlines() if line.startswith("probe: ")]
        report = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("probe: "))
        kept = None
        if proc.returncode != 0 and probes:   # keep the file the driver was on when it died, to reproduce it
            last, setting = probes[-1][len("probe: "):-1].rsplit(" (precision ", 1)
            precision, threads = setting.split(", threads ")
            kept = os.path.join(a.keep_dir, "fuzz-failure.ms")
            os.makedirs(a.keep_dir, exist_ok=True)
            shutil.copyfile(last, kept)
    print(proc.stdout.strip())
    print(f"sanitizer fuzz: seed {a.seed}, {stats}, {time.perf_counter() - t0:.0f} s")
    if proc.returncode != 0:
        print(report[-6000:], file=sys.stderr)
        if kept:
            print(f"the file it failed on: {kept} (precision {precision}, {threads} thread(s)); rerun: {a.driver} "
                  f"--precision={precision} --threads={threads} {kept}", file=sys.stderr)
        print("SANITIZER FUZZ FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
