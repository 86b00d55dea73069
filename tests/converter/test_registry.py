"""The converter's operator set, the runtime's kernels, the schema and docs/ops.md agree."""
from __future__ import annotations

import os

import lite
from converter import opdoc
from converter.ops import SUPPORTED
from ms_schema.OpType import OpType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_converter_op_has_a_schema_code_and_a_kernel():
    kernel_ops = {op for op, _ in lite._lite.registered_kernels("cpu")}
    schema_ops = {k for k in vars(OpType) if not k.startswith("_")}
    assert set(SUPPORTED) <= schema_ops
    assert set(SUPPORTED) <= kernel_ops, sorted(set(SUPPORTED) - kernel_ops)
    assert kernel_ops <= set(SUPPORTED), sorted(kernel_ops - set(SUPPORTED))


def test_ops_doc_is_generated_and_current():
    with open(os.path.join(ROOT, "docs", "ops.md")) as f:
        assert f.read() == opdoc.render(), "docs/ops.md is stale: python -m converter.opdoc --write docs/ops.md"


def test_readme_counts_the_onnx_operators():
    """The README's operator count is the converter's: every supported operator ONNX defines (ours excluded)."""
    import re

    import onnx

    from converter.ops import SUPPORTED
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8").read()
    stated = int(re.search(r"(\d+) ONNX operators", readme).group(1))
    assert stated == sum(onnx.defs.has(op) for op in SUPPORTED)


def test_format_doc_states_the_current_minor_version():
    import re

    from converter.writer import FORMAT_MINOR
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "format.md"), encoding="utf-8").read()
    assert int(re.search(r"format minor version \((\d+) today", doc).group(1)) == FORMAT_MINOR
