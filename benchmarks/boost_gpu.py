"""lite_boost on a CUDA GPU: RainFusion block-sparse attention (the Triton kernel) beside PyTorch SDPA (dense,
its FlashAttention/cuDNN kernels) and FlexAttention (compiled, the same block mask), at Wan2.1's attention shapes.

    python -m benchmarks.boost_gpu --out benchmarks/results/boost_gpu.md

Shapes: Wan2.1-T2V-1.3B at 480p x 81 frames (12 heads x 128, 21 x 30 x 52 = 32,760 latent tokens) and
Wan2.1-T2V-14B at 720p x 81 frames (40 heads x 128, 21 x 45 x 80 = 75,600 tokens), bfloat16, batch 1,
128 x 128 tiles. Each (shape, sparsity) gets one random selection (top-k of random block scores plus the
diagonal, the same tiles for every engine). Times are CUDA-event medians of `--repeat` calls after warm-up;
"TFLOP/s kept" counts the multiply-adds of the kept tiles only (4 S_q S_k D per head, times density), so it
shows how close each kernel runs to the tensor cores on the work it does. `--tiles` sweeps the Triton kernel's
(BLOCK_M, BLOCK_N, warps, stages) on the first shape. `--rf-v2` also times `sparse_attention(sparse_type="rf_v2")`
end to end (reorder, pool, select, attend, restore) against SDPA.
`--smoke` runs tiny float32 shapes on the CPU through Triton's interpreter (checks the script, not speed).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

from benchmarks.results_io import write_table

BLOCK = 128
SHAPES = {"Wan2.1-1.3B 480p 81f": (12, 128, (21, 30, 52)), "Wan2.1-14B 720p 81f": (40, 128, (21, 45, 80))}
SMOKE_SHAPES = {"smoke": (2, 32, (2, 8, 16))}


def selection(q_blocks: int, kv_blocks: int, heads: int, sparsity: float, device, gen: torch.Generator):
    """(select_idx [QB, H, KB], select_num [QB, H], density): top-k random block scores, diagonal forced."""
    keep = max(1, math.ceil(kv_blocks * (1 - sparsity) - 1e-9))
    scores = torch.rand(q_blocks, heads, kv_blocks, generator=gen)
    diag = torch.arange(min(q_blocks, kv_blocks))
    scores[diag, :, diag] = 2.0
    top = torch.topk(scores, keep, dim=-1).indices
    chosen = torch.zeros(q_blocks, heads, kv_blocks, dtype=torch.bool).scatter_(-1, top, True)
    num = chosen.sum(-1)
    order = torch.argsort((~chosen).to(torch.int8), dim=-1, stable=True)
    idx = torch.where(torch.arange(kv_blocks) < num[..., None], order, torch.full_like(order, -1))
    return idx.to(device), num.to(device), float(chosen.float().mean())


def timed(fn, repeat: int, device) -> float:
    """Median milliseconds of `repeat` calls after two warm-ups (CUDA events on a GPU)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def tflops(heads: int, s: int, d: int, density: float, ms: float) -> float:
    return 4.0 * s * s * d * heads * density / (ms * 1e-3) / 1e12


def set_tiles(tiles: str | None) -> None:
    if tiles:
        os.environ["LITE_BOOST_RF_TILES"] = tiles
    else:
        os.environ.pop("LITE_BOOST_RF_TILES", None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sparsity", type=float, nargs="+", default=[0.0, 0.5, 0.75, 0.9])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--tiles", nargs="*", default=["128,64,8,3", "128,128,8,3", "128,64,4,3", "64,64,4,3",
                                                   "128,32,4,4"])
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--rf-v2", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.smoke:   # before triton is first imported: it fixes its interpreter mode then
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("LITE_BOOST_RAIN_FUSION_KERNEL", "triton")
    from lite_boost.ops import rain_fusion_attention, sparse_attention

    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    shapes = SMOKE_SHAPES if args.smoke else {name: SHAPES[name] for name in args.shapes}
    gen = torch.Generator().manual_seed(0)
    flex = block_mask_from = None
    if not args.no_flex:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)   # eager Flex ignores the block sparsity
        block_mask_from = BlockMask.from_kv_blocks
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (Triton interpreter)"
    import triton
    lines = [f"Machine: {gpu}; torch {torch.__version__}, triton {triton.__version__}; {str(dtype)[6:]}, batch 1, "
             f"{BLOCK} x {BLOCK} tiles; CUDA-event medians of {args.repeat} calls. `python -m benchmarks.boost_gpu`.", ""]
    rows = ["| shape | sequence | sparsity | density | SDPA ms | rain_fusion ms | FlexAttention ms | SDPA / ours | "
            "Flex / ours | TFLOP/s kept: SDPA / ours / Flex | max abs diff vs Flex |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    sweep = ["| BLOCK_M, BLOCK_N, warps, stages | sparsity | rain_fusion ms | TFLOP/s kept |", "|---|---:|---:|---:|"]
    rf = ["| shape | sparsity | density | SDPA ms | rf_v2 end to end ms | SDPA / rf_v2 |", "|---|---:|---:|---:|---:|---:|"]
    for si, (name, (heads, d, grid)) in enumerate(shapes.items()):
        s = grid[0] * grid[1] * grid[2]
        q, k, v = (torch.randn(1, heads, s, d, generator=gen).to(device, dtype) for _ in range(3))
        blocks = math.ceil(s / BLOCK)
        sdpa = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), args.repeat, device)
        print(f"{name}: S={s} SDPA {sdpa:.2f} ms ({tflops(heads, s, d, 1.0, sdpa):.0f} TFLOP/s)", flush=True)
        for sp in args.sparsity:
            idx, num, density = selection(blocks, blocks, heads, sp, device, gen)

            def ours():
                return rain_fusion_attention(q, k, v, idx, num, block_shape=(BLOCK, BLOCK))
            if si == 0 and sp in (0.0, 0.75) and args.tiles and not args.smoke:
                for tiles in args.tiles:
                    set_tiles(tiles)
                    ms = timed(ours, args.repeat, device)
                    sweep.append(f"| {tiles} | {sp} | {ms:.2f} | {tflops(heads, s, d, density, ms):.0f} |")
                    print(sweep[-1], flush=True)
                set_tiles(None)
            ms = timed(ours, args.repeat, device)
            out, _ = ours()
            flex_ms, diff = float("nan"), float("nan")
            if flex is not None:
                kv_num = num.to(torch.int32).T[None].contiguous()                       # [1, H, q blocks]
                kv_idx = idx.clamp(min=0).to(torch.int32).permute(1, 0, 2)[None].contiguous()
                mask = block_mask_from(kv_num, kv_idx, BLOCK_SIZE=BLOCK, seq_lengths=(s, s))
                flex_ms = timed(lambda: flex(q, k, v, block_mask=mask), args.repeat, device)
                diff = float((flex(q, k, v, block_mask=mask).float() - out.float()).abs().max())
            rows.append(f"| {name} | {s} | {sp} | {density:.3f} | {sdpa:.2f} | {ms:.2f} | {flex_ms:.2f} | "
                        f"{sdpa / ms:.2f} | {flex_ms / ms:.2f} | {tflops(heads, s, d, 1.0, sdpa):.0f} / "
                        f"{tflops(heads, s, d, density, ms):.0f} / {tflops(heads, s, d, density, flex_ms):.0f} | "
                        f"{diff:.1e} |")
            print(rows[-1], flush=True)
            if args.rf_v2 and sp > 0:
                qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))   # BSND, as the Wan processor calls it
                stats: dict = {}

                def end_to_end():
                    return sparse_attention(qs, ks, vs, input_layout="BSND", sparse_type="rf_v2", latent_shape_q=grid,
                                            sparsity=sp, block_size=BLOCK, stats=stats)
                e2e = timed(end_to_end, args.repeat, device)
                rf.append(f"| {name} | {sp} | {stats['density']:.3f} | {sdpa:.2f} | {e2e:.2f} | {sdpa / e2e:.2f} |")
                print(rf[-1], flush=True)
    text = lines + rows
    if len(sweep) > 2:
        text += ["", f"Triton tile sweep ({next(iter(shapes))}):", "", *sweep]
    if len(rf) > 2:
        text += ["", "sparse_attention(rf_v2) end to end (reorder, pool, select, attend, restore; video-derived "
                 "selection):", "", *rf]
    if args.out:
        write_table(args.out, "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
