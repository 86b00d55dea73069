"""Video VAE decode on the runtime beside PyTorch eager (diffusers), at 1 and 2 threads, in one run: the
HunyuanVideo VAE decoder (Kandinsky 5 Video Lite) on one temporal tile and the Wan 2.1 VAE's time slices. Both are
mostly 3-D convolutions (the runtime's implicit im2col with depth taps, then its GEMM).

    python -m benchmarks.video_vae --out benchmarks/results/video_vae.md

Reduced widths (`--channels`, the real VAEs use 128-512 / 96-384) and small latents so a decode fits a 2-core VM in
seconds; seeded random weights, float32. Reported: the best of `--repeat` decodes per engine (engines alternating),
lite / PyTorch, and lite's max relative difference from PyTorch's output."""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from .machine import cpu_name
from .results_io import publish


def _best(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--channels", default="64,128,128,128", help="HunyuanVideo block_out_channels")
    ap.add_argument("--latent", default="5,16,16", help="the tile's latent frames,height,width")
    ap.add_argument("--wan-dim", type=int, default=48, help="the Wan VAE's base_dim (real: 96)")
    ap.add_argument("--wan-latent", default="3,16,16", help="the Wan latent frames,height,width")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_video_vae_bench"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch
    from diffusers import AutoencoderKLHunyuanVideo, AutoencoderKLWan

    import lite
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    from lite.diffusion.wan import run_time_slices
    os.makedirs(args.work, exist_ok=True)
    rows = []

    def load(src, out, threads, **options):
        if not os.path.isfile(out):
            Converter().convert(FmkType.HF, src, out, verify_build=False,
                                checkpoint_options=CheckpointOptions(**options))
        ctx = lite.Context()
        ctx.cpu.thread_num = threads
        m = lite.Model()
        m.build_from_file(out, lite.ModelType.MINDIR_LITE, ctx)
        return m

    torch.manual_seed(0)
    channels = tuple(int(c) for c in args.channels.split(","))
    f, h, w = (int(v) for v in args.latent.split(","))
    hv = AutoencoderKLHunyuanVideo(latent_channels=16, block_out_channels=channels, layers_per_block=2).eval()
    hv_src = os.path.join(args.work, "hunyuan_" + "_".join(map(str, channels)))
    hv.save_pretrained(hv_src)
    z = np.random.default_rng(0).standard_normal((1, 16, f, h, w)).astype(np.float32)
    wan = AutoencoderKLWan(base_dim=args.wan_dim, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                           attn_scales=[], temperal_downsample=[False, True, True]).eval()
    wan_src = os.path.join(args.work, f"wan_{args.wan_dim}")
    wan.save_pretrained(wan_src)
    wf, wh, ww = (int(v) for v in args.wan_latent.split(","))
    wz = np.random.default_rng(1).standard_normal((1, 16, wf, wh, ww)).astype(np.float32)
    for threads in args.threads:
        torch.set_num_threads(threads)
        m = load(hv_src, f"{hv_src}_{f}x{h}x{w}.ms", threads, latent_shape=(f, h, w))
        with torch.no_grad():
            want = hv.decoder(hv.post_quant_conv(torch.from_numpy(z))).numpy()
        got = m.predict({"latents": z})[0].get_data_to_numpy()
        tl = _best(lambda: m.predict({"latents": z}), args.repeat)
        with torch.no_grad():
            tt = _best(lambda: hv.decoder(hv.post_quant_conv(torch.from_numpy(z))), args.repeat)
        rows.append((f"HunyuanVideo VAE decoder ({args.channels}), one tile", args.latent, threads, tl, tt,
                     float(np.abs(got - want).max() / np.abs(want).max())))
        first = load(wan_src, f"{wan_src}_first.ms", threads, head="vae_decoder_first", latent_shape=(wf, wh, ww))
        nxt = load(wan_src, f"{wan_src}_next.ms", threads, head="vae_decoder", latent_shape=(wf, wh, ww))
        chunks = [wz[:, :, i:i + 1] for i in range(wf)]

        def lite_wan():
            return np.concatenate(run_time_slices(first, nxt, chunks, "latents", "frames"), axis=2)

        with torch.no_grad():
            want = wan.decode(torch.from_numpy(wz)).sample.numpy()
        got = lite_wan()
        tl = _best(lite_wan, args.repeat)
        with torch.no_grad():
            tt = _best(lambda: wan.decode(torch.from_numpy(wz)), args.repeat)
        rows.append((f"Wan 2.1 VAE decoder (base_dim {args.wan_dim}), time slices", args.wan_latent, threads, tl,
                     tt, float(np.abs(got - want).max() / np.abs(want).max())))
        print(rows[-2:], flush=True)
    lines = ["# Video VAE decode: lite vs PyTorch eager", "",
             f"{cpu_name()}; {time.strftime('%Y-%m-%d')}. `python -m benchmarks.video_vae --channels {args.channels} "
             f"--latent {args.latent} --wan-dim {args.wan_dim} --wan-latent {args.wan_latent}`. Seeded random "
             "weights, reduced widths, float32; best of "
             f"{args.repeat} decodes per engine. PyTorch: diffusers' decoder (the Wan VAE: its decode, frame by frame "
             "with its caches, as the runtime's slices). Diff: lite's max |difference| over PyTorch's max |value|.",
             "", "| model | latent | threads | lite s | PyTorch s | lite / PyTorch | diff |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, latent, threads, tl, tt, diff in rows:
        lines.append(f"| {name} | {latent} | {threads} | {tl:.2f} | {tt:.2f} | {tl / tt:.2f} | {diff:.1e} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
