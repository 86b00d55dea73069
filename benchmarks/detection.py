"""YOLO detectors side by side: lite on the graph converted from the checkpoint (model_zoo convert: the ultralytics
state dict and yaml -> model_zoo.detection.yolo_graph), lite on the same model exported to ONNX (torch.onnx.export,
then converter_lite's ONNX path), ONNX Runtime and OpenVINO (f32) on that ONNX file; same input, same thread count,
interleaved in one run (benchmarks.compare's workers). The model is the PyTorch reference at its full size (80
classes) with seeded random weights: timings do not depend on the values. Then the pipeline's own costs on one
picture (letterbox, the graph, NMS / top-k: lite.detection.YoloDetector).

    python -m benchmarks.detection [--models yolov8n yolov10n] [--threads 1 2] [--size 640] [--rounds 8]
                                   [--out benchmarks/results/detection.md]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import checkpoint_vs_onnx  # noqa: E402
from benchmarks.compare import machine_line  # noqa: E402
from benchmarks.results_io import publish  # noqa: E402

MODELS = {"yolov8n": ("YOLOv8n", "YOLOV8", "n"), "yolov8s": ("YOLOv8s", "YOLOV8", "s"),
          "yolov10n": ("YOLOv10n", "YOLOV10N", "n")}


def prepare(key: str, size: int, tmp: str) -> dict[str, str]:
    """The checkpoint (state dict + yaml), its lite conversion, the ONNX export and its lite conversion."""
    import torch
    import yaml

    import converter
    from benchmarks.compare import export_yolo, yolo_reference
    from model_zoo.families.yolo import convert_yolo
    _, base, scale = MODELS[key]
    model, model_yaml = yolo_reference(base, scale)
    ckpt = os.path.join(tmp, key)
    os.makedirs(ckpt, exist_ok=True)
    torch.save({"model." + k: v for k, v in model.state_dict().items()}, os.path.join(ckpt, f"{key}.pt"))
    with open(os.path.join(ckpt, f"{key}.yaml"), "w") as f:
        yaml.safe_dump(model_yaml, f)
    lite_dir = os.path.join(tmp, f"{key}_lite")
    convert_yolo(ckpt, lite_dir, "float32", size, size)
    onnx_path = os.path.join(tmp, f"{key}.onnx")
    export_yolo(model, onnx_path, size)
    onnx_ms = converter.Converter().convert("ONNX", onnx_path, os.path.join(tmp, f"{key}_onnx"),
                                            input_shape=f"images:1,3,{size},{size}").output_file
    return {"dir": lite_dir, "checkpoint_ms": os.path.join(lite_dir, "yolo.ms"), "onnx": onnx_path,
            "onnx_ms": onnx_ms}


def pipeline_costs(lite_dir: str, size: int, threads: int, runs: int = 5) -> tuple[float, float, float, int]:
    """Median ms of preprocessing (one 1080x810 picture), the graph and the post-processing, and the detections."""
    from lite.detection import YoloDetector, one_to_one_detections, suppressed_detections
    det = YoloDetector(lite_dir, threads=threads)
    picture = np.random.default_rng(0).integers(0, 256, (810, 1080, 3), dtype=np.uint8)
    pre, graph, post = [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        pixels, _ = det.preprocess([picture])
        t1 = time.perf_counter()
        out = det.raw(pixels)
        t2 = time.perf_counter()
        rows = one_to_one_detections(out) if det.end2end else suppressed_detections(out)
        t3 = time.perf_counter()
        pre.append(t1 - t0), graph.append(t2 - t1), post.append(t3 - t2)
    med = lambda v: statistics.median(v) * 1e3  # noqa: E731
    return med(pre), med(graph), med(post), len(rows[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["yolov8n", "yolov10n"], choices=list(MODELS))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    summary, detail = list(checkpoint_vs_onnx.SUMMARY_HEAD), list(checkpoint_vs_onnx.DETAIL_HEAD)
    costs = ["| model | threads | letterbox ms (1080x810 picture) | graph ms | post-processing ms | detections |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models:
            title = f"{MODELS[key][0]} 1x3x{args.size}x{args.size}"
            paths = prepare(key, args.size, tmp)
            feeds = os.path.join(tmp, f"{key}_feeds.npz")
            np.savez(feeds, images=np.random.default_rng(1).random((1, 3, args.size, args.size), dtype=np.float32))
            for threads in args.threads:
                row, rows = checkpoint_vs_onnx.run(title, paths, feeds, threads, args.rounds, args.batch)
                summary.append(row)
                detail += rows
                print(row, flush=True)
                pre, graph, post, n = pipeline_costs(paths["dir"], args.size, threads)
                costs.append(f"| {title} | {threads} | {pre:.2f} | {graph:.2f} | {post:.2f} | {n} |")
    header = [machine_line(), "", f"Medians and 90th percentiles over {args.rounds} interleaved rounds of {args.batch} "
              "runs per variant (benchmarks.compare's worker processes); ratios < 1: lite is faster. Random weights "
              "(seed 0, full size, 80 classes); the output is the head's decoded [1, 84, anchors] (YOLOv10: the "
              "one-to-one [1, anchors, 84]), compared with ONNX Runtime's.", ""]
    publish(header + summary + [""] + detail + ["", "The pipeline on one picture (lite.detection.YoloDetector, "
                                                 "medians of 5):", ""] + costs, args.out)


if __name__ == "__main__":
    main()
