"""ONNX's own backend test suite against lite, as ONNX Runtime runs it: every case not in
expected_failures.txt must pass; every listed one must fail the way the list says (a clear refusal, or
ONNX Runtime's numbers where the suite's reference disagrees with ONNX Runtime), never with a wrong number.
A listed case that starts passing fails too, so the list stays true: remove it (or run
`python -m lite.onnx_backend_suite --update`)."""
from __future__ import annotations

import pytest

from lite import onnx_backend_suite as suite

if not suite.onnx_version_matches():
    pytest.skip(f"the expected-failure list describes onnx {suite.SUITE_ONNX_VERSION}'s suite; "
                "requirements-dev.txt pins it", allow_module_level=True)

EXPECTED = suite.load_expected_failures()
CASES = suite.collect_cases(EXPECTED)
NODE_CASES = suite.node_cases()


def test_every_listed_case_exists():
    assert sorted(set(EXPECTED) - set(CASES)) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name):
    _, item = CASES[name]
    outcome = suite.run_case(item)
    expected = EXPECTED.get(name)
    if expected is None or expected.atol is not None:
        assert outcome.status == "pass", f"{name}: {outcome.status}: {outcome.reason}"
    elif expected.kind == "refused":
        assert outcome.status != "pass", f"{name} now passes: remove it from expected_failures.txt"
        assert outcome.status == "refused", f"{name}: a wrong result instead of a refusal: {outcome.reason}"
    else:   # "ort": the reference differs from ONNX Runtime; lite must give ONNX Runtime's numbers
        assert outcome.status == "wrong", f"{name} now matches the reference: update expected_failures.txt"
        suite.ort_matches(name, NODE_CASES)


def test_pass_rates_count_every_node_case():
    rates = suite.pass_rates(EXPECTED, NODE_CASES)
    assert sum(t for _, t in rates.values()) == len(NODE_CASES)
    # an _expanded case counts for the operator its function body spells out
    assert suite.operator_of("test_attention_3d_expanded_cpu", NODE_CASES) == "Attention"
    assert suite.operator_of("test_clip_min_greater_than_max_cpu", NODE_CASES) == "Clip"
