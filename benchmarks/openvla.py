"""OpenVLA side by side: lite.embodied.OpenVLAPolicy (float32, bfloat16 and int8 weights) against PyTorch running the
same model as openvla's remote code does (model_zoo/reference/openvla.py's towers and projector, then transformers'
LlamaForCausalLM.generate on the embeddings with its KV cache, greedy), same picture and instruction, same threads,
alternated in one process. The 7B model does not fit this machine twice over, so OpenVLA at a reduced size with
seeded random weights: two ViT-S-size towers (384 wide, 12 blocks, 6 heads: DINOv2-style with registers and
LayerScale, SigLIP-style without class token) at 224x224 (256 patches), a Llama of 1024 x 8 layers with the padded
32064-token vocabulary; 7 action tokens. Reported: the vision graph alone and the whole act (vision, prefill of ~280
tokens, 7 decode steps), medians over interleaved rounds; whether the action tokens equal PyTorch's.

    python -m benchmarks.openvla [--threads 1 2] [--rounds 5] [--out benchmarks/results/openvla.md]
"""
from __future__ import annotations

import json
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

SIZE, VOCAB, TASK = 224, 32064, "put the carrot on the plate"
STATS = {"bridge": {"action": {"q01": [-1.0] * 7, "q99": [1.0] * 7}}}


def build(tmp: str):
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from model_zoo.reference.openvla import OpenVLAReference
    towers = [dict(dim=384, depth=12, heads=6, mlp=1536, patch=14, size=SIZE, class_token=True, registers=4,
                   layer_scale=True),
              dict(dim=384, depth=12, heads=6, mlp=1536, patch=14, size=SIZE, class_token=False, registers=0,
                   layer_scale=False)]
    text = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=16, vocab_size=VOCAB, max_position_embeddings=1024)
    torch.manual_seed(0)
    ref = OpenVLAReference(towers, text, 64, 256, STATS).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "scale_factor" in name else 0.02))
    ckpt = os.path.join(tmp, "ckpt")
    os.makedirs(ckpt)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, os.path.join(ckpt, "model.safetensors"))
    config = {"model_type": "openvla", "use_fused_vision_backbone": True, "timm_model_ids": ["s_dinov2", "s_siglip"],
              "timm_num_heads": [6, 6], "image_sizes": [SIZE, SIZE], "text_config": {"model_type": "llama", **text},
              "pad_to_multiple_of": 64, "n_action_bins": 256, "norm_stats": STATS}
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(config, f)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    words = "In : What action should the robot take to ? Out put carrot on plate".split()
    vocab.update({w: 3 + i for i, w in enumerate(words)})
    vocab.update({f"t{i}": i for i in range(len(vocab), 32000)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(os.path.join(ckpt, "tokenizer.json"))
    return ref, ckpt


def main() -> None:
    args = arguments(__doc__)
    import torch
    import transformers

    from lite.embodied.openvla import OpenVLAPolicy, preprocess_fused
    tmp = tempfile.mkdtemp(prefix="openvla_bench_")
    ref, ckpt = build(tmp)
    formats = ("float32", "bfloat16", "int8")
    convert_heads(ckpt, {"vision": "vision"}, formats)
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (SIZE, SIZE, 3), np.uint8)
    pixels = torch.from_numpy(preprocess_fused(image, SIZE)[None])

    lines = [machine_line() + f" PyTorch {torch.__version__}, transformers {transformers.__version__}.", "",
             __doc__.split("\n\n")[0].replace("\n", " "), "",
             f"Medians over {args.rounds} interleaved rounds; 'ours / PyTorch' < 1 means lite is faster. lite int8: "
             "int8 weights with activations quantised on the fly (dynamic quant), as TextEngine runs them; lite "
             "bfloat16: bf16 products (preferred_bf16).", "",
             "| threads | engine | vision ms | act ms | act: ours / PyTorch | tokens equal PyTorch's |",
             "|---|---|---|---|---|---|"]
    for threads in args.threads:
        torch.set_num_threads(threads)
        policies = {fmt: OpenVLAPolicy(ckpt, fmt, threads) for fmt in formats}
        ids = policies["float32"].prompt_ids(TASK)

        def torch_vision():
            with torch.no_grad():
                return ref.patch_rows(pixels)

        def torch_act():
            with torch.no_grad():
                rows = ref.patch_rows(pixels)
                e = ref.language_model.get_input_embeddings()(torch.tensor([ids]))
                x = torch.cat([e[:, :1], rows, e[:, 1:]], 1)
                out = ref.language_model.generate(inputs_embeds=x, max_new_tokens=7, do_sample=False,
                                                  min_new_tokens=7, pad_token_id=0)
                return out[0, -7:].tolist()

        runs = {"PyTorch f32": (torch_vision, torch_act)}
        for fmt, pol in policies.items():
            runs[f"lite {fmt}"] = ((lambda p=pol: p.image_rows(image)),
                                   (lambda p=pol: p.action_tokens(image, TASK, 7)))
        times, outs = alternate(runs, args.rounds)
        base = statistics.median(times["PyTorch f32"][1])
        for name in runs:
            v, a = statistics.median(times[name][0]), statistics.median(times[name][1])
            same = "yes" if list(outs[name]) == list(outs["PyTorch f32"]) else \
                f"{sum(x == y for x, y in zip(outs[name], outs['PyTorch f32']))} of 7"
            lines.append(f"| {threads} | {name} | {v:.1f} | {a:.1f} | {a / base:.2f} | {same} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
