"""openpi pi0.5 side by side: lite.embodied.Pi05Policy (float32, bfloat16 and int8 weights; bfloat16 products at
precision_mode preferred_bf16 where the CPU has them) against transformers'
PI05ForConditionalGeneration.sample_actions in PyTorch (float32, eager), same inputs, same threads, alternated in one
process. The full model (3.3B parameters) does not fit this machine twice over, so the model is pi0.5 at a reduced
size with seeded random weights: SigLIP 384 wide x 6 layers at 224x224 (256 tokens a camera), Gemma 512 wide x 6
layers (8 heads, 1 KV head of 64), the expert 256 wide x 6 layers; two cameras, a 48-token prompt, a 50-step
chunk of 32, 10 flow-matching steps. Reported: the prefix (images and prompt -> every layer's keys / values), one
expert step ((act - prefix) / steps) and the whole act, medians over interleaved rounds; actions' max difference and
cosine (of what the flow added to the noise) against PyTorch float32.

    python -m benchmarks.pi05 [--threads 1 2] [--rounds 5] [--out benchmarks/results/pi05.md]
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.compare import machine_line  # noqa: E402
from benchmarks.in_process import alternate, arguments, convert_heads  # noqa: E402
from benchmarks.results_io import publish  # noqa: E402

CAMERAS, PROMPT, CHUNK, DIMS, STEPS = 2, 48, 50, 32, 10


def build(tmp: str):
    import torch
    from transformers import PI05Config, PI05ForConditionalGeneration
    text = dict(model_type="gemma", hidden_size=512, num_hidden_layers=6, intermediate_size=2048, num_attention_heads=8,
                num_key_value_heads=1, head_dim=64, vocab_size=1024, max_position_embeddings=1024)
    vision = dict(model_type="siglip_vision_model", hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                  intermediate_size=1536, patch_size=14, image_size=224, vision_use_head=False)
    config = PI05Config(
        vlm_config=dict(model_type="paligemma", text_config=text, vision_config=vision, projection_dim=512,
                        image_token_id=1023),
        dit_config=dict(model_type="gemma", hidden_size=256, num_hidden_layers=6, intermediate_size=1024,
                        num_attention_heads=8, num_key_value_heads=1, head_dim=64, max_position_embeddings=1024),
        chunk_size=CHUNK, max_action_dim=DIMS, num_inference_steps=STEPS)
    torch.manual_seed(0)
    model = PI05ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)   # the adaRMS Linears start at zero
    ckpt = os.path.join(tmp, "ckpt")
    model.save_pretrained(ckpt)
    return model, ckpt


def main() -> None:
    args = arguments(__doc__)
    import torch

    import lite
    from lite.embodied.pi05 import Pi05Policy
    tmp = tempfile.mkdtemp(prefix="pi05_bench_")
    model, ckpt = build(tmp)
    formats = ("float32", "bfloat16", "int8")
    convert_heads(ckpt, {"vision_language": "prefix", "action_expert": "action_expert"}, formats)
    with open(os.path.join(ckpt, "tokenizer.json"), "w") as f:   # the policy opens one; ids are fed directly here
        f.write('{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"}}')

    rng = np.random.default_rng(0)
    pixels = rng.standard_normal((1, CAMERAS, 3, 224, 224)).astype(np.float32)
    text_ids = rng.integers(2, 1000, (1, PROMPT)).astype(np.int64)
    noise = rng.standard_normal((1, CHUNK, DIMS)).astype(np.float32)
    image_tokens = CAMERAS * 256
    input_ids = torch.from_numpy(np.concatenate([np.full((1, image_tokens), 1023), text_ids], 1))
    mask = torch.ones(input_ids.shape, dtype=torch.long)
    tp, tn = torch.from_numpy(pixels), torch.from_numpy(noise)
    cams = torch.ones((1, CAMERAS), dtype=torch.bool)

    def torch_prefix():
        with torch.no_grad():
            embeds = model.model.embed_prefix(input_ids, tp, cams)
            return model.model.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                                   token_type_ids=torch.zeros_like(mask), use_cache=True).cache

    def torch_act():
        with torch.no_grad():
            return model.sample_actions(input_ids=input_ids, pixel_values=tp, noise=tn, attention_mask=mask,
                                        pixel_attention_mask=cams).numpy()[0]

    import transformers
    lines = [machine_line() + f" PyTorch {torch.__version__}, transformers {transformers.__version__}.", "",
             __doc__.split("\n\n")[0].replace("\n", " "), "",
             f"Medians over {args.rounds} interleaved rounds (one prefix and one act per engine a round); "
             "'ours / PyTorch' < 1 means lite is faster.", "",
             "| threads | engine | prefix ms | expert step ms | act ms | act: ours / PyTorch | max abs diff | cosine |",
             "|---|---|---|---|---|---|---|---|"]
    for threads in args.threads:
        torch.set_num_threads(threads)
        policies = {fmt: Pi05Policy(ckpt, fmt, threads, "enforce_fp32") for fmt in formats}
        if lite._lite.cpu_features()["avx512_bf16"]:   # bfloat16 products (AVX512_BF16 / AMX): the bf16 default
            policies["bfloat16, preferred_bf16"] = Pi05Policy(ckpt, "bfloat16", threads, "preferred_bf16")
        runs = {"PyTorch f32": (torch_prefix, torch_act)}
        for fmt, pol in policies.items():
            runs[f"lite {fmt}"] = ((lambda p=pol: p.prefix_cache(pixels, text_ids)),
                                   (lambda p=pol: p.sample_actions(pixels, text_ids, noise)[0]))
        times, outs = alternate(runs, args.rounds)
        ref = outs["PyTorch f32"]
        base = statistics.median(times["PyTorch f32"][1])
        for name in runs:
            p, a = statistics.median(times[name][0]), statistics.median(times[name][1])
            da, db = (outs[name] - noise[0]).ravel(), (ref - noise[0]).ravel()
            cos = float(da @ db / np.linalg.norm(da) / np.linalg.norm(db))
            lines.append(f"| {threads} | {name} | {p:.1f} | {(a - p) / STEPS:.2f} | {a:.1f} | {a / base:.2f} | "
                         f"{np.abs(outs[name] - ref).max():.1e} | {cos:.6f} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
