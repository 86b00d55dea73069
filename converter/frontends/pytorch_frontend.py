"""PyTorch models (`--fmk=PYTORCH`), as MindSpore Lite accepts them: a TorchScript archive (`torch.jit.save`) or a
`torch.export` archive (`torch.export.save`, `.pt2`). Both go through the ONNX path: exported with torch.onnx (the
TorchScript exporter for TorchScript at the `--inputShape` shapes, the dynamo exporter for an ExportedProgram with its
own dynamic dims), then imported as any ONNX model. Loading a TorchScript archive runs no Python pickles; an export
archive is read by torch.export.load."""
from __future__ import annotations

import os
import tempfile
import zipfile

from converter.ir import ConverterError, Graph

from .onnx_frontend import import_onnx


def _is_export_archive(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except zipfile.BadZipFile:
        raise ConverterError(f"{os.path.basename(path)}: not a TorchScript or torch.export archive (not a zip file)") \
            from None
    # torch.export writes <name>/archive_format and models/*.json; TorchScript writes <name>/code/__torch__.py
    return any(n.endswith("/archive_format") for n in names) and not any("/code/" in n for n in names)


def _torchscript_inputs(module) -> list[str]:
    args = [a.name for a in module.forward.schema.arguments]
    return args[1:] if args and args[0] == "self" else args


def import_pytorch(path: str, shapes: dict[str, list[int]]) -> Graph:
    import torch
    if not os.path.isfile(path):
        raise ConverterError(f"model file '{path}' does not exist")
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "model.onnx")
        if _is_export_archive(path):
            try:
                program = torch.export.load(path)
            except Exception as e:
                raise ConverterError(f"{os.path.basename(path)}: cannot load the torch.export archive "
                                     f"({type(e).__name__}: {e})") from None
            try:
                torch.onnx.export(program, (), onnx_path, dynamo=True, external_data=True)
            except Exception as e:
                raise ConverterError(f"{os.path.basename(path)}: torch.onnx could not export the program "
                                     f"({type(e).__name__}: {str(e).splitlines()[0][:300]})") from None
        else:
            try:
                module = torch.jit.load(path, map_location="cpu").eval()
            except Exception as e:
                raise ConverterError(f"{os.path.basename(path)}: not a TorchScript archive "
                                     f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
            names = _torchscript_inputs(module)
            missing = [n for n in names if n not in shapes]
            if missing:
                raise ConverterError(f"a TorchScript model needs the shape of each input: --inputShape for "
                                     f"{', '.join(missing)} (e.g. \"{missing[0]}:1,3,224,224\")")
            args = tuple(torch.zeros(shapes[n]) for n in names)
            try:
                torch.onnx.export(module, args, onnx_path, dynamo=False, input_names=names)
            except Exception as e:
                raise ConverterError(f"{os.path.basename(path)}: torch.onnx could not export the TorchScript model "
                                     f"({type(e).__name__}: {str(e).splitlines()[0][:300]})") from None
        graph = import_onnx(onnx_path, shapes)
    graph.metadata["source_model"] = os.path.abspath(path)
    graph.metadata["source_format"] = "PYTORCH"
    return graph
