"""Text-to-video with a Wan2.1-style DiT and VAE across ranks: the one-line ParallelManager conversion.

    torchrun --nproc_per_node=2 examples/wan_t2v.py --out frames/      # CPU (gloo), tiny random weights

Real checkpoints load through diffusers (`WanPipeline.from_pretrained(...)`, then `ParallelManager(pipe)`);
this example builds tiny configs with seeded random weights (no downloads) and random "prompt embeddings"
(the UMT5 text encoder is not needed to show the parallel path). Every rank runs the same code; the DiT
runs Ulysses sequence parallel, the VAE decodes time slices, and rank 0 writes the frames as PNGs.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist

from lite_boost import ParallelManager
from lite_boost.parallel import decode_time_slice


def build():
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    torch.manual_seed(0)
    dit = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4,
                                out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32, num_layers=2,
                                cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=64).eval()
    vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
                           temperal_downsample=[False, True, True], dropout=0.0).eval()
    return dit, vae


def write_frames(video: torch.Tensor, out_dir: str) -> int:
    """video [1, 3, F, H, W] in [-1, 1] -> out_dir/frame_XXXX.png, each written atomically."""
    from PIL import Image
    os.makedirs(out_dir, exist_ok=True)
    frames = ((video[0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 3, 0).numpy()
    for i, frame in enumerate(frames):
        fd, tmp = tempfile.mkstemp(suffix=".png", dir=out_dir)
        os.close(fd)
        Image.fromarray(np.ascontiguousarray(frame)).save(tmp)
        os.replace(tmp, os.path.join(out_dir, f"frame_{i:04d}.png"))
    return len(frames)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="frames")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--latent-frames", type=int, default=5)
    ap.add_argument("--size", type=int, default=8, help="latent height and width")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dit, vae = build()
    ParallelManager(dit, {"dit": {"alg": "ulysses"}})   # the one line (initialises the process group)
    rank = dist.get_rank() if dist.is_initialized() else 0
    g = torch.Generator().manual_seed(42)   # the same noise and "prompt" on every rank
    latents = torch.randn(1, 4, args.latent_frames, args.size, args.size, generator=g)
    prompt = torch.randn(1, 7, 16, generator=g)
    sigmas = torch.linspace(1.0, 0.0, args.steps + 1)
    with torch.no_grad():
        for i in range(args.steps):   # flow matching, Euler steps: x <- x + (sigma_next - sigma) v(x, t)
            t = torch.tensor([int(sigmas[i] * 999)])
            velocity = dit(hidden_states=latents, timestep=t, encoder_hidden_states=prompt, return_dict=False)[0]
            latents = latents + (sigmas[i + 1] - sigmas[i]) * velocity
        video = decode_time_slice(vae, latents, overlap=args.latent_frames)   # full history: exact
    if rank == 0:
        n = write_frames(video, args.out)
        print(f"wrote {n} frames of {tuple(video.shape[-2:])} to {args.out}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
