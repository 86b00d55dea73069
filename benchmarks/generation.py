"""One denoising step of a generation transformer: lite's graph (model_zoo/generation/wan_graph.py, flux_graph.py, converted
from the checkpoint) beside PyTorch eager (diffusers, SDPA) and, for Wan, PyTorch with lite_boost's sparse attention
(RainFusion v2), at 1 and 2 threads, in one run.

Wan2.1-T2V-1.3B-shaped DiT: its real widths (hidden 1536, 12 heads of 128, FFN 8960, text 4096, freq 256) with
seeded random weights; `--layers` of its 30 blocks (a step's time is the blocks' sum: per-layer figures scale), the
latent of one 480p frame or more (`--latent`), CFG's pair as a batch of 2, 512 text tokens. FLUX.1-dev-shaped
transformer (hidden 3072, 24 heads of 128, T5 4096, pooled 768, guidance embedding): `--flux-layers` double- and
single-stream blocks of its 19 + 38, the latent `--flux-latent` (64,64: a 512 x 512 image, 1024 tokens), 512 text
rows, batch 1 (guidance-distilled: no CFG pair). `--sd-latent`: Stable Diffusion 1.5's whole UNet (its real
config) at batch 2 and 77 text rows. `--kandinsky-layers`: a Kandinsky 5 Video Lite-shaped CrossDiT (model_dim 1792,
28 heads of 64, FFN 7168, text 3584, visual_cond) with that many of its 32 visual blocks (and its 2 text blocks), the
latent `--kandinsky-latent` (1,64,96: one 512 x 768 frame, 1,536 tokens), 128 text rows, batch 1 (the pipeline runs
CFG's two passes one at a time). `--animate-layers`: a Wan2.2-Animate-14B-shaped transformer (hidden 5120, 40 heads,
FFN 13824, CLIP ViT-H image rows, the motion / face encoders at 512 x 512) with that many of its 40 blocks, the
latent `--animate-latent` (2,60,104: the reference frame and one 480p latent frame), batch 1.

    python -m benchmarks.generation --layers 6 --latent 1,60,104 2,60,104 --flux-layers 1,2 \
        --out benchmarks/results/generation.md

Reported per (tokens, threads): the median of `--repeat` steps per engine (engines interleaved each round), lite /
PyTorch, and lite's max relative difference from PyTorch's output (float32)."""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from .machine import cpu_name  # noqa: E402
from .results_io import publish  # noqa: E402

WAN_1_3B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
                text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", rope_max_seq_len=1024)


def make_model(work: str, class_name: str, config: dict, tag: str):
    """A seeded diffusers model of `class_name` and its checkpoint directory (saved once per tag)."""
    import diffusers
    import torch
    torch.manual_seed(0)
    model = getattr(diffusers, class_name)(**config).eval()
    path = os.path.join(work, tag)
    if not os.path.isfile(os.path.join(path, "config.json")):
        model.save_pretrained(path)
    return model, path


FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))


QWEN_IMAGE = dict(patch_size=2, in_channels=64, out_channels=16, num_layers=60, attention_head_dim=128,
                  num_attention_heads=24, joint_attention_dim=3584, axes_dims_rope=(16, 56, 56))


# stable-diffusion-v1-5's unet/config.json values (the registry row's); the whole UNet, every block
SD15_UNET = dict(in_channels=4, out_channels=4, block_out_channels=(320, 640, 1280, 1280), layers_per_block=2,
                 down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                   "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
                 cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32, sample_size=64)

# the registry's Kandinsky-5.0 Video Lite rows (k5_lite configs): regular attention
KANDINSKY5_VIDEO_LITE = dict(in_visual_dim=16, out_visual_dim=16, in_text_dim=3584, in_text_dim2=768, time_dim=512,
                             patch_size=(1, 2, 2), model_dim=1792, ff_dim=7168, num_text_blocks=2, num_visual_blocks=32,
                             axes_dims=(16, 24, 24), visual_cond=True)


# the registry's Wan2.2-Animate-14B transformer (Wan 14B widths, CLIP ViT-H image states, the motion / face encoders)
WAN_ANIMATE_14B = dict(patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=36,
                       latent_channels=16, out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40,
                       image_dim=1280, added_kv_proj_dim=5120, rope_max_seq_len=1024, motion_encoder_size=512,
                       motion_style_dim=512, motion_dim=20, motion_encoder_dim=512, face_encoder_hidden_dim=1024,
                       face_encoder_num_heads=4, inject_face_latents_blocks=5)


def lite_model(src: str, out: str, latent, threads: int, text_len: int | None = None, head: str | None = None):
    import lite
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    if not os.path.isfile(out):
        Converter().convert(FmkType.HF, src, out, verify_build=False,
                            checkpoint_options=CheckpointOptions(latent_shape=tuple(latent), text_len=text_len,
                                                                 head=head))
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    m = lite.Model()
    m.build_from_file(out, lite.ModelType.MINDIR_LITE, ctx)
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--latent", nargs="+", default=["1,60,104"], help="latent frames,height,width (480p: 60,104)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sparsity", type=float, default=0.75, help="lite_boost rf_v2 sparsity (0 to skip)")
    ap.add_argument("--flux-layers", default="", help="double,single blocks of a FLUX-shaped transformer (empty: "
                                                       "no FLUX rows)")
    ap.add_argument("--flux-latent", default="64,64", help="FLUX latent height,width (64,64: 512 x 512 pixels)")
    ap.add_argument("--qwen-layers", type=int, default=0, help="blocks of a Qwen-Image-shaped transformer (of its 60; "
                                                               "0: no Qwen-Image rows); latent as --flux-latent")
    ap.add_argument("--qwen-text", type=int, default=256, help="Qwen-Image text rows")
    ap.add_argument("--sd-latent", default="", help="latent height,width of a whole SD 1.5 UNet step (64,64: 512 x "
                                                     "512; empty: no SD rows)")
    ap.add_argument("--kandinsky-layers", type=int, default=0, help="visual blocks of a Kandinsky 5 Video Lite-shaped "
                                                                    "CrossDiT (of its 32; 0: no Kandinsky rows)")
    ap.add_argument("--kandinsky-latent", default="1,64,96", help="Kandinsky latent frames,height,width (1,64,96: "
                                                                  "one 512 x 768 frame)")
    ap.add_argument("--animate-layers", type=int, default=0, help="blocks of a Wan2.2-Animate-14B-shaped transformer "
                    "(of its 40; a face adapter after every fifth, the first after block 0; 0: skip)")
    ap.add_argument("--animate-latent", default="2,60,104", help="Animate latent frames,height,width (the reference "
                    "frame + 1 latent frame at 480p: 2,60,104)")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_generation_bench"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch
    from lite_boost import ParallelManager
    from lite_boost.parallel.manager import restore
    os.makedirs(args.work, exist_ok=True)
    model, src = make_model(args.work, "WanTransformer3DModel", {**WAN_1_3B, "num_layers": args.layers},
                            f"wan13b_{args.layers}l")
    rng = np.random.default_rng(0)
    text = rng.standard_normal((2, 512, 4096)).astype(np.float32)
    t = np.array([937.0, 937.0], np.float32)
    rows = []

    def measure(name, m, torch_step, feeds, sparse_step=None, **extra):
        got = m.predict(feeds)[0].get_data_to_numpy()   # warm-up (plans, packed weights)
        want = torch_step()
        diff = float(np.abs(got - want).max() / np.abs(want).max())
        times = {"lite": [], "pytorch": [], "sparse": []}
        for r in range(args.repeat):
            for engine in (["lite", "pytorch"] if r % 2 == 0 else ["pytorch", "lite"]):
                time.sleep(0.3)
                t0 = time.perf_counter()
                m.predict(feeds) if engine == "lite" else torch_step()
                times[engine].append(time.perf_counter() - t0)
            if sparse_step is not None and r == 0:
                times["sparse"].append(sparse_step())
        med = {k: statistics.median(v) if v else None for k, v in times.items()}
        row = dict(model=name, diff=diff, **extra, **med)
        rows.append(row)
        print(row, flush=True)

    for spec in args.latent:
        latent = tuple(int(v) for v in spec.split(","))
        tokens = latent[0] * (latent[1] // 2) * (latent[2] // 2)
        x = rng.standard_normal((2, 16, *latent)).astype(np.float32)
        path = os.path.join(args.work, f"dit_{args.layers}l_{'x'.join(map(str, latent))}.ms")
        for threads in args.threads:
            torch.set_num_threads(threads)
            m = lite_model(src, path, latent, threads)
            feeds = {"hidden_states": x, "timestep": t, "encoder_hidden_states": text}
            xt, tt, ct = torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(text)

            def torch_step():
                with torch.no_grad():
                    return model(xt, tt, ct).sample.numpy()

            def sparse_step():
                ParallelManager(model, {"attention": {"sparse_type": "rf_v2", "sparsity": args.sparsity,
                                                      "dense_steps": 0}})
                try:
                    with torch.no_grad():
                        model(xt, tt, ct)   # the first call after conversion counts as a dense step
                        t0 = time.perf_counter()
                        model(xt, tt, ct)
                        return time.perf_counter() - t0
                finally:
                    restore(model)

            measure(f"Wan2.1-1.3B, {args.layers} of 30 blocks, batch 2", m, torch_step, feeds,
                    sparse_step if args.sparsity > 0 else None, latent=spec, tokens=tokens, threads=threads)
            del m
    model = None   # frees the Wan model before FLUX is built
    if args.flux_layers:
        double, single = (int(v) for v in args.flux_layers.split(","))
        flux, flux_src = make_model(args.work, "FluxTransformer2DModel",
                                    {**FLUX_DEV, "num_layers": double, "num_single_layers": single},
                                    f"flux_{double}d{single}s")
        h, w = (int(v) for v in args.flux_latent.split(","))
        tokens = (h // 2) * (w // 2)
        feeds = {"hidden_states": rng.standard_normal((1, tokens, 64)).astype(np.float32),
                 "encoder_hidden_states": rng.standard_normal((1, 512, 4096)).astype(np.float32),
                 "pooled_projections": rng.standard_normal((1, 768)).astype(np.float32),
                 "timestep": np.array([0.8], np.float32), "guidance": np.array([3.5], np.float32)}
        ids = np.zeros((tokens, 3), np.float32)
        rows_, cols_ = np.meshgrid(np.arange(h // 2), np.arange(w // 2), indexing="ij")
        ids[:, 1], ids[:, 2] = rows_.ravel(), cols_.ravel()
        tf = {k: torch.from_numpy(v) for k, v in feeds.items()}
        path = os.path.join(args.work, f"flux_{double}d{single}s_{h}x{w}.ms")
        for threads in args.threads:
            torch.set_num_threads(threads)
            m = lite_model(flux_src, path, (1, h, w), threads, text_len=512)

            def flux_step():
                with torch.no_grad():
                    return flux(tf["hidden_states"], tf["encoder_hidden_states"], tf["pooled_projections"],
                                tf["timestep"], img_ids=torch.from_numpy(ids), txt_ids=torch.zeros(512, 3),
                                guidance=tf["guidance"]).sample.numpy()

            measure(f"FLUX.1-dev, {double} + {single} of 19 + 38 blocks, batch 1", m, flux_step, feeds,
                    latent=f"{h},{w}", tokens=tokens + 512, threads=threads)
            del m
        flux = None
    if args.qwen_layers:
        qwen, qwen_src = make_model(args.work, "QwenImageTransformer2DModel",
                                    {**QWEN_IMAGE, "num_layers": args.qwen_layers}, f"qwen_image_{args.qwen_layers}l")
        h, w = (int(v) for v in args.flux_latent.split(","))
        tokens, L = (h // 2) * (w // 2), args.qwen_text
        feeds = {"hidden_states": rng.standard_normal((1, tokens, 64)).astype(np.float32),
                 "encoder_hidden_states": rng.standard_normal((1, L, 3584)).astype(np.float32),
                 "encoder_hidden_states_mask": np.ones((1, L), np.int64), "timestep": np.array([0.8], np.float32)}
        tq = {k: torch.from_numpy(v) for k, v in feeds.items()}
        path = os.path.join(args.work, f"qwen_image_{args.qwen_layers}l_{h}x{w}.ms")
        for threads in args.threads:
            torch.set_num_threads(threads)
            m = lite_model(qwen_src, path, (1, h, w), threads)

            def qwen_step():
                with torch.no_grad():
                    return qwen(tq["hidden_states"], tq["encoder_hidden_states"], tq["encoder_hidden_states_mask"],
                                tq["timestep"], img_shapes=[(1, h // 2, w // 2)]).sample.numpy()

            measure(f"Qwen-Image, {args.qwen_layers} of 60 blocks, batch 1", m, qwen_step, feeds, latent=f"{h},{w}",
                    tokens=tokens + L, threads=threads)
            del m
    if args.sd_latent:
        unet, unet_src = make_model(args.work, "UNet2DConditionModel", SD15_UNET, "sd15_unet")
        h, w = (int(v) for v in args.sd_latent.split(","))
        feeds = {"sample": rng.standard_normal((2, 4, h, w)).astype(np.float32),
                 "timestep": np.array([801.0, 801.0], np.float32),
                 "encoder_hidden_states": rng.standard_normal((2, 77, 768)).astype(np.float32)}
        ts = {k: torch.from_numpy(v) for k, v in feeds.items()}
        path = os.path.join(args.work, f"sd15_unet_{h}x{w}.ms")
        for threads in args.threads:
            torch.set_num_threads(threads)
            m = lite_model(unet_src, path, (h, w), threads)

            def unet_step():
                with torch.no_grad():
                    return unet(ts["sample"], ts["timestep"], ts["encoder_hidden_states"]).sample.numpy()

            measure("SD 1.5 UNet, whole, batch 2", m, unet_step, feeds, latent=f"{h},{w}", tokens=h * w,
                    threads=threads)
            del m
        unet = None
    if args.kandinsky_layers:
        k5, k5_src = make_model(args.work, "Kandinsky5Transformer3DModel",
                                {**KANDINSKY5_VIDEO_LITE, "num_visual_blocks": args.kandinsky_layers},
                                f"kandinsky5_{args.kandinsky_layers}l")
        f, h, w = (int(v) for v in args.kandinsky_latent.split(","))
        feeds = {"hidden_states": rng.standard_normal((1, f, h, w, 33)).astype(np.float32),
                 "encoder_hidden_states": rng.standard_normal((1, 128, 3584)).astype(np.float32),
                 "pooled_projections": rng.standard_normal((1, 768)).astype(np.float32),
                 "timestep": np.array([800.0], np.float32)}
        tk = {k: torch.from_numpy(v) for k, v in feeds.items()}
        path = os.path.join(args.work, f"kandinsky5_{args.kandinsky_layers}l_{f}x{h}x{w}.ms")
        for threads in args.threads:
            torch.set_num_threads(threads)
            m = lite_model(k5_src, path, (f, h, w), threads)

            def k5_step():
                with torch.no_grad():
                    return k5(tk["hidden_states"], tk["encoder_hidden_states"], tk["timestep"],
                              tk["pooled_projections"], [torch.arange(f), torch.arange(h // 2), torch.arange(w // 2)],
                              torch.arange(128)).sample.numpy()

            measure(f"Kandinsky 5 Video Lite, {args.kandinsky_layers} of 32 blocks, batch 1", m, k5_step, feeds,
                    latent=args.kandinsky_latent, tokens=f * (h // 2) * (w // 2), threads=threads)
            del m
        k5 = None
    if args.animate_layers:
        animate, animate_src = make_model(args.work, "WanAnimateTransformer3DModel",
                                          {**WAN_ANIMATE_14B, "num_layers": args.animate_layers,
                                           # (diffusers needs an adapter for block 0: one per block below 5)
                                           "inject_face_latents_blocks": min(5, args.animate_layers)},
                                          f"wan_animate_{args.animate_layers}l")
        f, h, w = (int(v) for v in args.animate_latent.split(","))
        face_frames = 4 * (f - 2) + 1
        feeds = {"hidden_states": rng.standard_normal((1, 36, f, h, w)).astype(np.float32),
                 "timestep": np.array([900.0], np.float32),
                 "encoder_hidden_states": rng.standard_normal((1, 512, 4096)).astype(np.float32),
                 "encoder_hidden_states_image": rng.standard_normal((1, 257, 1280)).astype(np.float32),
                 "pose_hidden_states": rng.standard_normal((1, 16, f - 1, h, w)).astype(np.float32)}
        face = rng.uniform(-1, 1, (1, 3, face_frames, 512, 512)).astype(np.float32)
        ta = {k: torch.from_numpy(v) for k, v in feeds.items()}
        tag = f"wan_animate_{args.animate_layers}l_{f}x{h}x{w}"
        for threads in args.threads:
            torch.set_num_threads(threads)
            m = lite_model(animate_src, os.path.join(args.work, tag + ".ms"), (f, h, w), threads)
            face_m = lite_model(animate_src, os.path.join(args.work, tag + "_face.ms"), (f, h, w), threads,
                                head="face_encoder")

            class _WithFace:   # lite's step runs the face encoder too (diffusers' step recomputes it)
                def predict(self, feeds_):
                    motion = face_m.predict({"face_pixel_values": face})[0].get_data_to_numpy()
                    return m.predict({**feeds_, "motion_vec": motion})

            def animate_step():
                with torch.no_grad():
                    return animate(**ta, face_pixel_values=torch.from_numpy(face), return_dict=False)[0].numpy()

            measure(f"Wan2.2-Animate-14B, {args.animate_layers} of 40 blocks + face encoder, batch 1", _WithFace(),
                    animate_step, feeds, latent=args.animate_latent, tokens=f * (h // 2) * (w // 2), threads=threads)
            del m, face_m
        animate = None
    command = (f"python -m benchmarks.generation --layers {args.layers} --latent {' '.join(args.latent)}"
               + (f" --flux-layers {args.flux_layers} --flux-latent {args.flux_latent}" if args.flux_layers else "")
               + (f" --qwen-layers {args.qwen_layers} --qwen-text {args.qwen_text}" if args.qwen_layers else "")
               + (f" --sd-latent {args.sd_latent}" if args.sd_latent else "")
               + (f" --kandinsky-layers {args.kandinsky_layers} --kandinsky-latent {args.kandinsky_latent}"
                  if args.kandinsky_layers else "")
               + (f" --animate-layers {args.animate_layers} --animate-latent {args.animate_latent}"
                  if args.animate_layers else ""))
    lines = [
        "# One denoising step: lite's transformer graphs vs PyTorch eager",
        "",
        f"{cpu_name()}; {time.strftime('%Y-%m-%d')}. `{command}`. Seeded random weights at the models' real widths, "
        "fewer blocks (a step is the sum of its blocks), float32. Wan2.1-T2V-1.3B-shaped DiT (hidden 1536, 12 heads "
        "x 128, FFN 8960): batch 2 (CFG's pair), 512 text rows; FLUX.1-dev-shaped transformer (hidden 3072, 24 heads "
        "x 128, guidance embedding): batch 1, 512 text rows (tokens = image + text); Qwen-Image-shaped MMDiT (hidden "
        f"3072, 24 heads x 128, text 3584): batch 1, {args.qwen_text} text rows, the FLUX latent; Stable Diffusion "
        "1.5's whole UNet (its real config): batch 2 (CFG's pair), 77 text rows, tokens = the top level's pixels; "
        "Kandinsky 5 Video Lite-shaped CrossDiT (model_dim 1792, 28 heads x 64, FFN 7168, its 2 text blocks, "
        "visual_cond): batch 1, 128 text rows (its self-attentions round q / k to bfloat16 in both engines); "
        "Wan2.2-Animate-14B-shaped transformer (hidden 5120, 40 heads x 128, FFN 13824, CLIP ViT-H's 257 image "
        "rows, a face adapter after block 0): batch 1 (its default guidance 1 runs no CFG pair), 512 text rows, one "
        "512 x 512 face frame per latent frame after the reference one, the motion / face encoders in both engines' "
        "step (lite runs its face-encoder graph, then the DiT). "
        "Median of "
        f"{args.repeat} steps per engine, engines alternating. PyTorch: diffusers (SDPA attention); + RainFusion: "
        f"Wan with lite_boost's rf_v2 sparse self-attention at sparsity {args.sparsity} (one step after a dense one). "
        "Diff: lite's max |difference| from PyTorch's output over PyTorch's max |value|.",
        "",
        "| model | latent | tokens | threads | lite s | PyTorch s | lite / PyTorch | PyTorch + RainFusion s | diff |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        sparse = f"{r['sparse']:.2f}" if r["sparse"] else "-"
        lines.append(f"| {r['model']} | {r['latent']} | {r['tokens']} | {r['threads']} | {r['lite']:.2f} | "
                     f"{r['pytorch']:.2f} | {r['lite'] / r['pytorch']:.2f} | {sparse} | {r['diff']:.1e} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
