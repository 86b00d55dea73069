"""The quantisation config example in docs/quantization.md parses as written (its inline '#' comments are comments,
not part of the values), and a value holding '#' without whitespace before it keeps it."""
from __future__ import annotations

import os
import re

from converter.quantization import parse_config

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "quantization.md")


def test_documented_example_parses(tmp_path):
    text = open(DOC, encoding="utf-8").read()
    block = re.search(r"```ini\n(\[common_quant_param\].*?)```", text, re.S).group(1)
    for name in ("ids", "mask"):   # the example's calibration directories, made real
        (tmp_path / name).mkdir()
        block = block.replace(f"/data/{name}", str(tmp_path / name))
    (tmp_path / "q.cfg").write_text(block)
    cfg = parse_config(str(tmp_path / "q.cfg"))
    assert (cfg.quant_type, cfg.bit_num, cfg.min_quant_weight_channel) == ("WEIGHT_QUANT", 8, 16)
    assert cfg.skip_quant_node == ["node_a", "node_b"] and cfg.group_size == 128 and cfg.algorithm == "RTN"
    assert cfg.input_type == "NPY" and cfg.activation_quant_method == "MAX_MIN" and cfg.calibrate_size == 100


def test_a_hash_inside_a_value_is_kept(tmp_path):
    (tmp_path / "q.cfg").write_text("[common_quant_param]\nquant_type=WEIGHT_QUANT\nskip_quant_node=conv#1,fc  # two\n")
    assert parse_config(str(tmp_path / "q.cfg")).skip_quant_node == ["conv#1", "fc"]
