"""Reduced precision: --fp16=on and WEIGHT_QUANT (int8/int4 weight storage), FULL_QUANT and DYNAMIC_QUANT (int8
arithmetic) from a config file, with an accuracy report against the float model."""
from .config import QuantConfig, parse_config
from .encoding import StoredWeight, decode, quantize, to_bfloat16, to_float16
from .integer_quant import apply_integer_quant
from .report import accuracy_report, format_report
from .weight_quant import apply_fp16, apply_weight_quant

__all__ = ["QuantConfig", "parse_config", "StoredWeight", "decode", "quantize", "to_bfloat16", "to_float16",
           "accuracy_report", "format_report", "apply_fp16", "apply_weight_quant",
           "apply_integer_quant"]
