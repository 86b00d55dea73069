"""DINOv3 ViT-S/16 (224x224, 4 register tokens) side by side: lite on the graph the checkpoint frontend builds from the
safetensors (model_zoo.encoders.dinov3_graph), lite on the model exported by torch.onnx and converted by
converter_lite, ONNX Runtime and OpenVINO (f32) on that export; same input, same threads, interleaved in one run
(benchmarks.compare's workers). transformers' DINOv3ViTModel at the ViT-S/16 size with seeded random weights.

    python -m benchmarks.dinov3 [--threads 1 2] [--rounds 8] [--out benchmarks/results/dinov3_xeon.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import checkpoint_vs_onnx  # noqa: E402
from benchmarks.compare import machine_line  # noqa: E402
from benchmarks.results_io import publish  # noqa: E402

SIZE = 224


def prepare(tmp: str) -> dict[str, str]:
    import torch
    import transformers

    import converter
    from converter.api import FmkType
    torch.manual_seed(0)
    config = transformers.DINOv3ViTConfig(num_register_tokens=4, layerscale_value=1e-5)   # ViT-S/16's sizes
    model = transformers.DINOv3ViTModel(config).eval()
    ckpt = os.path.join(tmp, "ckpt")
    model.save_pretrained(ckpt)
    checkpoint_ms = converter.Converter().convert(FmkType.HF, ckpt, os.path.join(tmp, "dinov3_ckpt"),
                                                  verify_build=False).output_file
    onnx_path = os.path.join(tmp, "dinov3.onnx")

    class Features(torch.nn.Module):   # the same two outputs as the checkpoint graph
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            out = self.m(pixel_values)
            return out.last_hidden_state, out.pooler_output

    with torch.no_grad():
        torch.onnx.export(Features(model), (torch.zeros(1, 3, SIZE, SIZE),), onnx_path, input_names=["pixel_values"],
                          output_names=["last_hidden_state", "pooler_output"], opset_version=17, dynamo=False)
    onnx_ms = converter.Converter().convert("ONNX", onnx_path, os.path.join(tmp, "dinov3_onnx"),
                                            input_shape=f"pixel_values:1,3,{SIZE},{SIZE}").output_file
    return {"checkpoint_ms": checkpoint_ms, "onnx": onnx_path, "onnx_ms": onnx_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    title = f"DINOv3 ViT-S/16 1x3x{SIZE}x{SIZE}"
    summary, detail = list(checkpoint_vs_onnx.SUMMARY_HEAD), list(checkpoint_vs_onnx.DETAIL_HEAD)
    with tempfile.TemporaryDirectory() as tmp:
        paths = prepare(tmp)
        feeds = os.path.join(tmp, "feeds.npz")
        np.savez(feeds, pixel_values=np.random.default_rng(1).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32))
        for threads in args.threads:
            row, rows = checkpoint_vs_onnx.run(title, paths, feeds, threads, args.rounds, args.batch)
            summary.append(row)
            detail += rows
            print(row, flush=True)
    header = [machine_line(), "", f"Medians and 90th percentiles over {args.rounds} interleaved rounds of {args.batch} "
              "runs per variant; ratios < 1: lite is faster. The first output (last_hidden_state [1, 201, 384]) is "
              "compared with ONNX Runtime's.", ""]
    publish(header + summary + [""] + detail, args.out)


if __name__ == "__main__":
    main()
