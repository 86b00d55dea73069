"""lite_boost operator benchmark: block-sparse attention (`rain_fusion_attention`) against PyTorch SDPA (dense) and
PyTorch FlexAttention (compiled, same block mask), in one run, on the CPU.

    python -m benchmarks.boost_ops --seq 8192 16384 --sparsity 0 0.5 0.75 0.9 --heads 2 --head-dim 64 \
        --out benchmarks/results/boost_ops.md

Each (sequence, sparsity) gets one random block selection (128 x 128 blocks, the same tiles for every engine:
FlexAttention's BlockMask is built from it). Reported: best of `--repeat` runs per engine, rain_fusion's
speed-up over SDPA and over FlexAttention, the density actually kept, and the max abs difference from
FlexAttention's output (both compute the same masked attention).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import time

import torch

from benchmarks.results_io import write_table

from lite_boost.ops import rain_fusion_attention

BLOCK = 128


def selection(blocks: int, heads: int, sparsity: float, gen: torch.Generator):
    """A random selection keeping ceil(blocks * (1 - sparsity)) key blocks per (query block, head), diagonal
    always kept: (select_idx, select_num_idx, [q blocks, heads, kv blocks] bool)."""
    keep = max(1, math.ceil(blocks * (1 - sparsity) - 1e-9))
    chosen = torch.zeros(blocks, heads, blocks, dtype=torch.bool)
    for g in range(blocks):
        for h in range(heads):
            others = torch.randperm(blocks, generator=gen)
            picked = [g] + [int(x) for x in others if int(x) != g][:keep - 1]
            chosen[g, h, picked] = True
    idx = torch.full((blocks, heads, blocks), -1, dtype=torch.int64)
    num = chosen.sum(-1)
    for g in range(blocks):
        for h in range(heads):
            s = torch.nonzero(chosen[g, h]).flatten()
            idx[g, h, :len(s)] = s
    return idx, num, chosen


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def rf_v2_table(args) -> list[str]:
    """sparse_attention(sparse_type="rf_v2") end to end on a video-shaped sequence (t x 32 x 32 tokens): its
    preparation (reorder, pool, select) and inverse reorder against the dense SDPA time of the same call."""
    from lite_boost.ops import sparse_attention
    lines = ["sparse_attention(rf_v2), t x 32 x 32 latent tokens, no text; stage times from `stats['seconds']`:", "",
             "| sequence | sparsity | density | SDPA ms | rf_v2 total ms | reorder+pool+select ms | inverse reorder ms | overhead / SDPA | SDPA / rf_v2 |",
             "|---|---|---|---|---|---|---|---|---|"]
    gen = torch.Generator().manual_seed(1)
    for s in args.seq:
        t = s // 1024
        q, k, v = (torch.randn(1, args.heads, s, args.head_dim, generator=gen) for _ in range(3))
        sdpa = best_of(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), args.repeat)
        for sp in args.sparsity:
            best = None
            for _ in range(args.repeat):
                stats = {}
                t0 = time.perf_counter()
                sparse_attention(q, k, v, sparse_type="rf_v2", latent_shape_q=(t, 32, 32), sparsity=sp, stats=stats)
                total = (time.perf_counter() - t0) * 1e3
                if best is None or total < best[0]:
                    best = (total, stats)
            total, stats = best
            prep = stats["seconds"]["reorder_pool_select"] * 1e3
            back = stats["seconds"]["inverse_reorder"] * 1e3
            lines.append(f"| {s} | {sp} | {stats['density']:.3f} | {sdpa:.1f} | {total:.1f} | {prep:.1f} | {back:.1f} | "
                         f"{(prep + back) / sdpa:.3f} | {sdpa / total:.2f} |")
            print(lines[-1], flush=True)
    return lines


def rope_table(repeat: int, grid=(21, 30, 52), heads: int = 12, head_dim: int = 128) -> list[str]:
    """Cached float32 RoPE vs diffusers' Wan rotary embedding and the complex128 original, per call (tables
    computed per call for the references, as their models do)."""
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    from lite_boost.ops.rope import rope, wan_split
    t, h, w = grid
    x = torch.randn(1, t * h * w, heads, head_dim)
    emb = WanRotaryPosEmbed(head_dim, (1, 1, 1), max_seq_len=1024)
    latent = torch.zeros(1, 1, t, h, w)

    def diffusers_call():
        cos, sin = emb(latent)
        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
        c, sn = cos[..., 0::2], sin[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * c - x2 * sn
        out[..., 1::2] = x1 * sn + x2 * c
        return out

    dims = wan_split(head_dim)
    tables = [torch.polar(torch.ones(1024, d // 2, dtype=torch.float64),
                          torch.outer(torch.arange(1024).double(),
                                      1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)))
              for d in dims]

    def complex_call():
        f = torch.cat([tables[0][:t, None, None].expand(t, h, w, -1), tables[1][None, :h, None].expand(t, h, w, -1),
                       tables[2][None, None, :w].expand(t, h, w, -1)], -1).reshape(1, t * h * w, 1, -1)
        xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * f).flatten(-2).float()

    rope(x, grid=grid)   # the first call fills the cache
    ours = best_of(lambda: rope(x, grid=grid), repeat)
    diff = best_of(diffusers_call, repeat)
    orig = best_of(complex_call, repeat)
    err = float((rope(x, grid=grid) - diffusers_call()).abs().max())
    print(f"rope: ours {ours:.1f} ms, diffusers {diff:.1f} ms, complex128 {orig:.1f} ms, diff {err:.1e}", flush=True)
    return [f"RoPE, Wan 3-D grid {t}x{h}x{w} ({t * h * w} tokens), {heads} heads x {head_dim}, float32, per call:", "",
            "| lite_boost (cached tables) ms | diffusers Wan ms | complex128 original ms | diffusers / ours | original / ours | max abs diff vs diffusers |",
            "|---|---|---|---|---|---|",
            f"| {ours:.1f} | {diff:.1f} | {orig:.1f} | {diff / ours:.2f} | {orig / ours:.2f} | {err:.1e} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--sparsity", type=float, nargs="+", default=[0.0, 0.5, 0.75, 0.9])
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its compile takes ~30 s)")
    ap.add_argument("--rf-v2", action="store_true", help="also time sparse_attention(rf_v2) end to end by stage")
    ap.add_argument("--rope", action="store_true", help="also time RoPE (Wan grid 21x30x52, 12 heads x 128)")
    ap.add_argument("--rope-only", action="store_true")
    ap.add_argument("--rf-v2-only", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    flex = None
    if not (args.no_flex or args.rope_only or args.rf_v2_only):
        from torch.nn.attention.flex_attention import BlockMask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for s in ([] if args.rope_only or args.rf_v2_only else args.seq):
        q, k, v = (torch.randn(1, args.heads, s, args.head_dim, generator=gen) for _ in range(3))
        blocks = -(-s // BLOCK)
        sdpa = best_of(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), args.repeat)
        for sp in args.sparsity:
            idx, num, chosen = selection(blocks, args.heads, sp, gen)
            ours = best_of(lambda: rain_fusion_attention(q, k, v, idx, num, block_shape=(BLOCK, BLOCK)), args.repeat)
            out, _ = rain_fusion_attention(q, k, v, idx, num, block_shape=(BLOCK, BLOCK))
            flex_ms, diff = float("nan"), float("nan")
            if flex is not None:
                kv_num = num[None].to(torch.int32).permute(0, 2, 1).contiguous()          # [1, H, q blocks]
                kv_idx = idx.clamp(min=0)[None].to(torch.int32).permute(0, 2, 1, 3).contiguous()
                mask = BlockMask.from_kv_blocks(kv_num, kv_idx, BLOCK_SIZE=BLOCK, seq_lengths=(s, s))
                ref = flex(q, k, v, block_mask=mask)   # compiles once per shape
                flex_ms = best_of(lambda: flex(q, k, v, block_mask=mask), args.repeat)
                diff = float((ref - out).abs().max())
            density = float(chosen.float().mean())
            rows.append((s, sp, density, sdpa, ours, flex_ms, diff))
            print(f"seq {s} sparsity {sp}: density {density:.3f} sdpa {sdpa:.1f} ms rain_fusion {ours:.1f} ms "
                  f"flex {flex_ms:.1f} ms  (x{sdpa / ours:.2f} vs SDPA, x{flex_ms / ours:.2f} vs flex, diff {diff:.1e})",
                  flush=True)
    text = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}, "
            f"{args.threads} threads, float32, {args.heads} heads x head dim {args.head_dim}, 128 x 128 blocks.", "",
            "| sequence | sparsity | density kept | SDPA ms | rain_fusion ms | FlexAttention ms | SDPA / ours | Flex / ours | max abs diff vs Flex |",
            "|---|---|---|---|---|---|---|---|---|"]
    for s, sp, density, sdpa, ours, flex_ms, diff in rows:
        text.append(f"| {s} | {sp} | {density:.3f} | {sdpa:.1f} | {ours:.1f} | {flex_ms:.1f} | {sdpa / ours:.2f} | "
                    f"{flex_ms / ours:.2f} | {diff:.1e} |")
    if args.rf_v2 or args.rf_v2_only:
        text += ["", *rf_v2_table(args)]
    if args.rope or args.rope_only:
        text += ["", *rope_table(args.repeat)]
    if args.out:
        write_table(args.out, "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
