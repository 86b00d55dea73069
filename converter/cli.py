"""converter_lite command line (MindSpore Lite flag names)."""
from __future__ import annotations

import argparse
import sys

from .api import Converter, FmkType
from .frontends.hf_frontend import WEIGHT_FORMATS, CheckpointOptions
from .ir import ConverterError
from .passes import OPTIMIZE_LEVELS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="converter_lite",
        description="Convert a model into a .ms file for the lite runtime.",
        epilog="examples: converter_lite --fmk=ONNX --modelFile=model.onnx --outputFile=model "
               "--inputShape=\"input:1,3,224,224\"; converter_lite --fmk=HF --modelFile=./Qwen2.5-0.5B "
               "--outputFile=qwen --weightPrecision=int4; converter_lite --fmk=PYTORCH --modelFile=net.pt2 "
               "--outputFile=net (a TorchScript .pt also needs --inputShape)")
    p.add_argument("--fmk", required=True, choices=[f.value for f in FmkType], type=str.upper,
                   help="source framework of --modelFile")
    p.add_argument("--modelFile", required=True, help="path of the source model")
    p.add_argument("--outputFile", required=True, help="output path; '.ms' is appended when missing")
    p.add_argument("--inputShape", default=None,
                   help="fix input shapes, e.g. \"input:1,3,224,224;mask:1,128\"; other dynamic dims stay -1")
    p.add_argument("--optimize", default="general", choices=OPTIMIZE_LEVELS,
                   help="graph optimisation: 'none' only normalises, 'general' folds constants, removes "
                        "identities and dead nodes, fuses decomposed LayerNorm/RMSNorm/GELU, rotary embeddings and "
                        "attention, folds BatchNorm, Pad, bias, residual Add and activations into Conv/Gemm/MatMul "
                        "(default)")
    p.add_argument("--dumpGraph", default=None, metavar="FILE",
                   help="also write the optimised graph and a per-pass report (what fired, how often, operator "
                        "counts before and after) to FILE as JSON")
    p.add_argument("--fp16", default="off", choices=["on", "off"], type=str.lower,
                   help="store float32 weights as float16 (half the file); the runtime computes in float32")
    p.add_argument("--configFile", default=None, metavar="FILE",
                   help="quantisation config (INI, MindSpore Lite's sections and keys): WEIGHT_QUANT with "
                        "bit_num=8 or 4, per channel or group-wise; prints and saves an accuracy report")
    p.add_argument("--verifyBuild", default="on", choices=["on", "off"], type=str.lower,
                   help="with fixed input shapes, build the written model once in the runtime before keeping it, so "
                        "a shape the runtime refuses fails the conversion (off: skip it, e.g. for very large models)")
    hf = p.add_argument_group("checkpoints (--fmk=HF: --modelFile is a Hugging Face directory of config.json and "
                              "safetensors, a PyTorch state dict, a MindSpore .ckpt or a .gguf file)")
    hf.add_argument("--weightPrecision", default=None, choices=list(WEIGHT_FORMATS), type=str.lower,
                    help="how the matrices are stored: float32 (default), bfloat16, float16, int8 (a scale per output "
                         "column) or int4 (a scale per block of 32 rows); norms and biases stay float32")
    hf.add_argument("--blockSize", type=int, default=16, help="tokens per KV-cache block of a decoder (default 16)")
    hf.add_argument("--kvCacheDtype", default="float32", choices=["float32", "bfloat16", "float16", "int8"],
                    type=str.lower, help="element type of a decoder's KV cache (default float32)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fmk != "HF" and args.weightPrecision is not None:
        parser.error("--weightPrecision is for --fmk=HF (ONNX models: --fp16 or --configFile)")
    try:
        options = None
        if args.fmk == "HF":
            options = CheckpointOptions(weight_format=args.weightPrecision or "float32", block_size=args.blockSize,
                                        kv_cache_dtype=args.kvCacheDtype)
        result = Converter(optimize=args.optimize).convert(
            fmk_type=args.fmk, model_file=args.modelFile, output_file=args.outputFile,
            input_shape=args.inputShape, dump_graph=args.dumpGraph, fp16=args.fp16 == "on",
            config_file=args.configFile, verify_build=args.verifyBuild == "on", checkpoint_options=options)
    except ConverterError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        print("CONVERT RESULT FAILED:1", file=sys.stderr)
        return 1
    except Exception as e:   # an internal fault still ends with a clear line and no output file
        print(f"ERROR: internal converter error: {type(e).__name__}: {e}", file=sys.stderr)
        print("CONVERT RESULT FAILED:2", file=sys.stderr)
        return 2
    print(result.summary())
    print("CONVERT RESULT SUCCESS:0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
