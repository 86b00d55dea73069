"""Cycle model of the ARM64 kernels' inner loops (issue 39): what can be measured honestly without an ARM machine.

Reads the hot loop of each NEON micro-kernel out of the cross-built library (build/arm64/liblite_core.a, made by
`./build.sh arm64-build`) with the cross objdump, and runs it through llvm-mca for several ARM cores. For each loop it
reports cycles per iteration, and the fraction of the multiply-add peak that is: the cycles the loop's multiply-add
instructions alone need (the same instructions with the loads, pointer updates and branch removed, as llvm-mca
schedules them on that core's pipes) over the whole loop's cycles. Emulation (qemu) gives no real speed; this is the
instruction mix against the core's pipes, not a measurement of time.

    python -m benchmarks.arm64_mca [--lib build/arm64/liblite_core.a] [--out benchmarks/results/arm64_mca.md]
    python -m benchmarks.arm64_mca --spills    # every kernel's innermost fmla loops, by stack accesses per fmla

Needs llvm-mca with the Neoverse models (Debian's llvm-19: /usr/lib/llvm-19/bin/llvm-mca) and
aarch64-linux-gnu-objdump (binutils-aarch64-linux-gnu, installed with g++-aarch64-linux-gnu).
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

from benchmarks.results_io import publish

# (kernel, function name as objdump -C prints it, the multiply-add mnemonic, -mattr, what one op does)
KERNELS = [
    ("float32 GEMM, 6 x 16 tile (fmla by element)", "MicroKernelPortable<6, 0>", "fmla", "", 8),
    ("float32 GEMM, 6 x 16 tile, A's rows in place (MatMul)", "MicroKernelPortable<6, 1>", "fmla", "", 8),
    ("float32 few-row products (a decode step), 4 rows x 16 (fmla by element)", "neon::PanelBlock<4>", "fmla", "", 8),
    ("int8 GEMM, 4 x 16 tile (sdot by element)", "TileNeonDot<4, true>", "sdot", "+dotprod", 32),
    ("int8 GEMM on I8MM, 4 x 16 tile (smmla: 8 depths a step; 2x sdot's multiply-adds each)", "TileNeonMmla<4>",
     "smmla", "+i8mm", 64),
    ("int8 Conv orientation on I8MM, 4 x 16 tile (smmla on activation panels re-laid and flipped once per product)",
     "TileNeonMmlaConv<4>", "smmla", "+i8mm", 64),
    ("bf16 GEMM, 4 x 16 block (bfdot by element)", "NeonBf16Rows<4>", "bfdot", "+bf16", 16),
    ("bf16 GEMM on the bfmmla layout, 4 x 16 block (bfmmla: 4 depths a step; 2x bfdot's multiply-adds each)",
     "NeonBf16MmlaRows<4>", "bfmmla", "+bf16", 32),
    ("float16 GEMM, 4 x 16 block (fmla .8h)", "NeonFp16Rows<4>", "fmla", "+fullfp16", 16),
    ("LLM int8 weights, one row (sdot)", "neon_dot::PanelRange<1, 8>", "sdot", "+dotprod", 32),
    ("LLM int4 weights, one row (sdot)", "neon_dot::PanelRange<1, 4>", "sdot", "+dotprod", 32),
    # The few-row float32 products on compressed weight panels (weight-only int8 / int4, float16 / bf16 weights): each
    # row of 16 codes widened to four registers of float32, shared by the block's rows of A (Row: 1 f16, 2 bf16, 3 i8,
    # 4 i4).
    ("int8 weight panel, one row (widen + fmla)", "neon::CodePanelRows<(lite::Row)3, 1>", "fmla", "", 8),
    ("int8 weight panel, 4 rows (widen + fmla by element)", "neon::CodePanelRows<(lite::Row)3, 4>", "fmla", "", 8),
    ("int4 weight panel, one row (nibble into 1.0f's mantissa + fmla)", "neon::CodePanelRows<(lite::Row)4, 1>", "fmla", "",
     8),
    ("int4 weight panel, 4 rows", "neon::CodePanelRows<(lite::Row)4, 4>", "fmla", "", 8),
    ("float16 weight panel, 4 rows (fcvtl + fmla)", "neon::CodePanelRows<(lite::Row)1, 4>", "fmla", "", 8),
    ("bf16 weight panel, 4 rows (shll + fmla)", "neon::CodePanelRows<(lite::Row)2, 4>", "fmla", "", 8),
    ("direct convolution, 6 channels x 16 pixels (portable build, 4-lane vectors)", "TilePortable<4>(lite::TileArgs",
     "fmla", "", 8),
    ("1x1 convolution on 8-channel blocks, 6 pixels x 16 channels (portable build)", "lite::TilePortable(lite::TileArgs",
     "fmla", "", 8),
    ("1x1 convolution on 8-channel blocks in float16, 4 pixels x 16 channels (fmla .8h; the input converted per block)",
     "HalfTile", "fmla", "+fullfp16", 16),
    ("depthwise 3x3 on 8-channel blocks, stride 1: 5 pixels a step (each filter row's input loaded once)",
     "ProcessBlockPortable", "fmla", "", 8, 90),
    ("depthwise 3x3 on 8-channel blocks, stride 2: 4 pixels a step", "ProcessBlockPortable", "fmla", "", 8, 72),
]
# The cores llvm-mca models: big out-of-order server / phone cores, and the little in-order ones.
CPUS = ["neoverse-n1", "neoverse-n2", "neoverse-v1", "cortex-a55"]

INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
BRANCH = re.compile(r"^(b\.\w+|cbnz|cbz|tbnz|tbz)$")   # conditional: the loops' closing branches
JUMP = re.compile(r"^(b|b\.\w+|cbnz|cbz|tbnz|tbz)$")     # any branch inside a loop (its target renamed for llvm-mca)


def find_tool(names: list[str]) -> str:
    for n in names:
        path = shutil.which(n) or (n if os.path.exists(n) else None)
        if path:
            return path
    raise SystemExit(f"none of {names} found (apt-get install llvm-19 binutils-aarch64-linux-gnu)")


def functions(lib: str, objdump: str) -> dict[str, list[tuple[int, str, str]]]:
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-C", lib], check=True, capture_output=True,
                         text=True).stdout
    funcs: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        m = INSN.match(line)
        if m and current is not None:
            operands = re.sub(r"\s*//.*$", "", m.group(3))                    # comments
            operands = re.sub(r"\s*<.*>$", "", operands).strip()              # branch targets' names
            current.append((int(m.group(1), 16), m.group(2), operands))
    return funcs


def mca_cycles(mca: str, cpu: str, mattr: str, lines: list[str], iterations: int = 300) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        args = [mca, "-mtriple=aarch64", f"-mcpu={cpu}", f"-iterations={iterations}", path]
        if mattr:
            args.insert(2, f"-mattr={mattr}")
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    total = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1))
    return total / iterations


def as_source(body: list[tuple[int, str, str]]) -> list[str]:
    lines = ["0:"]
    for _, mnem, operands in body:
        if JUMP.match(mnem):
            parts = operands.split(",")
            parts[-1] = " 0b"
            operands = ",".join(parts) if len(parts) > 1 else "0b"
        lines.append(f"{mnem} {operands}")
    return lines


def issue_cycles(mca: str, cpu: str, mattr: str, lines: list[str]) -> float:
    """Cycles the instructions need on the core's pipes alone: the sum of their reciprocal throughputs (llvm-mca's
    instruction info), with no dependency between them. The loop's own accumulator chains are left out: a loop
    whose chains restart every iteration (the depthwise rows) is overlapped by the out-of-order core, and those
    same instructions scheduled alone would carry them from one iteration to the next."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        args = [mca, "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=1", "-instruction-info", path]
        if mattr:
            args.insert(2, f"-mattr={mattr}")
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    table = out.split("Instructions:\n", 1)[1].split("\n\n", 1)[0]
    return sum(float(row.split()[2]) for row in table.splitlines() if row.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/arm64/liblite_core.a")
    ap.add_argument("--out", default="benchmarks/results/arm64_mca.md")
    ap.add_argument("--spills", action="store_true",
                    help="list the functions whose innermost fmla loops read or write the stack (GCC spilling "
                         "accumulators): where a kernel's portable build needs an ARM tiling of its own")
    args = ap.parse_args(argv)
    if not os.path.exists(args.lib):
        raise SystemExit(f"{args.lib} missing: ./build.sh arm64-build first")
    mca = find_tool(["/usr/lib/llvm-19/bin/llvm-mca", "llvm-mca-19", "llvm-mca"])
    objdump = find_tool(["aarch64-linux-gnu-objdump"])
    version = subprocess.run([mca, "--version"], capture_output=True, text=True).stdout
    version = re.search(r"LLVM version ([\d.]+)", version).group(1)
    if int(version.split(".")[0]) < 19:   # older ones know the names but schedule N2 / V1 as a generic core
        raise SystemExit(f"{mca} is LLVM {version}: the Neoverse models need llvm-mca 19 (apt-get install llvm-19)")
    funcs = functions(args.lib, objdump)
    if args.spills:
        return spill_table(funcs)
    rows = []
    for title, name, op, mattr, _, *which in KERNELS:
        matches = [f for f in funcs if name in re.sub(r"\(anonymous namespace\)::", "", f)]
        if not matches:
            raise SystemExit(f"{name}: not in {args.lib}")
        # the innermost loop with the most multiply-adds (an outer loop would add its bookkeeping to the count), or,
        # where a function has several kernels' loops, the longest one with the given count
        loops = innermost_loops(funcs[matches[0]], op)
        count = lambda b: sum(1 for x in b if x[1] == op)  # noqa: E731
        if which:
            loops = [b for b in loops if count(b) == which[0]]
            if not loops:
                raise SystemExit(f"{name}: no loop with {which[0]} {op}")
            body = max(loops, key=len)
        else:
            body = max(loops, key=count)
        ops = count(body)
        others = len(body) - ops
        cells = []
        for cpu in CPUS:
            full = mca_cycles(mca, cpu, mattr, as_source(body))
            compute = issue_cycles(mca, cpu, mattr, [f"{m} {o}" for _, m, o in body if m == op])
            cells.append(f"{full:.1f} / {100 * compute / full:.0f}%")
        rows.append(f"| {title} | {ops} {op} + {others} other | " + " | ".join(cells) + " |")
    lines = [
        "# ARM64 kernels: cycle model of the inner loops",
        "",
        f"{datetime.date.today()}. `python -m benchmarks.arm64_mca`: each kernel's hottest loop read from the cross-built "
        f"library (GCC {cross_gcc_version()} for aarch64, -O3) and scheduled by llvm-mca {version} on each core's model. "
        "A cell: cycles per loop iteration / the fraction of the multiply-add peak (the cycles the loop's multiply-add "
        "instructions need on the core's pipes, their reciprocal throughputs in the model summed, over the whole "
        "loop's). No ARM machine was available: these are "
        "the instruction mix against the modelled pipes, not timings. Cortex-A55 is in-order: its model charges every "
        "load-use and accumulate latency the loop does not hide.",
        "",
        "| kernel (loop) | instructions per iteration | " + " | ".join(CPUS) + " |",
        "|---|---|" + "---:|" * len(CPUS),
        *rows,
    ]
    return publish(lines, args.out)


def innermost_loops(insns: list[tuple[int, str, str]], op: str) -> list[list[tuple[int, str, str]]]:
    """The function's backward-branch loops holding `op` instructions that hold no such loop inside them."""
    spans = []
    for i, (addr, mnem, operands) in enumerate(insns):
        if not BRANCH.match(mnem):
            continue
        try:
            target = int(operands.split(",")[-1].strip().split()[0], 16)
        except ValueError:
            continue
        if target < addr:
            body = [x for x in insns[: i + 1] if x[0] >= target]
            if any(x[1] == op for x in body):
                spans.append((target, addr, body))
    return [body for t, a, body in spans
            if not any((t2, a2) != (t, a) and t <= t2 and a2 <= a for t2, a2, _ in spans)]


def spill_table(funcs: dict[str, list[tuple[int, str, str]]]) -> int:
    """Per function with at least 8 fmla in its innermost loops: those loops' fmla and stack accesses (ldr / str / ldp
    / stp on sp: GCC spilling accumulators or staging values), worst first."""
    rows = []
    total_fmla = total_stack = 0
    # A portable build that a NEON build of the same name replaces on ARM64 runs only under LITE_CPU_ISA=portable.
    def plain(n: str) -> str:
        return re.sub(r"\(anonymous namespace\)::", "", n)
    replaced = {plain(n).replace("lite::neon::", "lite::portable::", 1) for n in funcs if "::neon::" in n}
    skipped = 0
    for name, insns in funcs.items():
        if plain(name) in replaced:
            skipped += 1
            continue
        loops = innermost_loops(insns, "fmla")
        fmla = sum(1 for body in loops for x in body if x[1] == "fmla")
        if fmla < 8:
            continue
        stack = sum(1 for body in loops for x in body if "[sp" in x[2])
        total_fmla += fmla
        total_stack += stack
        rows.append((stack / fmla, fmla, stack, plain(name)[:120]))
    rows.sort(reverse=True)
    print(f"innermost fmla loops: {total_fmla} fmla, {total_stack} stack accesses "
          f"({total_stack / max(1, total_fmla):.2f} per fmla); {skipped} portable builds left out (a NEON build "
          "replaces them)")
    print("stack/fmla  fmla  stack  function")
    for ratio, fmla, stack, name in rows:
        print(f"{ratio:10.2f} {fmla:5d} {stack:6d}  {name}")
    return 0


def cross_gcc_version() -> str:
    try:
        out = subprocess.run(["aarch64-linux-gnu-g++", "-dumpfullversion"], capture_output=True, text=True).stdout
        return out.strip() or "?"
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
