"""The Python API on ARM64 (issue 39): run by the target's own Python under qemu-user (tests/arm64/run.py starts it),
with the cross-built extension (lite._lite for aarch64) and numpy for aarch64.

    qemu-aarch64 -cpu max -L ROOT ROOT/usr/bin/python3.11 tests/arm64/python_check.py --stage STAGE --corpus DIR \
        --tolerances JSON [--cases a,b]

Each corpus case goes through lite.Model (build_from_file, resize where the case has an input shape, predict) and is
compared with the x86 runtime's outputs of the same compute precision by benchmark_lite's two measures (the mean
relative bias over the differing elements, and the max abs diff against the output's scale), with the job's
tolerances. Then the API's refusals: a wrong input shape and a truncated file raise errors instead of crashing, and a
reference 1% off must fail the comparison. One JSON line per check on stdout; exit status 1 on any failure.
Only the standard library, numpy and lite: the target's Python has nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def read_reference(path: str) -> dict:
    """benchmark_lite's --benchmarkDataFile: per output a line 'name rank dims...' and a line of values."""
    import numpy as np
    with open(path) as f:
        lines = f.read().splitlines()
    out = {}
    for head, values in zip(lines[0::2], lines[1::2]):
        parts = head.split()
        name, rank = parts[0], int(parts[1])
        shape = tuple(int(d) for d in parts[2:2 + rank])
        out[name] = np.array([float(v) for v in values.split()], dtype=np.float64).reshape(shape)
    return out


def compare(actual, expected) -> tuple[float, float]:
    """(mean bias in percent, max abs diff), as benchmark_lite's accuracy check computes them."""
    import numpy as np
    a = np.asarray(actual, dtype=np.float64).ravel()
    b = np.asarray(expected, dtype=np.float64).ravel()
    diff = np.abs(a - b)
    nan = np.isnan(a) != np.isnan(b)
    diff[nan] = np.inf
    max_abs = float(diff.max()) if diff.size else 0.0
    differ = ~(diff <= 1e-8 + 1e-5 * np.abs(b))
    rel = np.where(np.abs(b) > 1e-5, diff / np.maximum(np.abs(b), 1e-30), diff)[differ]
    bias = 100.0 * float(rel.sum()) / rel.size if rel.size else 0.0
    return bias, max_abs


def tolerance_class(case: dict, precision: str) -> str:
    if case["kind"] == "int8":
        return "int8"
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(precision, case["kind"])


def run_case(lite, corpus: str, case: dict, tolerances: dict) -> dict:
    import numpy as np
    t0 = time.perf_counter()
    ctx = lite.Context()
    ctx.cpu.thread_num = case["threads"]
    ctx.cpu.precision_mode = case["precision"]
    model = lite.Model()
    model.build_from_file(os.path.join(corpus, case["model"]), lite.ModelType.MINDIR_LITE, ctx)
    inputs = model.get_inputs()
    if case["input_shape"]:
        shapes = dict(item.split(":") for item in case["input_shape"].split(";"))
        model.resize(inputs, [[int(d) for d in shapes[t.name].split(",")] for t in inputs])
        inputs = model.get_inputs()
    feeds = {}
    for t, path in zip(inputs, case["inputs"]):
        dtype = np.dtype({"bool": "bool"}.get(t.dtype.name.lower(), t.dtype.name.lower())).newbyteorder("<")
        feeds[t.name] = np.fromfile(os.path.join(corpus, path), dtype=dtype).reshape(t.shape)
    outputs = {t.name: t.get_data_to_numpy() for t in model.predict(feeds)}
    precision = model.compute_precision
    kind = tolerance_class(case, precision)
    tol = tolerances[kind]
    # run.reference_for's rule (this file runs alone under the emulated Python): bfloat16 held to float32
    refs = case["references"]
    reference = read_reference(os.path.join(corpus, refs["float32"] if precision == "bfloat16" else
                                            refs.get(precision, refs["float32"])))
    problems, worst_bias, worst_rel = [], 0.0, 0.0
    for name, expected in reference.items():
        if name not in outputs:
            problems.append(f"no output '{name}'")
            continue
        if outputs[name].shape != expected.shape:
            problems.append(f"'{name}': shape {outputs[name].shape}, the reference's {expected.shape}")
            continue
        bias, max_abs = compare(outputs[name], expected)
        scale = case["scales"].get(name) or 1.0
        worst_bias, worst_rel = max(worst_bias, bias), max(worst_rel, max_abs / scale)
        if not bias <= tol["bias"]:
            problems.append(f"'{name}': bias {bias:g}% > {tol['bias']:g}%")
        if not max_abs / scale <= tol["max_rel"]:
            problems.append(f"'{name}': max abs diff {max_abs:.3g} = {max_abs / scale:.2g} of the scale > "
                            f"{tol['max_rel']:g}")
    return {"case": case["name"], "ok": not problems, "precision": precision, "kind": kind, "bias": worst_bias,
            "max_rel": worst_rel, "seconds": time.perf_counter() - t0, "detail": "; ".join(problems)}


def refusals(lite, corpus: str, case: dict) -> dict:
    """A wrong input shape and a truncated model file: clear errors, the process alive."""
    import numpy as np
    t0 = time.perf_counter()
    problems = []
    model = lite.Model()
    model.build_from_file(os.path.join(corpus, case["model"]), lite.ModelType.MINDIR_LITE, lite.Context())
    t = model.get_inputs()[0]
    try:
        model.predict({t.name: np.zeros([d + 1 for d in t.shape], dtype=np.float32)})
        problems.append("a wrong input shape was accepted")
    except ValueError:
        pass
    with open(os.path.join(corpus, case["model"]), "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "truncated.ms")
        with open(path, "wb") as f:
            f.write(data[:len(data) // 2])
        try:
            lite.Model().build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
            problems.append("a truncated model file was loaded")
        except lite.ModelFormatError:
            pass
    return {"case": "refusals", "ok": not problems, "seconds": time.perf_counter() - t0,
            "detail": "; ".join(problems)}


def self_check(corpus: str, case: dict) -> dict:
    """The comparison is not vacuous: a reference against itself scaled by 1.01 gives a bias of 1%."""
    reference = read_reference(os.path.join(corpus, case["references"]["float32"]))
    biases = [compare(v * 1.01, v)[0] for v in reference.values()]
    ok = all(0.9 <= b <= 1.1 for b in biases)
    return {"case": f"self-check ({case['name']} 1% off)", "ok": ok, "bias": max(biases), "seconds": 0.0,
            "detail": "" if ok else f"biases {biases} for a reference 1% off"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stage", required=True, help="a folder holding the lite package with the aarch64 extension")
    p.add_argument("--corpus", required=True, help="the corpus directory (tests/arm64/corpus.py)")
    p.add_argument("--tolerances", required=True, help="JSON: kind -> {bias, max_rel}")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = p.parse_args(argv)
    sys.path.insert(0, args.stage)
    import platform

    import lite
    features = lite._lite.cpu_features()
    print(json.dumps({"case": "import", "ok": platform.machine() == "aarch64" and "arm" in features,
                      "detail": f"{platform.machine()}, {features.get('arm')}", "seconds": 0.0}), flush=True)
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        cases = json.load(f)["cases"]
    wanted = [c for c in args.cases.split(",") if c]
    if wanted:
        cases = [c for c in cases if c["name"] in wanted]
    tolerances = json.loads(args.tolerances)
    failed = 0
    for case in cases:
        try:
            r = run_case(lite, args.corpus, case, tolerances)
        except Exception as e:   # one case's error is reported and the others still run
            r = {"case": case["name"], "ok": False, "seconds": 0.0, "detail": f"{type(e).__name__}: {e}"}
        failed += not r["ok"]
        print(json.dumps(r), flush=True)
    fp32 = [c for c in cases if c["kind"] == "fp32" and not c["input_shape"]]
    if fp32:
        for r in (refusals(lite, args.corpus, fp32[0]), self_check(args.corpus, fp32[0])):
            failed += not r["ok"]
            print(json.dumps(r), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
