"""lite's CPU-vendor rules, measured on this CPU: every dispatch choice that depends on the vendor (an environment
variable forces either side on any CPU) runs both ways on the models it concerns, the two settings in their own
worker processes, interleaved in one run (benchmarks.compare's workers: shuffled batches, a pause between turns).

    python -m benchmarks.cpu_rules [--rules wide_tiles pixel_tiles bf16_depthwise weight_prefetch_nta winograd_blocked]
                                   [--threads 1 2] [--rounds 6] [--batch 4] [--processes 1] [--models KEY ...]
                                   [--out table.md]

--models runs every chosen rule on those models (benchmarks.compare's keys) instead of each rule's own.

The rules were measured on an Intel Xeon (Sapphire Rapids); the convolution rules (wide_tiles, pixel_tiles,
winograd_blocked) on an AMD Zen 4 too, which takes their Intel side since (`_lite.cpu_features()["xeon_conv_rules"]`);
other CPUs keep the other side of each until measured there (issue 36). On such a CPU this script is that
measurement: 'intel side / other side' < 1 says the Intel rule would be faster there too. Rules whose kernels this CPU lacks (bf16 depthwise without AVX512_BF16) are skipped, with the
reason in the table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from benchmarks.compare import (MODELS, PRECISION_VAR, ROOT, convert, machine_line, make_feeds, measure_variants,
                                p90)
from benchmarks.results_io import publish

# name: (variable, (Intel's setting, the other side's), precision, models, what it picks)
RULES = {
    "wide_tiles": ("LITE_CONV_WIDE_TILES", ("1", "0"), "f32", ["resnet50"],
                   "channel-blocked KxK Convs on 6-pixel x 64-channel tiles (else 8 x 32)"),
    "pixel_tiles": ("LITE_CONV_PIXEL_TILES", ("intel", "all"), "f32",
                    ["resnet50", "mobilenetv2", "whisper_tiny_encoder"],
                    "stems on pixel tiles (else the direct kernel); 1-D and 256+-channel NCHW Convs on the GEMM"),
    "bf16_depthwise": ("LITE_BF16_DEPTHWISE", ("fma", "pairs"), "bf16", ["mobilenetv2"],
                       "bf16 depthwise rows by float32 FMAs (else vdpbf16ps tap pairs)"),
    "weight_prefetch_nta": ("LITE_WEIGHT_PREFETCH_NTA", ("0", "1"), "f32", ["resnet50", "bert_base"],
                            "weights fetched into L2 (else non-temporal)"),
    "winograd_blocked": ("LITE_CONV_WINOGRAD_BLOCKED", ("1", "0"), "f32", ["resnet50"],
                         "Winograd between channel blocks as tiles x filters, F(2x2) on small planes "
                         "(else WinogradConv3x3's filters x tiles)"),
}

# the cpu_features() flag that says a rule's default is its Intel side on this CPU
DEFAULT_SIDE = {"wide_tiles": "xeon_conv_rules", "pixel_tiles": "xeon_conv_rules", "winograd_blocked": "xeon_conv_rules",
                "bf16_depthwise": "intel", "weight_prefetch_nta": "intel"}


def skip_reason(rule: str, features: dict) -> str | None:
    """Why this CPU (lite._lite.cpu_features()) cannot run a rule's kernels either way, or None."""
    if rule == "bf16_depthwise" and not features["avx512_bf16"]:
        return "no AVX512_BF16: the bf16 depthwise rows do not run"
    if rule == "wide_tiles" and features["isa"] != "avx512f":
        return "no AVX-512: the wide tiles do not run"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules", nargs="*", default=list(RULES), choices=list(RULES))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between turns (see benchmarks.compare)")
    ap.add_argument("--processes", type=int, default=1,
                    help="worker processes per setting, their times pooled: a process's memory placement moves "
                         "its times by ~1%%, the size of some rules' effect")
    ap.add_argument("--models", nargs="*", default=None, choices=list(MODELS), help="instead of each rule's models")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import lite
    features = lite._lite.cpu_features()
    vendor = "Intel" if features["intel"] else "AMD Zen 4" if features.get("amd_zen4") else "neither Intel nor AMD Zen 4"
    sides = {side: [r for r in args.rules if bool(features.get(DEFAULT_SIDE[r])) == (side == "Intel")]
             for side in ("Intel", "other")}
    lines = [machine_line(), "", f"This CPU is {vendor}: the default takes "
             + "; ".join(f"the {side} side of {', '.join(rules)}" for side, rules in sides.items() if rules)
             + f". Medians over {args.rounds} "
             f"interleaved rounds of {args.batch} runs per setting and worker process ({args.processes} per "
             "setting); 'intel / other' < 1: the Intel side is faster here.",
             "", "Rules (the Intel side first):", ""]
    lines += [f"- `{rule}` ({RULES[rule][0]}={RULES[rule][1][0]} / {RULES[rule][1][1]}): {RULES[rule][4]}"
              for rule in args.rules]
    lines += ["", "| rule | model | precision | threads | intel ms | other ms | intel / other | p90 intel / other |",
              "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        built: dict[str, tuple[str, str]] = {}
        for rule in args.rules:
            var, (intel, other), precision, models, _ = RULES[rule]
            reason = skip_reason(rule, features)
            if reason:
                lines.append(f"| {rule} | - | {precision} | - | - | - | skipped: {reason} | - |")
                continue
            os.environ[PRECISION_VAR] = precision
            for key in args.models or models:
                if key not in built:
                    title, build = MODELS[key]
                    onnx_path = os.path.join(tmp, f"{key}.onnx")
                    shapes = build(onnx_path)
                    feeds_path = os.path.join(tmp, f"{key}_feeds.npz")
                    make_feeds(shapes, feeds_path)
                    built[key] = (convert(onnx_path, os.path.join(tmp, key), shapes), feeds_path)
                ms_path, feeds_path = built[key]
                for threads in args.threads:
                    ws = measure_variants({f"{side}#{k}": ("lite", ms_path, {var: value})
                                           for k in range(args.processes)
                                           for side, value in (("intel", intel), ("other", other))},
                                          feeds_path, threads, args.rounds, args.batch, args.pause)
                    times = {side: [t for label, w in ws.items() if label.startswith(side + "#") for t in w.times]
                             for side in ("intel", "other")}
                    med = {side: statistics.median(v) for side, v in times.items()}
                    lines.append(f"| {rule} | {MODELS[key][0]} | {precision} | "
                                 f"{threads} | {med['intel']:.2f} | {med['other']:.2f} | "
                                 f"{med['intel'] / med['other']:.3f} | "
                                 f"{p90(times['intel']):.2f} / {p90(times['other']):.2f} |")
                    print(lines[-1], flush=True)
    publish(lines, args.out)


if __name__ == "__main__":
    main()
