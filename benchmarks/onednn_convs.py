"""oneDNN's convolution primitives beside lite's Convs, layer by layer (issue 36: "if a maintained library does a
primitive better, measure it"). oneDNN comes from PyPI (`onednn-cpu-gomp` / `onednn-devel-cpu-gomp`, fetched into
the work directory); benchmarks/onednn/convbench.cc runs its convolution primitives on every Conv geometry of the
model (weights reordered once into oneDNN's chosen layout, activations nhwc, ReLU as a post-op), in the model's
order per iteration so that weights and activations come from wherever the previous layers left them, as in a
whole-model run. lite's side is its per-node profile of the whole model (`Model.enable_profiling`), whose Convs also
carry what oneDNN's primitive does not: the fused residual Add, and the layout changes at the model's edges.

    python -m benchmarks.onednn_convs --model resnet50 --precisions f32 bf16 int8 --threads 1 --out F

f32: lite enforce_fp32 against oneDNN f32; bf16: lite preferred_bf16 against oneDNN bf16 (AMX where the CPU has it);
int8: lite's FULL_QUANT model against oneDNN u8 x s8 -> u8 with per-tensor scales.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import subprocess
import sys
import tempfile
import zipfile


from benchmarks.compare import MODELS, ROOT, convert, machine_line, random_feeds
from benchmarks.int8 import calibration_samples, lite_models
from benchmarks.layers import mean_per_layer
from benchmarks.results_io import publish

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onednn", "convbench.cc")
PACKAGES = ("onednn-cpu-gomp", "onednn-devel-cpu-gomp")


def build_convbench(work: str) -> tuple[str, str]:
    """The benchmark binary, built against oneDNN's PyPI wheels (downloaded once into `work`); and its version."""
    wheels = os.path.join(work, "wheels")
    if not glob.glob(os.path.join(wheels, "onednn_devel_cpu_gomp-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, *PACKAGES], check=True)
    root = os.path.join(work, "onednn")
    for whl in glob.glob(os.path.join(wheels, "*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(root)
    include = glob.glob(os.path.join(root, "*.data", "data", "include"))[0]
    lib = os.path.dirname(glob.glob(os.path.join(root, "*.data", "data", "lib", "libdnnl.so*"))[0])
    binary = os.path.join(work, "convbench")
    subprocess.run(["g++", "-O2", "-std=c++17", SOURCE, f"-I{include}", f"-L{lib}", "-ldnnl", f"-Wl,-rpath,{lib}",
                    "-fopenmp", "-o", binary], check=True)
    version = os.path.basename(glob.glob(os.path.join(wheels, "onednn_cpu_gomp-*.whl"))[0]).split("-")[1]
    return binary, version


def conv_geometries(onnx_path: str) -> list[str]:
    """One line per Conv: name C H W M KH KW SH SW PT PL PB PR group relu (a Relu reads its output)."""
    import onnx
    from onnx import shape_inference
    g = shape_inference.infer_shapes(onnx.load(onnx_path)).graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(g.value_info) + list(g.input) + list(g.output)}
    weights = {i.name: list(i.dims) for i in g.initializer}
    readers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n.op_type)
    lines = []
    for n in g.node:
        if n.op_type != "Conv" or n.input[1] not in weights or len(shapes.get(n.input[0], [])) != 4:
            continue
        x, w = shapes[n.input[0]], weights[n.input[1]]
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        s, p = a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0])
        relu = int("Relu" in readers[n.output[0]])
        lines.append(" ".join(map(str, [n.name.replace(" ", "_"), x[1], x[2], x[3], w[0], w[2], w[3], s[0], s[1], p[0],
                                        p[1], p[2], p[3], a.get("group", 1), relu])))
    return lines


def lite_profile(ms_path: str, feeds: dict, threads: int, mode: str, runs: int) -> dict[str, float]:
    """node name -> mean ms over `runs` profiled predictions of the whole model (benchmarks.layers' way)."""
    sys.path.insert(0, ROOT)
    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    ctx.cpu.precision_mode = mode
    m = lite.Model()
    m.build_from_file(ms_path, lite.ModelType.MINDIR_LITE, ctx)
    m.enable_profiling()
    layers = mean_per_layer(lambda: m.predict(feeds),
                            lambda: ((p["name"].replace(" ", "_"), p["op"], p["duration_us"] / 1e3)
                                     for p in m.last_profile()), runs, 5)
    return {name: ms for name, (_, ms) in layers.items()}


def onednn_times(binary: str, geometries: str, precision: str, threads: int, runs: int) -> dict[str, tuple]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([binary, geometries, precision, str(runs), "seq"], env=env, capture_output=True, text=True,
                         check=True).stdout
    rows = {}
    for line in out.splitlines():
        name, ms, *impl = line.split()
        if name != "TOTAL":
            rows[name] = (float(ms), impl[0] if impl else "")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=list(MODELS))
    ap.add_argument("--precisions", nargs="+", default=["f32", "bf16", "int8"], choices=["f32", "bf16", "int8"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_onednn_bench"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    binary, version = build_convbench(args.work)
    title, build = MODELS[args.model]
    onnx_path = os.path.join(args.work, f"{args.model}.onnx")
    shapes = build(onnx_path)
    geometries = os.path.join(args.work, f"{args.model}.convs")
    lines = conv_geometries(onnx_path)
    with open(geometries, "w") as f:
        f.write("\n".join(lines) + "\n")
    feeds = random_feeds(shapes, 0)
    models = {"f32": convert(onnx_path, onnx_path[:-5], shapes)}
    if "int8" in args.precisions:
        models["int8"] = lite_models(onnx_path, shapes, calibration_samples(shapes, 8), args.work,
                                     args.model)["lite FULL_QUANT"]
    modes = {"f32": "enforce_fp32", "bf16": "preferred_bf16", "int8": "enforce_fp32"}
    out = [machine_line() + f"; oneDNN {version} (PyPI onednn-cpu-gomp)", "",
           f"{title}: its {len(lines)} Convs, lite's per-node profile of the whole model (means) against oneDNN's "
           f"primitives in the model's order (medians of {args.runs} runs; ms). Shapes grouped; ratio = lite / oneDNN.", ""]
    for precision in args.precisions:
        for threads in args.threads:
            lite_ms = lite_profile(models["int8" if precision == "int8" else "f32"], feeds, threads, modes[precision],
                                   args.runs)
            dnnl = onednn_times(binary, geometries, precision, threads, args.runs)
            groups = collections.OrderedDict()
            for line in lines:
                name, C, H, W, M, KH, KW, SH = line.split()[:8]
                key = f"{KH}x{KW} /{SH}, {C} -> {M} channels, {H}x{W}"
                g = groups.setdefault(key, [0, 0.0, 0.0, set()])
                g[0] += 1
                g[1] += lite_ms.get(name, float("nan"))
                g[2] += dnnl[name][0]
                g[3].add(dnnl[name][1])
            total_lite = sum(g[1] for g in groups.values())
            total_dnnl = sum(g[2] for g in groups.values())
            out += [f"**{precision}, {threads} thread(s)**: Convs in all lite {total_lite:.2f} ms, oneDNN "
                    f"{total_dnnl:.2f} ms ({total_lite / total_dnnl:.2f}); lite's whole model (every node) "
                    f"{sum(lite_ms.values()):.2f} ms.", "",
                    "| layers | count | lite ms | oneDNN ms | lite / oneDNN | oneDNN implementation |",
                    "|---|---:|---:|---:|---:|---|"]
            for key, (count, lt, dt, impl) in sorted(groups.items(), key=lambda kv: -kv[1][2]):
                out.append(f"| {key} | {count} | {lt:.3f} | {dt:.3f} | {lt / dt:.2f} | {', '.join(sorted(impl))} |")
            out.append("")
    publish(out, args.out)


if __name__ == "__main__":
    main()
