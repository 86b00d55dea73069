"""Ulysses sequence parallelism on a stack of diffusers Wan blocks, CPU + gloo: time per forward at world size 1
and 2 and the communication each rank does, in one run.

    python -m benchmarks.boost_parallel --tokens 4096 --hidden 768 --heads 6 --blocks 2 \
        --out benchmarks/results/boost_parallel.md

World size 1 runs with `--threads-total` threads; world size N with threads-total / N threads per rank, so the
machine's cores are shared the same way and the difference is what sequence parallelism costs or saves
(on a 2-core VM the compute cannot get faster; on N devices each rank has its own).
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.results_io import write_table


def _join(rank: int, world: int, port: int, args) -> None:
    """A worker's start: its share of the threads, and the gloo group when there are several ranks."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, args.threads_total // world))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)


def build(args):
    from diffusers import WanTransformer3DModel
    torch.manual_seed(0)
    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=args.heads,
                                 attention_head_dim=args.hidden // args.heads, in_channels=16, out_channels=16,
                                 text_dim=64, freq_dim=256, ffn_dim=4 * args.hidden, num_layers=args.blocks,
                                 cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=1024).eval()


def inputs(args):
    side = int(round((args.tokens / args.frames) ** 0.5)) * 2   # latent pixels: 2x2 patches per token
    g = torch.Generator().manual_seed(1)
    return dict(hidden_states=torch.randn(1, 16, args.frames, side, side, generator=g), timestep=torch.tensor([500]),
                encoder_hidden_states=torch.randn(1, 32, 64, generator=g), return_dict=False)


def _worker(rank, world, port, args, out_path):
    _join(rank, world, port, args)
    from lite_boost import ParallelManager
    model = ParallelManager(build(args))
    feed = inputs(args)
    sent = []
    if world > 1:
        real = dist.all_to_all_single

        def counted(out, inp, *a, **kw):
            sent.append(inp.numel() * inp.element_size() * (world - 1) / world)
            return real(out, inp, *a, **kw)
        dist.all_to_all_single = counted
    with torch.no_grad():
        model(**feed)   # warm-up
        best = float("inf")
        for _ in range(args.repeat):
            sent.clear()
            if world > 1:
                dist.barrier()
            t = time.perf_counter()
            model(**feed)
            best = min(best, time.perf_counter() - t)
    if rank == 0:
        tokens = feed["hidden_states"].shape[2] * (feed["hidden_states"].shape[3] // 2) * (feed["hidden_states"].shape[4] // 2)
        with open(out_path, "w") as f:
            f.write(f"{best * 1e3:.1f} {sum(sent) / 2**20:.2f} {len(sent)} {tokens}\n")
    if world > 1:
        dist.destroy_process_group()


def _vae_worker(rank, world, port, args, out_path):
    _join(rank, world, port, args)
    from diffusers import AutoencoderKLWan

    from lite_boost.parallel import decode_exact, decode_time_slice
    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=32, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
                           temperal_downsample=[False, True, True], dropout=0.0).eval()
    z = torch.randn(1, 16, args.vae_frames, args.vae_size, args.vae_size, generator=torch.Generator().manual_seed(2))
    times = _best_ms([lambda: decode_exact(vae, z), lambda: decode_time_slice(vae, z, overlap=args.vae_overlap)],
                     world, args.repeat, warm_up=False)
    _report(rank, world, out_path, times)


def _best_ms(steps, world: int, repeat: int, warm_up: bool) -> list[float]:
    """Each step's best time of `repeat` in ms (the ranks lined up by a barrier before each run)."""
    times = []
    with torch.no_grad():
        for fn in steps:
            if warm_up:
                fn()
            best = float("inf")
            for _ in range(repeat):
                if world > 1:
                    dist.barrier()
                t = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t)
            times.append(best * 1e3)
    return times


def _report(rank: int, world: int, out_path: str, times: list[float]) -> None:
    """Rank 0 writes the times for run_ranks; every rank leaves the group."""
    if rank == 0:
        with open(out_path, "w") as f:
            f.write(" ".join(f"{t:.1f}" for t in times) + "\n")
    if world > 1:
        dist.destroy_process_group()


def _image_worker(rank, world, port, args, out_path):
    """Stable Diffusion's pieces: a UNet forward (its spatial transformers' tokens split) and an AutoencoderKL decode
    (bands of rows), each the best of `repeat` after a warm-up."""
    _join(rank, world, port, args)
    from diffusers import AutoencoderKL, UNet2DConditionModel

    from lite_boost import ParallelManager
    torch.manual_seed(0)
    unet = ParallelManager(UNet2DConditionModel(
        block_out_channels=(64, 128, 256), layers_per_block=1, cross_attention_dim=256, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")).eval())
    vae = ParallelManager(AutoencoderKL(block_out_channels=[32, 64, 128, 128], layers_per_block=1,
                                        down_block_types=["DownEncoderBlock2D"] * 4,
                                        up_block_types=["UpDecoderBlock2D"] * 4).eval())
    g = torch.Generator().manual_seed(3)
    side = args.image_latent
    x, ctx = torch.randn(2, 4, side, side, generator=g), torch.randn(2, 77, 256, generator=g)
    z = torch.randn(1, 4, side, side, generator=g)
    times = _best_ms([lambda: unet(x, torch.tensor([500.0, 500.0]), ctx), lambda: vae.decode(z)], world,
                     args.repeat, warm_up=True)
    _report(rank, world, out_path, times)


def _kandinsky_worker(rank, world, port, args, out_path):
    """Kandinsky 5's pieces: a CrossDiT forward (Ulysses over the visual tokens) and a HunyuanVideo VAE decode (its
    temporal tiles split across ranks), each the best of `repeat` after a warm-up."""
    _join(rank, world, port, args)
    from diffusers import AutoencoderKLHunyuanVideo, Kandinsky5Transformer3DModel

    from lite_boost import ParallelManager
    torch.manual_seed(0)
    dit = ParallelManager(Kandinsky5Transformer3DModel(
        in_visual_dim=16, out_visual_dim=16, in_text_dim=256, in_text_dim2=128, time_dim=256, model_dim=768,
        ff_dim=3072, num_text_blocks=1, num_visual_blocks=args.blocks, axes_dims=(16, 24, 24)).eval())
    vae = ParallelManager(AutoencoderKLHunyuanVideo(latent_channels=16, block_out_channels=(32, 64, 128, 128),
                                                    layers_per_block=1).eval())
    g = torch.Generator().manual_seed(3)
    frames, side = args.frames, int(round((args.tokens / args.frames) ** 0.5)) * 2
    feed = dict(hidden_states=torch.randn(1, frames, side, side, 16, generator=g),
                encoder_hidden_states=torch.randn(1, 64, 256, generator=g), timestep=torch.tensor([500.0]),
                pooled_projections=torch.randn(1, 128, generator=g),
                visual_rope_pos=[torch.arange(frames), torch.arange(side // 2), torch.arange(side // 2)],
                text_rope_pos=torch.arange(64), return_dict=False)
    z = torch.randn(1, 16, args.vae_frames, args.vae_size, args.vae_size, generator=g)
    times = _best_ms([lambda: dit(**feed), lambda: vae.decode(z)], world, args.repeat, warm_up=True)
    _report(rank, world, out_path, times)


def pair_table(worker, args, first: str, second: str) -> tuple[list[str], list[str]]:
    """A table of `worker`'s two times (ms) at each world size, against world 1: (its lines, the measured rows)."""
    rows = [(w, *(float(v) for v in run_ranks(worker, w, args))) for w in args.worlds]
    lines = [f"| world size | {first} ms | {first} vs world 1 | {second} ms | {second} vs world 1 |", "|---|---|---|---|---|"]
    lines += [f"| {w} | {a:.1f} | {a / rows[0][1]:.2f} | {b:.1f} | {b / rows[0][2]:.2f} |" for w, a, b in rows]
    return lines, lines[2:]


def run_ranks(worker, world: int, args) -> list[str]:
    """Spawns `world` gloo ranks of worker(rank, world, port, args, out_path); returns what rank 0 wrote."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "result")
        mp.spawn(worker, args=(world, port, args, path), nprocs=world, join=True)
        return open(path).read().split()


def measure(world: int, args) -> tuple[float, float, int, int]:
    ms, mib, calls, tokens = run_ranks(_worker, world, args)
    return float(ms), float(mib), int(calls), int(tokens)


def measure_vae(world: int, args) -> tuple[float, float]:
    exact, sliced = run_ranks(_vae_worker, world, args)
    return float(exact), float(sliced)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--threads-total", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--vae", action="store_true", help="also time the parallel VAE decode modes")
    ap.add_argument("--vae-frames", type=int, default=9)
    ap.add_argument("--vae-size", type=int, default=16)
    ap.add_argument("--vae-overlap", type=int, default=2)
    ap.add_argument("--images", action="store_true", help="also time a UNet forward and an AutoencoderKL decode")
    ap.add_argument("--image-latent", type=int, default=32, help="their latent side (32: a 256 x 256 image)")
    ap.add_argument("--kandinsky", action="store_true", help="also time a Kandinsky 5 CrossDiT forward (--tokens, "
                                                               "--frames, --blocks) and a HunyuanVideo VAE decode "
                                                               "(--vae-frames, --vae-size)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for world in args.worlds:
        ms, mib, calls, tokens = measure(world, args)
        rows.append((world, ms, mib, calls, tokens))
        print(f"world {world}: {ms:.1f} ms per forward, {calls} all-to-alls, {mib:.2f} MiB sent per rank", flush=True)
    base = rows[0][1]
    text = [f"Machine: {platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}; gloo. Wan DiT stack: "
            f"{args.blocks} blocks, hidden {args.hidden} ({args.heads} heads), {rows[0][4]} tokens, float32; "
            f"{args.threads_total} threads in total, split across ranks.", "",
            "| world size | ms per forward | vs world 1 | all-to-alls per forward | MiB sent per rank per forward |",
            "|---|---|---|---|---|"]
    for world, ms, mib, calls, _ in rows:
        text.append(f"| {world} | {ms:.1f} | {ms / base:.2f} | {calls} | {mib:.2f} |")
    h = args.hidden
    text += ["", "Scaling model for N devices (each with its own compute): per block, compute / N plus four all-to-alls",
             f"of (N-1)/N x S/N x {h} x 4 bytes per rank each, i.e. 4 (N-1) S {h} x 4 / N^2 bytes per rank per block",
             "(16 (N-1)/N^2 bytes per token per hidden unit), plus one all_gather of the output. Compute per rank falls as",
             "1/N and bytes per rank as (N-1)/N^2, so communication / compute grows only as (N-1)/N (bounded by its N=2",
             "value x 2) and falls with S, since attention grows as S^2 and the all-to-alls as S."]
    if args.vae:
        vae_rows = [(w, *measure_vae(w, args)) for w in args.worlds]
        text += ["", f"Wan VAE decode (base_dim 32, z_dim 16, random weights), {args.vae_frames} latent frames of "
                     f"{args.vae_size}x{args.vae_size} -> {1 + 4 * (args.vae_frames - 1)} frames of "
                     f"{8 * args.vae_size}x{8 * args.vae_size}; time_slice with overlap {args.vae_overlap}:", "",
                 "| world size | exact ms | exact vs world 1 | time_slice ms | time_slice vs world 1 |", "|---|---|---|---|---|"]
        for w, exact, sliced in vae_rows:
            text.append(f"| {w} | {exact:.1f} | {exact / vae_rows[0][1]:.2f} | {sliced:.1f} | {sliced / vae_rows[0][2]:.2f} |")
        print("\n".join(text[-len(vae_rows) - 2:]), flush=True)
    if args.images:
        table, measured = pair_table(_image_worker, args, "UNet", "VAE decode")
        side = args.image_latent
        text += ["", f"Stable Diffusion pieces (random weights, float32): a UNet (block_out 64 / 128 / 256, 8 heads, "
                     f"cross-attention to 77 x 256) forward at batch 2 on {side}x{side} latents ({side * side} tokens "
                     f"at its top level), and an AutoencoderKL (32 / 64 / 128 / 128) decode of one {side}x{side} "
                     f"latent to {8 * side}x{8 * side} pixels:", "", *table]
        text += ["", "Scaling model: the UNet's spatial transformers run 1/N of the tokens (plus, per self-attention, four "
                     "all-to-alls of (N-1)/N x S/N x C x 4 bytes, or one all-gather of k and v when the heads do not "
                     "divide), its ResNets and convolutions stay replicated: a step takes (1 - p) + p / N of one "
                     "device's time for the transformers' share p. The VAE decode runs 1/N of every layer; per 3x3 "
                     "convolution one all-gather of 2 rows x C x W and per GroupNorm two all-reduces of B x groups "
                     "floats: near N x while a band is much taller than its halo. On this 2-core machine two ranks "
                     "share the cores one rank used, so the rows show the overhead and the replicated work, not the "
                     "N-device speed-up."]
        print("\n".join(measured), flush=True)
    if args.kandinsky:
        from model_zoo.generation.hunyuan_vae_graph import temporal_tiles
        table, measured = pair_table(_kandinsky_worker, args, "CrossDiT", "VAE decode")
        tiles = len(temporal_tiles(args.vae_frames))
        text += ["", f"Kandinsky 5 pieces (random weights, float32): a CrossDiT (model_dim 768, 12 heads x 64, FFN 3072, "
                     f"{args.blocks} visual blocks + 1 text block, 64 text rows) forward on {rows[0][4]} visual tokens, "
                     f"and a HunyuanVideo VAE (32 / 64 / 128 / 128) decode of {args.vae_frames} latent frames of "
                     f"{args.vae_size}x{args.vae_size} ({tiles} temporal tiles) to "
                     f"{1 + 4 * (args.vae_frames - 1)} frames of {8 * args.vae_size}x{8 * args.vae_size}:", "", *table]
        text += ["", "Scaling model: the CrossDiT's visual blocks run 1/N of the tokens (self-attention's four "
                     "all-to-alls as in the Wan table; cross-attention, MLPs and modulations per token, no "
                     "communication; the text block replicated), so a step is near 1/N of one device's plus the "
                     "all-to-alls. The HunyuanVideo VAE decode splits diffusers' temporal tiles round-robin: "
                     "ceil(tiles / N) / tiles of the work per rank plus one broadcast of each decoded tile (B x 3 x 17 "
                     "x H x W floats). On this 2-core machine two ranks share the cores one rank used."]
        print("\n".join(measured), flush=True)
    if args.out:
        write_table(args.out, "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
