"""The Python entry point, `Converter.convert`, shared by the command line."""
from __future__ import annotations

import enum
import os
import time
from dataclasses import dataclass, field

from .frontends.hf_frontend import CheckpointOptions
from .frontends.hf_frontend import build_graph as build_checkpoint_graph
from .frontends.onnx_frontend import import_onnx, parse_input_shapes
from .graph_dump import graph_report, op_counts, write_json_atomically
from .ir import ConverterError, Graph
from .runtime_check import build_check, check_runtime_kernels
from .passes import OPTIMIZE_LEVELS, PassReport, run_pipeline
from .quantization import accuracy_report, apply_fp16, apply_integer_quant, apply_weight_quant, format_report, parse_config
from .input_format import apply_input_format
from .writer import write_ms


class FmkType(enum.Enum):
    ONNX = "ONNX"
    HF = "HF"   # a checkpoint: Hugging Face directory, state dict, MindSpore .ckpt or GGUF (frontends/hf_frontend.py)
    PYTORCH = "PYTORCH"   # a TorchScript or torch.export archive, through the ONNX path (frontends/pytorch_frontend.py)


@dataclass
class ConvertResult:
    output_file: str
    nodes: int
    tensors: int
    weight_bytes: int
    file_bytes: int
    seconds: float
    passes: dict[str, int] = field(default_factory=dict)
    # With --fp16 or a WEIGHT_QUANT config: the accuracy report (quantization/report.py), also saved as
    # report_file; {"skipped": why} when the models could not be run.
    quant_report: dict | None = None
    report_file: str | None = None

    def summary(self) -> str:
        fired = ", ".join(f"{k}={v}" for k, v in self.passes.items() if v) or "none"
        text = (f"output: {self.output_file}\n"
                f"nodes: {self.nodes}, tensors: {self.tensors}, weights: {self.weight_bytes} bytes, "
                f"file: {self.file_bytes} bytes, time: {self.seconds * 1000:.1f} ms\n"
                f"passes fired: {fired}")
        if self.quant_report is not None:
            text += "\n" + (f"accuracy report skipped: {self.quant_report['skipped']}" if "skipped" in self.quant_report
                            else format_report(self.quant_report) + f"\nreport: {self.report_file}")
        return text


def output_path(output_file: str) -> str:
    """`output_file` with '.ms' appended when missing; a directory (or a path ending in a separator) is refused,
    where appending would write a hidden '<dir>/.ms'."""
    if not output_file or output_file.endswith(("/", os.sep)) or os.path.isdir(output_file):
        raise ConverterError(f"--outputFile '{output_file}' names a directory: give the file name (e.g. "
                             f"'{os.path.join(output_file or '.', 'model')}'; '.ms' is appended)")
    return output_file if output_file.endswith(".ms") else output_file + ".ms"


class Converter:
    """Converts a model file into a .ms file. Mirrors MindSpore Lite's converter options."""

    def __init__(self, optimize: str = "general"):
        if optimize not in OPTIMIZE_LEVELS:
            raise ValueError(f"optimize must be one of {OPTIMIZE_LEVELS}, got '{optimize}'")
        self.optimize = optimize
        self.input_shape: str | dict[str, list[int]] | None = None

    def load(self, fmk_type: FmkType | str, model_file: str,
             input_shape: str | dict[str, list[int]] | None = None, weight_file: str | None = None) -> Graph:
        fmk = FmkType(fmk_type.value if isinstance(fmk_type, FmkType) else str(fmk_type).upper())
        shapes = parse_input_shapes(input_shape) if isinstance(input_shape, str) or input_shape is None \
            else {k: list(v) for k, v in input_shape.items()}
        if weight_file is not None and fmk is not FmkType.ONNX:
            raise ConverterError("--weightFile is for ONNX models whose external data lies elsewhere")
        if fmk is FmkType.ONNX:
            return import_onnx(model_file, shapes, weight_file)
        if fmk is FmkType.PYTORCH:
            from .frontends.pytorch_frontend import import_pytorch
            return import_pytorch(model_file, shapes)
        if fmk is FmkType.HF:
            raise ConverterError("checkpoints are converted by convert() (their graphs are built fused, with the "
                                 "weights streamed to the file), not loaded")
        raise ConverterError(f"framework {fmk} is not supported")

    def convert(self, fmk_type: FmkType | str, model_file: str, output_file: str,
                input_shape: str | dict[str, list[int]] | None = None, optimize: str | None = None,
                dump_graph: str | None = None, fp16: bool = False, config_file: str | None = None,
                verify_build: bool = True, checkpoint_options: CheckpointOptions | None = None,
                encrypt_key: str | bytes | None = None, input_data_format: str = "NCHW",
                weight_file: str | None = None) -> ConvertResult:
        """Writes `output_file` (+ '.ms'), and with `dump_graph` a JSON file of the optimised graph and the
        per-pass report (see graph_dump.py). `fp16` stores float32 weights as float16; `config_file` (INI,
        see quantization/config.py) quantises weights. Either way the accuracy report against the float
        model is returned and saved next to the output as <name>.quant_report.json. Raises ConverterError
        and leaves no file on failure. FmkType.HF: `model_file` is a checkpoint (directory or file) and
        `checkpoint_options` say how its matrices are stored (`fp16` = float16 weights; `config_file` is then the
        model's config.json when it is not beside the weights). `verify_build` (with every input shape fixed): the written file is built once
        in the runtime before it is kept, so what its shape checks refuse fails here (runtime_check.py)."""
        t0 = time.perf_counter()
        key = self._encryption_key(encrypt_key)
        if FmkType(fmk_type.value if isinstance(fmk_type, FmkType) else str(fmk_type).upper()) is FmkType.HF:
            if input_data_format.upper() != "NCHW" or weight_file is not None:
                raise ConverterError("--inputDataFormat and --weightFile are for ONNX / PyTorch models")
            return self._convert_checkpoint(model_file, output_file, fp16, config_file, verify_build, dump_graph,
                                            checkpoint_options, t0, key)
        quant = parse_config(config_file) if config_file else None   # a bad config fails before any work
        graph = self.load(fmk_type, model_file, input_shape if input_shape is not None else self.input_shape,
                          weight_file)
        apply_input_format(graph, input_data_format)
        before = op_counts(graph)
        level = optimize or self.optimize
        report = run_pipeline(graph, level)
        path = output_path(output_file)
        for target in [path] + ([dump_graph] if dump_graph else []):
            out_dir = os.path.dirname(os.path.abspath(target))
            if not os.path.isdir(out_dir):
                raise ConverterError(f"output directory '{out_dir}' does not exist")
        # The float model's constants, for the accuracy report (compression replaces their values).
        originals = {n: t.data for n, t in graph.tensors.items() if t.is_constant} if fp16 or quant else {}
        if quant is not None and quant.quant_type in ("FULL_QUANT", "DYNAMIC_QUANT"):
            compressed = apply_integer_quant(graph, quant, originals)   # calibrates on the float graph first
        else:
            compressed = apply_weight_quant(graph, quant) if quant else []
        if fp16:
            compressed += apply_fp16(graph)
        check_runtime_kernels(graph)   # what the runtime would refuse, refused here: no file is written
        s = write_ms(graph, path, verify=build_check(graph) if verify_build else None, encrypt_key=key)
        if dump_graph:
            write_json_atomically(graph_report(graph, report, before, {
                "model": os.path.abspath(model_file), "output": s.path, "optimize": level}), dump_graph)
        result = ConvertResult(s.path, s.nodes, s.tensors, s.weight_bytes, s.file_bytes, time.perf_counter() - t0,
                               report.fired)
        if fp16 or quant:
            result.quant_report = self._accuracy(graph, originals, s.path, quant, len(compressed), key)
            result.report_file = path[:-3] + ".quant_report.json"
            write_json_atomically(result.quant_report, result.report_file)
        return result

    def _convert_checkpoint(self, model_file: str, output_file: str, fp16: bool, config_file: str | None,
                            verify_build: bool, dump_graph: str | None, options: CheckpointOptions | None,
                            t0: float, key: bytes | None = None) -> ConvertResult:
        if config_file and not config_file.endswith(".json"):
            raise ConverterError("--fmk=HF takes its precision from --weightPrecision (CheckpointOptions); --configFile "
                                 "is then the model's config.json, for weights without one beside them")
        options = options or CheckpointOptions(weight_format="float16" if fp16 else "float32")
        if fp16 and options.weight_format not in ("float32", "float16"):
            raise ConverterError(f"fp16 and weight format {options.weight_format} both given")
        if fp16:
            options.weight_format = "float16"
        path = output_path(output_file)
        out_dir = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(out_dir):
            raise ConverterError(f"output directory '{out_dir}' does not exist")
        graph, weights = build_checkpoint_graph(model_file, options, config_file)
        with weights:
            check_runtime_kernels(graph)
            s = write_ms(graph, path, verify=build_check(graph) if verify_build else None, encrypt_key=key)
        if dump_graph:
            write_json_atomically(graph_report(graph, PassReport({}, {}), op_counts(graph), {
                "model": os.path.abspath(model_file), "output": s.path, "optimize": "built fused"}), dump_graph)
        return ConvertResult(s.path, s.nodes, s.tensors, s.weight_bytes, s.file_bytes, time.perf_counter() - t0, {})

    @staticmethod
    def _encryption_key(key: str | bytes | None) -> bytes | None:
        if key is None:
            return None
        from lite.encryption import parse_key
        try:
            return parse_key(key)
        except (ValueError, TypeError) as e:
            raise ConverterError(f"--encryptKey: {e}") from None

    @staticmethod
    def _accuracy(graph: Graph, originals: dict, path: str, quant, compressed: int, key: bytes | None = None) -> dict:
        try:
            return accuracy_report(graph, originals, path, quant, compressed, key)
        except ConverterError as e:
            if quant is not None and quant.calibrate_path:
                raise   # the user's calibration data is wrong: say so
            return {"skipped": str(e)}
        except Exception as e:   # the runtime cannot run this model: the conversion itself stands
            return {"skipped": f"{type(e).__name__}: {e}"}
