"""converter_lite: ONNX (and, later, checkpoints) -> .ms models for the lite runtime.

    import converter
    converter.Converter().convert(fmk_type=converter.FmkType.ONNX, model_file="m.onnx", output_file="m")
"""
from __future__ import annotations

__version__ = "0.1.0"

from .api import ConvertResult, Converter, FmkType  # noqa: E402
from .ir import ConverterError  # noqa: E402

__all__ = ["Converter", "ConvertResult", "ConverterError", "FmkType", "__version__"]
