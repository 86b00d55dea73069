"""converter_lite command line (MindSpore Lite flag names)."""
from __future__ import annotations

import argparse
import sys

from .api import Converter, FmkType
from .frontends.hf_frontend import WEIGHT_FORMATS, CheckpointOptions
from .ir import ConverterError
from .passes import OPTIMIZE_LEVELS
from .progress import LOG_LEVELS, configure_logging


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
    p.add_argument("--inputDataFormat", default="NCHW", choices=["NCHW", "NHWC"], type=str.upper,
                   help="layout of the written model's 4-D inputs: NCHW (the ONNX model's own, default) or NHWC "
                        "(channels-last: the model transposes them itself)")
    p.add_argument("--weightFile", default=None, metavar="FILE",
                   help="ONNX: the file holding the model's external data, when it is not where the model names it")
    p.add_argument("--saveType", default="MINDIR_LITE", type=str.upper,
                   help="MINDIR_LITE (the .ms file the lite runtime loads; the only one written)")
    p.add_argument("--device", default="CPU", type=str.upper,
                   help="the target the model is converted for: CPU (the backends this build has)")
    p.add_argument("--encryptKey", default=None, metavar="HEX",
                   help="encrypt the written model with AES-GCM under this key (32, 48 or 64 hex digits); load it "
                        "with Model.build_from_file(..., dec_key=KEY)")
    p.add_argument("--encryption", default="true", choices=["true", "false"], type=str.lower,
                   help="with --encryptKey, whether to encrypt (default true)")
    p.add_argument("--logLevel", default="WARNING", choices=list(LOG_LEVELS), type=str.upper,
                   help="converter log lines on stderr from this level (INFO: each phase's progress and timing; "
                        "DEBUG: every pass, sample and layer); progress bars show on a terminal")
    p.add_argument("-v", "--verbose", action="store_true", help="same as --logLevel=INFO")
    hf = p.add_argument_group("checkpoints (--fmk=HF: --modelFile is a Hugging Face directory of config.json and "
                              "safetensors, a PyTorch state dict, a MindSpore .ckpt or a .gguf file)")
    hf.add_argument("--weightPrecision", default=None, choices=list(WEIGHT_FORMATS), type=str.lower,
                    help="how the matrices are stored: float32 (default), bfloat16, float16, int8 (a scale per output "
                         "column) or int4 (a scale per block of 32 rows); norms and biases stay float32")
    hf.add_argument("--blockSize", type=int, default=16, help="tokens per KV-cache block of a decoder (default 16)")
    hf.add_argument("--kvCacheDtype", default="float32", choices=["float32", "bfloat16", "float16", "int8"],
                    type=str.lower, help="element type of a decoder's KV cache (default float32)")
    hf.add_argument("--latentShape", default=None, metavar="F,H,W",
                    help="a video/image generation transformer's latent size (frames,height,width) the graph is built "
                         "for (default: the 480p, 81-frame latent of Wan; FLUX: 1,128,128 for 1024 x 1024)")
    hf.add_argument("--textLength", type=int, default=None,
                    help="FLUX: the T5 rows the transformer is built for (default 512)")
    return p


def _latent_shape(parser, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        dims = tuple(int(v) for v in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) <= 0:
        parser.error(f"--latentShape={text}: expected three positive integers F,H,W")
    return dims


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging("INFO" if args.verbose and args.logLevel == "WARNING" else args.logLevel)
    if args.fmk != "HF" and args.weightPrecision is not None:
        parser.error("--weightPrecision is for --fmk=HF (ONNX models: --fp16 or --configFile)")
    if args.saveType == "MINDIR":
        parser.error("--saveType=MINDIR is MindSpore's training-side format; converter_lite writes MINDIR_LITE "
                     "(.ms) files, which the lite runtime loads")
    if args.saveType != "MINDIR_LITE":
        parser.error(f"--saveType must be MINDIR_LITE, got {args.saveType}")
    if args.device != "CPU":
        parser.error(f"--device={args.device}: this build converts for CPU only (device backends plug in behind the "
                     "runtime's DeviceBackend; none but CPU is built)")
    if args.encryption == "false" and args.encryptKey:
        print("WARNING: --encryption=false: the model is written unencrypted and --encryptKey is not used",
              file=sys.stderr)
    try:
        options = None
        if args.fmk == "HF":
            options = CheckpointOptions(weight_format=args.weightPrecision or "float32", block_size=args.blockSize,
                                        kv_cache_dtype=args.kvCacheDtype,
                                        latent_shape=_latent_shape(parser, args.latentShape),
                                        text_len=args.textLength)
        result = Converter(optimize=args.optimize).convert(
            fmk_type=args.fmk, model_file=args.modelFile, output_file=args.outputFile,
            input_shape=args.inputShape, dump_graph=args.dumpGraph, fp16=args.fp16 == "on",
            config_file=args.configFile, verify_build=args.verifyBuild == "on", checkpoint_options=options,
            encrypt_key=args.encryptKey if args.encryption == "true" else None,
            input_data_format=args.inputDataFormat, weight_file=args.weightFile)
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
