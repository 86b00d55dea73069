"""The quantisation config file (`converter_lite --configFile=quant.cfg`): INI with MindSpore Lite's section
and key names where they mean the same. Every unknown section or key, bad value or missing calibration
directory is a ConverterError naming the file and line."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..ir import ConverterError

QUANT_TYPES = ("WEIGHT_QUANT", "FULL_QUANT", "DYNAMIC_QUANT")
ACTIVATION_METHODS = ("MAX_MIN", "KL", "REMOVAL_OUTLIER")
WEIGHT_ALGORITHMS = ("RTN", "GPTQ")


@dataclass
class QuantConfig:
    quant_type: str = "WEIGHT_QUANT"
    bit_num: int = 8
    min_quant_weight_size: int = 0
    min_quant_weight_channel: int = 16
    skip_quant_node: list[str] = field(default_factory=list)
    integer_weight_bits: int = 7        # (ours) FULL/DYNAMIC_QUANT 8-bit weight codes in 7 bits, or 6: faster on AVX2
    per_channel: bool = True            # [weight_quant_param]; False: one scale per tensor
    group_size: int = 0                 # [weight_quant_param] (ours): blocks along the reduction axis; 0: none
    symmetric: bool = True              # [weight_quant_param] (ours): signed codes, zero point 0
    algorithm: str = "RTN"              # [weight_quant_param] (ours): round to nearest, or GPTQ on calibration data
    damp: float = 0.01                  # [weight_quant_param] (ours): GPTQ's damping, a fraction of H's mean diagonal
    calibrate_path: dict[str, str] = field(default_factory=dict)   # input name -> directory
    calibrate_size: int = 0             # 0: every file found
    input_type: str = "BIN"
    activation_quant_method: str = "MAX_MIN"
    full_per_channel: bool = True
    bias_correction: bool = True        # FULL_QUANT: biases cancel the mean quantisation error
    source: str = ""


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "on", "yes"):
        return True
    if low in ("false", "0", "off", "no"):
        return False
    raise ValueError(f"'{v}' is not a boolean (true/false)")


def _int(lo: int, hi: int | None = None):
    def parse(v: str) -> int:
        n = int(v.strip())
        if n < lo or (hi is not None and n > hi):
            raise ValueError(f"{n} is outside [{lo}, {hi if hi is not None else 'inf'}]")
        return n
    return parse


def _float(lo: float, hi: float):
    def parse(v: str) -> float:
        x = float(v.strip())
        if not lo < x <= hi:
            raise ValueError(f"{x} is outside ({lo}, {hi}]")
        return x
    return parse


def _choice(options: tuple[str, ...]):
    def parse(v: str) -> str:
        u = v.strip().upper()
        if u not in options:
            raise ValueError(f"'{v.strip()}' is not one of {', '.join(options)}")
        return u
    return parse


def _names(v: str) -> list[str]:
    return [n.strip() for n in v.split(",") if n.strip()]


def _calibrate_path(v: str) -> dict[str, str]:
    out = {}
    for item in _names(v):
        name, sep, directory = item.partition(":")
        if not sep or not name or not directory:
            raise ValueError(f"'{item}' is not input_name:directory")
        out[name.strip()] = directory.strip()
    return out


# section -> key -> (field, parser)
SCHEMA = {
    "common_quant_param": {
        "quant_type": ("quant_type", _choice(QUANT_TYPES)),
        "bit_num": ("bit_num", _int(1, 16)),
        "min_quant_weight_size": ("min_quant_weight_size", _int(0)),
        "min_quant_weight_channel": ("min_quant_weight_channel", _int(0)),
        "skip_quant_node": ("skip_quant_node", _names),
        "integer_weight_bits": ("integer_weight_bits", _int(6, 7)),
    },
    "weight_quant_param": {
        "per_channel": ("per_channel", _bool),
        "group_size": ("group_size", _int(0)),
        "symmetric": ("symmetric", _bool),
        "algorithm": ("algorithm", _choice(WEIGHT_ALGORITHMS)),
        "damp": ("damp", _float(0.0, 1.0)),
    },
    "data_preprocess_param": {
        "calibrate_path": ("calibrate_path", _calibrate_path),
        "calibrate_size": ("calibrate_size", _int(1)),
        "input_type": ("input_type", _choice(("BIN", "NPY"))),
    },
    "full_quant_param": {
        "activation_quant_method": ("activation_quant_method", _choice(ACTIVATION_METHODS)),
        "per_channel": ("full_per_channel", _bool),
        "bias_correction": ("bias_correction", _bool),
    },
}


def parse_config(path: str) -> QuantConfig:
    if not os.path.isfile(path):
        raise ConverterError(f"config file '{path}' does not exist")
    cfg = QuantConfig(source=os.path.abspath(path))
    section = None
    seen: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        where = f"{path}:{lineno}"
        if not line or line.startswith(("#", ";")):
            continue
        # An inline comment starts at a '#' or ';' after whitespace (as configparser's inline_comment_prefixes):
        # the documented examples write "quant_type=WEIGHT_QUANT   # or FULL_QUANT".
        line = re.split(r"\s[#;]", line, maxsplit=1)[0].rstrip()
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConverterError(f"{where}: malformed section header '{line}'")
            section = line[1:-1].strip()
            if section not in SCHEMA:
                raise ConverterError(f"{where}: unknown section [{section}] (known: {', '.join(SCHEMA)})")
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep:
            raise ConverterError(f"{where}: expected key=value, got '{line}'")
        if section is None:
            raise ConverterError(f"{where}: '{key}' comes before any [section]")
        if key not in SCHEMA[section]:
            raise ConverterError(f"{where}: unknown key '{key}' in [{section}] (known: {', '.join(SCHEMA[section])})")
        if (section, key) in seen:
            raise ConverterError(f"{where}: '{key}' in [{section}] repeats line {seen[(section, key)]}")
        seen[(section, key)] = lineno
        name, parser = SCHEMA[section][key]
        try:
            setattr(cfg, name, parser(value))
        except ValueError as e:
            raise ConverterError(f"{where}: {key}: {e}") from None
    _validate(cfg, path, seen)
    return cfg


def _validate(cfg: QuantConfig, path: str, seen: dict[tuple[str, str], int]) -> None:
    def at(section: str, key: str) -> str:
        line = seen.get((section, key))
        return f"{path}:{line}" if line else path
    if cfg.quant_type == "WEIGHT_QUANT" and cfg.bit_num not in (8, 4):
        raise ConverterError(f"{at('common_quant_param', 'bit_num')}: bit_num={cfg.bit_num}: weight quantisation "
                             "supports 8 and 4 bits")
    if cfg.group_size and not cfg.per_channel:
        raise ConverterError(f"{at('weight_quant_param', 'group_size')}: group_size needs per_channel=true")
    for name, directory in cfg.calibrate_path.items():
        if not os.path.isdir(directory):
            raise ConverterError(f"{at('data_preprocess_param', 'calibrate_path')}: calibration directory "
                                 f"'{directory}' for input '{name}' does not exist")
    if cfg.quant_type in ("FULL_QUANT", "DYNAMIC_QUANT") and cfg.bit_num not in (8, 4):
        raise ConverterError(f"{at('common_quant_param', 'bit_num')}: {cfg.quant_type} stores 8- or 4-bit weight "
                             f"codes, not {cfg.bit_num}")
    if cfg.quant_type in ("FULL_QUANT", "DYNAMIC_QUANT") and cfg.group_size % 4:
        raise ConverterError(f"{at('weight_quant_param', 'group_size')}: the integer kernels take blocks of a "
                             f"multiple of 4 values, not {cfg.group_size}")
    if ("common_quant_param", "integer_weight_bits") in seen and (
            cfg.quant_type not in ("FULL_QUANT", "DYNAMIC_QUANT") or cfg.bit_num != 8):
        raise ConverterError(f"{at('common_quant_param', 'integer_weight_bits')}: integer_weight_bits applies to "
                             f"FULL_QUANT and DYNAMIC_QUANT with bit_num=8, not {cfg.quant_type} with bit_num={cfg.bit_num}")
    if cfg.algorithm == "GPTQ" and cfg.quant_type != "WEIGHT_QUANT":
        raise ConverterError(f"{at('weight_quant_param', 'algorithm')}: algorithm=GPTQ applies to WEIGHT_QUANT, "
                             f"not {cfg.quant_type}")
    if cfg.algorithm == "GPTQ" and not cfg.calibrate_path:
        raise ConverterError(f"{at('weight_quant_param', 'algorithm')}: algorithm=GPTQ rounds on calibration data: "
                             "give [data_preprocess_param] calibrate_path")
    if ("weight_quant_param", "damp") in seen and cfg.algorithm != "GPTQ":
        raise ConverterError(f"{at('weight_quant_param', 'damp')}: damp applies to algorithm=GPTQ")
    if cfg.bias_correction and cfg.quant_type != "FULL_QUANT" and ("full_quant_param", "bias_correction") in seen:
        raise ConverterError(f"{at('full_quant_param', 'bias_correction')}: bias_correction=true applies to "
                             f"FULL_QUANT (it corrects with the calibrated activations), not {cfg.quant_type}")
