"""ONNX's backend test suite on lite and on ONNX Runtime, side by side in one run: for every case of the installed
onnx's `onnx.backend.test` (node cases generated in memory, and the model cases it ships), whether each backend
passes, refuses (raises an error) or gives outputs that differ from the suite's reference, by category, with the
wall time of each backend's whole pass.

    python -m benchmarks.onnx_suite --out benchmarks/results/onnx_suite.md
"""
from __future__ import annotations

import argparse
import collections
import platform
import time
import warnings

import onnx
import onnxruntime

import lite
from lite import onnx_backend_suite as suite

from .machine import cpu_name
from .results_io import write_table


def run_backend(backend, expected=None) -> tuple[dict[str, tuple[str, str]], float]:
    """name -> (category, status) for every CPU case, and the seconds the whole pass took."""
    cases = suite.collect_cases(expected, backend)
    t0 = time.perf_counter()
    out = {name: (category, suite.run_case(item).status) for name, (category, item) in cases.items()}
    return out, time.perf_counter() - t0


def table(results: dict[str, dict[str, tuple[str, str]]], seconds: dict[str, float]) -> str:
    engines = list(results)
    categories = sorted({c for r in results.values() for c, _ in r.values()})
    lines = ["| Cases | count | " + " | ".join(f"{e} passed | {e} refused | {e} differ" for e in engines) + " |",
             "|---|---:|" + "---:|---:|---:|" * len(engines)]

    def row(label: str, names: list[str]) -> str:
        cells = [label, str(len(names))]
        for e in engines:
            c = collections.Counter(results[e][n][1] for n in names)
            cells += [f"{c['pass']} ({100.0 * c['pass'] / max(len(names), 1):.1f}%)", str(c["refused"]), str(c["wrong"])]
        return "| " + " | ".join(cells) + " |"

    names = sorted(results[engines[0]])
    for category in categories:
        lines.append(row(category.removesuffix("Model"), [n for n in names if results[engines[0]][n][0] == category]))
    lines.append(row("**all**", names))
    lines.append("")
    lines.append("Wall time of the whole pass (prepare + run of every case; lite: convert in Python, build-check, "
                 "build, run on one thread; ONNX Runtime: its backend's default session): " +
                 ", ".join(f"{e} {seconds[e]:.1f} s" for e in engines) + ".")
    both = [n for n in names if all(results[e][n][1] == "pass" for e in engines)]
    only = {e: [n for n in names if results[e][n][1] == "pass" and
                any(results[o][n][1] != "pass" for o in engines if o != e)] for e in engines}
    lines.append(f"Passed by both: {len(both)}; " + "; ".join(f"only by {e}: {len(v)}" for e, v in only.items()) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the markdown table here (atomically)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import onnxruntime.backend as ort_backend

    expected = suite.load_expected_failures()
    results, seconds = {}, {}
    results["lite"], seconds["lite"] = run_backend(suite.LiteBackend, expected)
    results["ONNX Runtime"], seconds["ONNX Runtime"] = run_backend(ort_backend)
    text = (f"# ONNX backend test suite: lite and ONNX Runtime\n\n"
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, lite {lite.__version__}; "
            f"{cpu_name()}, {platform.machine()}; {time.strftime('%Y-%m-%d')}.\n"
            f"`python -m benchmarks.onnx_suite`. 'refused': the backend raised an error; 'differ': it ran and its "
            f"outputs differ from the suite's reference (rtol 1e-3, atol 1e-7 unless the case says otherwise; lite's "
            f"three 'differ' cases are where the reference disagrees with ONNX Runtime, and lite gives ONNX "
            f"Runtime's numbers there: tests/onnx_backend/expected_failures.txt).\n\n" + table(results, seconds))
    print(text)
    if args.out:
        write_table(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
