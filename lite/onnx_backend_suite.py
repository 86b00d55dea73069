"""ONNX's backend test suite (`onnx.backend.test`: node cases generated in memory by the installed onnx, and the
simple, PyTorch-converted, PyTorch-operator and real model cases it ships) run against lite's backend
(`lite.onnx_backend`): case collection, one case's outcome, the expected-failure list and pass rates per
operator. tests/onnx_backend runs it in CI; docs/ops.md reports the rates.

    python -m lite.onnx_backend_suite                 # run every case, print the outcome counts
    python -m lite.onnx_backend_suite --update LIST   # rewrite LIST's 'refused' entries from this run
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import onnx
import onnx.backend.test

from .onnx_backend import LiteBackend

# The list in a source checkout (tests/onnx_backend/expected_failures.txt).
EXPECTED_FAILURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                                 "onnx_backend", "expected_failures.txt")
# The onnx release whose suite the list describes (requirements-dev.txt pins it): another release has other cases.
SUITE_ONNX_VERSION = "1.23.2"
# Kinds of entry in the list:
#   refused  the case must raise an error from the converter or runtime (a clear refusal, never a wrong number)
#   ort      the suite's reference differs from the spec as ONNX Runtime reads it: lite must match ONNX Runtime
#   atol=X   lite's outputs are within X (absolute) of the reference; the suite's atol is below float32 rounding
KINDS = ("refused", "ort")


@dataclass
class Outcome:
    status: str          # "pass", "refused" (an exception from converter/runtime) or "wrong" (outputs differ)
    reason: str = ""
    seconds: float = 0.0


@dataclass
class Expected:
    kind: str
    reason: str

    @property
    def atol(self) -> float | None:
        return float(self.kind[len("atol="):]) if self.kind.startswith("atol=") else None


def _prepare_onnx_home() -> None:
    # The 'real' cases write their inputs and reference outputs under ONNX_HOME: keep them out of ~.
    if "ONNX_HOME" not in os.environ:
        os.environ["ONNX_HOME"] = os.path.join(tempfile.gettempdir(), "lite_onnx_backend_home")


def collect_cases(expected: dict[str, Expected] | None = None, backend=LiteBackend) -> dict[str, tuple[str, object]]:
    """name -> (category, TestItem) for every CPU case of the suite run on `backend` (lite's unless told);
    `atol=` entries of `expected` loosen their case's tolerance."""
    _prepare_onnx_home()
    kwargs = {}
    for name, e in (expected or {}).items():
        if e.atol is not None:
            kwargs[name[:-len("_cpu")]] = {"atol": e.atol}
    runner = onnx.backend.test.BackendTest(backend, __name__, test_kwargs=kwargs)
    cases = {}
    for category, items in runner._test_items.items():
        for name, item in items.items():
            if name.endswith("_cpu"):
                cases[name] = (category, item)
    return cases


def node_cases() -> dict[str, object]:
    """name (with the _cpu suffix) -> onnx TestCase (model and data sets) of every node case."""
    from onnx.backend.test.loader import load_model_tests
    return {c.name + "_cpu": c for c in load_model_tests(kind="node")}


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def run_case(item) -> Outcome:
    t0 = time.perf_counter()
    try:
        item.func(None)
    except AssertionError as e:
        return Outcome("wrong", one_line(str(e) or "outputs differ"), time.perf_counter() - t0)
    except Exception as e:   # noqa: BLE001 - any refusal counts as one; its class and message are the reason
        return Outcome("refused", f"{type(e).__name__}: {one_line(str(e))}", time.perf_counter() - t0)
    return Outcome("pass", "", time.perf_counter() - t0)


def load_expected_failures(path: str = EXPECTED_FAILURES) -> dict[str, Expected]:
    """Lines `name  kind  reason` (fields split on runs of two or more spaces); '#' starts a comment line."""
    expected: dict[str, Expected] = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = [p.strip() for p in line.rstrip("\n").split("  ") if p.strip()]
            if len(fields) < 3:
                raise ValueError(f"{path}:{number}: expected 'name  kind  reason', got {line!r}")
            name, kind, reason = fields[0], fields[1], "  ".join(fields[2:])
            if kind not in KINDS and not kind.startswith("atol="):
                raise ValueError(f"{path}:{number}: unknown kind '{kind}' (refused, ort or atol=X)")
            if name in expected:
                raise ValueError(f"{path}:{number}: '{name}' is listed twice")
            expected[name] = Expected(kind, reason)
    return expected


def operator_of(name: str, cases: dict[str, object]) -> str:
    """The operator a node case tests: its base case's first node (an `_expanded` case is its operator's
    function body)."""
    base = name
    for suffix in ("_expanded_ver18_cpu", "_expanded_cpu"):
        if name.endswith(suffix):
            base = name[:-len(suffix)] + "_cpu"
    case = cases.get(base) or cases[name]
    node = case.model.graph.node[0]
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def onnx_version_matches() -> bool:
    return onnx.__version__ == SUITE_ONNX_VERSION


def ort_matches(name: str, cases: dict[str, object], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Asserts that lite's outputs on node case `name` equal ONNX Runtime's on the same inputs."""
    import numpy as np
    import onnxruntime as ort

    from .onnx_backend import prepare

    case = cases[name]
    session = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    rep = prepare(case.model)
    inits = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    for inputs, _ in case.data_sets:
        inputs = [np.asarray(x) for x in inputs]
        want = session.run(None, dict(zip(names, inputs)))
        got = rep.run(inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def pass_rates(expected: dict[str, Expected], cases: dict[str, object]) -> dict[str, tuple[int, int]]:
    """Operator -> (node cases passed, node cases), where a case passes unless the list says it does not."""
    rates: dict[str, list[int]] = {}
    for name in cases:
        r = rates.setdefault(operator_of(name, cases), [0, 0])
        r[1] += 1
        e = expected.get(name)
        r[0] += e is None or e.atol is not None
    return {op: (p, t) for op, (p, t) in rates.items()}


def write_expected_failures(path: str, entries: dict[str, Expected]) -> None:
    width = max((len(n) for n in entries), default=0) + 2
    lines = [
        "# ONNX backend suite (onnx %s): the cases lite does not pass, one a line: name, kind, reason.\n" %
        SUITE_ONNX_VERSION,
        "#   refused  the case must raise a clear error (converter or runtime); the reason is the error seen\n",
        "#   ort      the suite's reference disagrees with ONNX Runtime; lite must match ONNX Runtime\n",
        "#   atol=X   within X of the reference (the suite's atol is below float32 rounding there)\n",
        "# `python -m lite.onnx_backend_suite --update` rewrites the 'refused' reasons from a run.\n",
    ]
    for name in sorted(entries):
        e = entries[name]
        lines.append(f"{name.ljust(width)}{e.kind.ljust(9)}  {e.reason}\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import collections

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", default=EXPECTED_FAILURES, help="the expected-failure list (default: the checkout's)")
    ap.add_argument("--update", action="store_true", help="rewrite the list's 'refused' entries from this run")
    ap.add_argument("-k", default="", help="run only cases whose name contains this")
    args = ap.parse_args(argv)
    expected = load_expected_failures(args.list) if os.path.exists(args.list) else {}
    cases = collect_cases(expected)
    counts: collections.Counter = collections.Counter()
    entries = {n: e for n, e in expected.items() if e.kind != "refused"}
    problems = []
    for name, (_, item) in sorted(cases.items()):
        if args.k not in name:
            continue
        outcome = run_case(item)
        counts[outcome.status] += 1
        if outcome.status == "refused":
            entries[name] = Expected("refused", outcome.reason)
        elif outcome.status == "wrong" and name not in entries:
            problems.append(f"WRONG {name}: {outcome.reason}")
        elif outcome.status == "pass" and name in entries and entries[name].atol is None:
            problems.append(f"now passes, listed as {entries[name].kind}: {name}")
    total = sum(counts.values())
    print(f"{counts['pass']} passed ({100.0 * counts['pass'] / max(total, 1):.1f}%), {counts['refused']} refused, "
          f"{counts['wrong']} differ from the reference, of {total}")
    for p in problems:
        print(p)
    if args.update and not args.k:
        write_expected_failures(args.list, entries)
        print(f"wrote {args.list}")
    return 1 if any(p.startswith("WRONG") for p in problems) else 0


if __name__ == "__main__":
    raise SystemExit(main())
