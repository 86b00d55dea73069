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
