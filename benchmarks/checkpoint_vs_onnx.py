"""The side-by-side shape the model-zoo benchmarks share (benchmarks.detection, benchmarks.dinov3): one model four
ways in one interleaved run (benchmarks.compare's workers): lite on the graph built from the checkpoint, lite on the
torch.onnx export converted by converter_lite, ONNX Runtime and OpenVINO (f32, where installed) on that export."""
from __future__ import annotations

import statistics

from benchmarks.compare import available_engines, diff_cells, measure_variants, p90

SUMMARY_HEAD = ["| model | threads | lite (checkpoint) ms | lite (ONNX) ms | ORT ms | OpenVINO ms | "
                "checkpoint / min(ORT, OV) | lite ONNX / min(ORT, OV) |", "|---|---|---|---|---|---|---|---|"]
DETAIL_HEAD = ["| model | threads | variant | median ms | p90 ms | load ms | peak RSS MB | max abs diff vs ORT (max abs "
               "output) | cosine vs ORT |", "|---|---|---|---|---|---|---|---|---|"]


def run(title: str, paths: dict[str, str], feeds: str, threads: int, rounds: int, batch: int
        ) -> tuple[str, list[str]]:
    """(the summary row, the detail rows) for `paths` {"checkpoint_ms", "onnx_ms", "onnx"} at `threads`."""
    variants = {"lite (checkpoint)": ("lite", paths["checkpoint_ms"]), "lite (ONNX)": ("lite", paths["onnx_ms"]),
                "onnxruntime": ("onnxruntime", paths["onnx"])}
    if "openvino" in available_engines():
        variants["openvino"] = ("openvino", paths["onnx"])
    ws = measure_variants(variants, feeds, threads, rounds, batch)
    med = {k: statistics.median(w.times) for k, w in ws.items()}
    ref = ws["onnxruntime"].out
    detail = [f"| {title} | {threads} | {k} | {med[k]:.2f} | {p90(w.times):.2f} | {w.load_ms:.0f} | {w.rss_mb:.0f} | "
              f"{diff_cells(w.out, ref)} |" for k, w in ws.items()]
    best = min(med["onnxruntime"], med.get("openvino", float("inf")))
    ov = f"{med['openvino']:.2f}" if "openvino" in med else "-"
    summary = (f"| {title} | {threads} | {med['lite (checkpoint)']:.2f} | {med['lite (ONNX)']:.2f} | "
               f"{med['onnxruntime']:.2f} | {ov} | {med['lite (checkpoint)'] / best:.2f} | "
               f"{med['lite (ONNX)'] / best:.2f} |")
    return summary, detail
