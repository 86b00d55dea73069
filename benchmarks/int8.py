"""Integer arithmetic side by side: lite's FULL_QUANT and DYNAMIC_QUANT models against lite float32, ONNX Runtime
float32 and the int8 models ONNX Runtime makes itself, on the same inputs and calibration data.

    python -m benchmarks.int8 [--models resnet50 mobilenetv2 bert_base qwen2_decoder] [--threads 1 2] [--rounds 8]
                              [--batch 3] [--calibration 8] [--out benchmarks/results/int8.md]

Variants per model:
- lite f32: the plain conversion. lite FULL_QUANT: MatMul/Gemm/Conv in int8 with input scales calibrated (MAX_MIN)
  on --calibration seeded samples (7-bit weight codes, the default); lite FULL w6: the same with
  integer_weight_bits=6 (codes in [-31, 31], the faster two-group AVX2 tile); lite DYNAMIC_QUANT: the same nodes
  with each run's input range.
- ORT f32; ORT static: `quantize_static` (QDQ, int8 weights per channel, uint8 activations, MinMax calibration on
  the same samples, after `quant_pre_process`); ORT dynamic: `quantize_dynamic` (int8 weights per channel).
- OV int8 (where `nncf` and `openvino` are installed): NNCF post-training quantisation (`nncf.quantize`, its
  default preset, the transformer model type for BERT-like models) of the OpenVINO model on the same samples, run
  at OpenVINO's own precision for the rest of the graph (bf16 on CPUs with AMX or AVX512_BF16).
- Decoders (qwen2_decoder) also get lite int4: DYNAMIC_QUANT with bit_num=4 in blocks of 128 (MatMul weights as
  int4 codes, computed in int8 with each block scaled in float), and ORT int4: `MatMulNBitsQuantizer` (block 128,
  symmetric, MatMulNBits with float activations).
Latency: benchmarks.compare.measure_variants (a fresh worker process per variant and thread count, batches
interleaved in shuffled rounds). Accuracy: cosine of each variant's first output against ONNX Runtime float32 on a
held-back input (compare.make_feeds, seed 0; calibration samples use seeds 1..N).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

from benchmarks.compare import (MODELS, cosine, machine_line, make_feeds, measure_variants, p90, random_feeds,
                                with_placement)
from benchmarks.results_io import write_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = ("resnet50", "mobilenetv2", "bert_base", "qwen2_decoder")
DECODERS = ("qwen2_decoder",)
INT4_BLOCK = 128
# Columns of the summary table, in order; a model without a variant shows "-".
VARIANTS = ("lite f32", "lite FULL_QUANT", "lite FULL w6", "lite DYNAMIC_QUANT", "lite int4", "ORT f32", "ORT static",
            "ORT dynamic",
            "ORT int4", "OV int8")
TRANSFORMERS = ("bert_base", "vit_base", "qwen2_decoder", "whisper_tiny_encoder", "encoder_block")


def calibration_samples(shapes: dict[str, tuple], count: int) -> list[dict[str, np.ndarray]]:
    return [random_feeds(shapes, seed) for seed in range(1, count + 1)]   # seed 0 is the held-back input


def lite_models(onnx_path: str, shapes: dict[str, tuple], samples: list[dict], tmp: str, key: str) -> dict[str, str]:
    sys.path.insert(0, ROOT)
    import converter
    spec = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
    dirs = {}
    for name in shapes:
        d = os.path.join(tmp, f"{key}_cal_{name}")
        os.makedirs(d, exist_ok=True)
        for i, s in enumerate(samples):
            np.save(os.path.join(d, f"{i:03d}.npy"), s[name])
        dirs[name] = d
    cal = ",".join(f"{k}:{v}" for k, v in dirs.items())
    out = {"lite f32": converter.Converter().convert("ONNX", onnx_path, os.path.join(tmp, f"{key}_f32"),
                                                     input_shape=spec).output_file}
    # label: (quant_type, bit_num, extra [common_quant_param] lines, extra sections)
    configs = {"lite FULL_QUANT": ("FULL_QUANT", 8, "", ""),
               "lite FULL w6": ("FULL_QUANT", 8, "integer_weight_bits=6\n", ""),
               "lite DYNAMIC_QUANT": ("DYNAMIC_QUANT", 8, "", "")}
    if key in DECODERS:
        configs["lite int4"] = ("DYNAMIC_QUANT", 4, "", f"[weight_quant_param]\ngroup_size={INT4_BLOCK}\n")
    for label, (quant_type, bits, common, extra) in configs.items():
        name = f"{key}_{label.split()[-1]}_{bits}"
        cfg = os.path.join(tmp, f"{name}.cfg")
        with open(cfg, "w") as f:
            f.write(f"[common_quant_param]\nquant_type={quant_type}\nbit_num={bits}\nmin_quant_weight_channel=1\n"
                    f"{common}[data_preprocess_param]\ncalibrate_path={cal}\ninput_type=NPY\n{extra}")
        out[label] = converter.Converter().convert(
            "ONNX", onnx_path, os.path.join(tmp, name), input_shape=spec, config_file=cfg).output_file
    return out


def ort_models(onnx_path: str, samples: list[dict], tmp: str, key: str) -> dict[str, str]:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    pre = os.path.join(tmp, f"{key}_pre.onnx")
    try:
        quant_pre_process(onnx_path, pre)
    except Exception as e:   # noqa: BLE001 - pre-processing is an optimisation; quantise the original then
        print(f"{key}: quant_pre_process failed ({e}); quantising the model as exported", flush=True)
        pre = onnx_path
    static, dynamic = os.path.join(tmp, f"{key}_ort_static.onnx"), os.path.join(tmp, f"{key}_ort_dynamic.onnx")
    quantize_static(pre, static, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    quantize_dynamic(pre, dynamic, per_channel=True, weight_type=QuantType.QInt8)
    out = {"ORT f32": onnx_path, "ORT static": static, "ORT dynamic": dynamic}
    if key in DECODERS:
        import onnx
        from onnxruntime.quantization import matmul_nbits_quantizer as mnb
        q = mnb.MatMulNBitsQuantizer(onnx.load(onnx_path), algo_config=mnb.DefaultWeightOnlyQuantConfig(
            block_size=INT4_BLOCK, is_symmetric=True, quant_format=QuantFormat.QOperator))
        q.process()
        out["ORT int4"] = os.path.join(tmp, f"{key}_ort_int4.onnx")
        onnx.save(q.model.model, out["ORT int4"])
    return out


def openvino_models(onnx_path: str, samples: list[dict], tmp: str, key: str) -> dict[str, str]:
    """OpenVINO's own int8: the model quantised by NNCF on the calibration samples (none without nncf)."""
    try:
        import nncf
        import openvino as ov
    except ImportError:
        return {}
    model = ov.Core().read_model(onnx_path)
    kwargs = {"model_type": nncf.ModelType.TRANSFORMER} if key in TRANSFORMERS else {}
    quantized = nncf.quantize(model, nncf.Dataset(samples), subset_size=len(samples), **kwargs)
    path = os.path.join(tmp, f"{key}_ov_int8.xml")
    ov.save_model(quantized, path)
    return {"OV int8": path}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS), choices=list(MODELS))
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--warm-runs", type=int, default=0,
                    help="untimed runs at the start of every turn, after the pause (default 0: timed from the first)")
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    head = [machine_line(), "",
            f"Median / p90 over {args.rounds} interleaved rounds of {args.batch} runs; speed-up = lite f32 median / "
            f"variant median; cosine against ONNX Runtime float32 on a held-back input; {args.calibration} calibration "
            "samples (seeded, standard normal images / uniform token ids)." +
            (f" Each turn begins with {args.warm_runs} untimed runs after its pause (warm turns)." if args.warm_runs
             else ""), ""]
    summary = ["| model | threads | " + " | ".join(VARIANTS) + " | lite FULL / lite f32 | lite FULL / best ORT int8 | "
               "lite FULL w6 / lite f32 | lite FULL w6 / best ORT int8 | lite int4 / lite f32 | lite FULL / OV int8 | "
               "vCPU round trip ns |",
               "|---|---|" + "---|" * (len(VARIANTS) + 7)]
    detail = ["| model | threads | variant | median ms | p90 ms | speed-up vs lite f32 | cosine vs f32 | file MB | "
              "load ms | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(head + summary), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models:
            title, build = MODELS[key]
            onnx_path = os.path.join(tmp, f"{key}.onnx")
            shapes = build(onnx_path)
            samples = calibration_samples(shapes, args.calibration)
            paths = {**lite_models(onnx_path, shapes, samples, tmp, key), **ort_models(onnx_path, samples, tmp, key),
                     **openvino_models(onnx_path, samples, tmp, key)}
            feeds_path = os.path.join(tmp, f"{key}_feeds.npz")
            make_feeds(shapes, feeds_path)
            engine_of = {"lite": "lite", "ORT": "onnxruntime", "OV": "openvino_default"}
            variants = {label: (engine_of[label.split()[0]], p) for label, p in paths.items()}
            for threads in args.threads:
                ws, placement = with_placement(
                    threads, lambda: measure_variants(variants, feeds_path, threads, args.rounds, args.batch,
                                                   warm_runs=args.warm_runs))
                med = {k: statistics.median(w.times) for k, w in ws.items()}
                ref = ws["ORT f32"].out
                for label, w in ws.items():
                    detail.append(f"| {title} | {threads} | {label} | {med[label]:.1f} | {p90(w.times):.1f} | "
                                  f"{med['lite f32'] / med[label]:.2f} | {cosine(w.out, ref):.5f} | "
                                  f"{os.path.getsize(paths[label]) / 1e6:.1f} | {w.load_ms:.0f} | {w.rss_mb:.0f} |")
                best_ort = min(med["ORT static"], med["ORT dynamic"])
                cells = [f"{med[v]:.1f}" if v in med else "-" for v in VARIANTS]
                int4 = f"{med['lite f32'] / med['lite int4']:.2f}x faster" if "lite int4" in med else "-"
                ov = f"{med['lite FULL_QUANT'] / med['OV int8']:.2f}" if "OV int8" in med else "-"
                summary.append(f"| {title} | {threads} | " + " | ".join(cells) +
                               f" | {med['lite f32'] / med['lite FULL_QUANT']:.2f}x | "
                               f"{med['lite FULL_QUANT'] / best_ort:.2f} | {med['lite f32'] / med['lite FULL w6']:.2f}x | "
                               f"{med['lite FULL w6'] / best_ort:.2f} | {int4} | {ov} | {placement} |")
                print(summary[-1], flush=True)
    text = "\n".join(head + summary + [""] + detail)
    print("\n".join(detail))
    if args.out:
        write_table(args.out, text)


if __name__ == "__main__":
    main()
