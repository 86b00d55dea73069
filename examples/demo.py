"""The end-to-end path in one script: build an ONNX model, convert it, run it, compare with ONNX Runtime.

    python examples/demo.py [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import converter
import lite
from model_zoo import build_tiny_onnx


def median_ms(fn, runs: int = 50) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    onnx_path = build_tiny_onnx("small_cnn", os.path.join(args.out, "small_cnn.onnx"))
    result = converter.Converter().convert(converter.FmkType.ONNX, onnx_path, os.path.join(args.out, "small_cnn"))
    print("== converter_lite ==")
    print(result.summary())

    ctx = lite.Context()
    ctx.cpu.thread_num = args.threads
    model = lite.Model()
    model.build_from_file(result.output_file, lite.ModelType.MINDIR_LITE, ctx)
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    out = model.predict([x])[0]
    y = out.get_data_to_numpy()
    print("== lite ==")
    print(f"output '{out.name}': shape {out.shape}, dtype {out.dtype.name.lower()}, "
          f"argmax {y.argmax(axis=1).tolist()}, row sums {np.round(y.sum(axis=1), 4).tolist()}")

    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    print(f"max |lite - onnxruntime| = {np.abs(y - ref).max():.3e}")
    lite_ms = median_ms(lambda: model.predict([x]))
    ort_ms = median_ms(lambda: sess.run(None, {"x": x}))
    print(f"latency (batch 4, {args.threads} thread(s), median): lite {lite_ms:.3f} ms, "
          f"onnxruntime {ort_ms:.3f} ms")


if __name__ == "__main__":
    main()
