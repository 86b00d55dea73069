"""Speech synthesis: lite's CosyVoice 2 pipeline (the LM step graph, the flow encoder / estimator graphs with the
Euler loop, the HiFT graph) beside PyTorch eager (model_zoo/reference/cosyvoice_*.py: the modules written from the
original's code, with its tensor names; the LM over transformers' Qwen2ForCausalLM with its KV cache), one run, the same
seeded random weights.

A CosyVoice2-0.5B-shaped release: the yaml's sizes (flow: 512-wide upsampling Conformer, 6 + 4 blocks, the U-Net
estimator 256 channels with 4 + 12 + 4 transformer blocks; HiFT 512 base channels, 8 x 5 x 3 upsampling and a 16-point
iSTFT) and the Qwen2.5-0.5B backbone (896 wide, `--layers` of 24, 14 / 2 heads, MLP 4864, vocabulary 151936). The
prompt is fixed (a 20-token prompt text + a 12-token text, 50 prompt speech tokens with their 100 mel frames and a
speaker embedding: the audio front end is not timed); both generate exactly `--tokens` speech tokens greedily (min
and max token-text ratios pinned), the flow turns them into 2 x tokens mel frames (10 Euler steps, guidance) and HiFT
into 24 kHz audio (480 samples a frame). Reported per thread count: each stage's time, the whole and its real-time
factor. Each engine runs once a round, the order alternating; the median of `--repeat` rounds.

    python -m benchmarks.cosyvoice --out benchmarks/results/cosyvoice.md"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from model_zoo.families.cosyvoice import RELEASE_FLOW_V2 as FLOW  # noqa: E402
from model_zoo.families.cosyvoice import RELEASE_HIFT_V2 as HIFT  # noqa: E402

from .machine import cpu_name  # noqa: E402
from .results_io import publish  # noqa: E402

QWEN = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
            max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)


def build(work: str, layers: int):
    """The release directory (written once) and the PyTorch references (llm, flow, hift)."""
    import torch
    from transformers import Qwen2Config
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tests.model_zoo.cosyvoice_release as release
    from model_zoo.reference.cosyvoice_flow import CausalMaskedDiffWithXvec
    from model_zoo.reference.cosyvoice_hift import HiFTGenerator
    from model_zoo.reference.cosyvoice_llm import Qwen2LM
    path = os.path.join(work, f"cosyvoice2_0_5b_{layers}l")
    qwen = Qwen2Config(**QWEN, num_hidden_layers=layers)
    torch.manual_seed(0)
    llm = Qwen2LM(896, 896, 6561, qwen).eval()
    flow = CausalMaskedDiffWithXvec(FLOW).eval()
    hift = HiFTGenerator.from_config(HIFT).eval()
    with torch.no_grad():   # every table away from its initial value
        for module in (llm, flow, hift):
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.02)
    if not os.path.isfile(os.path.join(path, "cosyvoice2.yaml")):
        os.makedirs(os.path.join(path, "CosyVoice-BlankEN"), exist_ok=True)
        qwen.save_pretrained(os.path.join(path, "CosyVoice-BlankEN"))
        release.tokenizer().save_pretrained(os.path.join(path, "CosyVoice-BlankEN"))
        for name, module in (("llm", llm), ("flow", flow), ("hift", hift)):
            torch.save(module.state_dict(), os.path.join(path, f"{name}.pt"))
        with open(os.path.join(path, "cosyvoice2.yaml"), "w") as f:
            f.write(release.yaml_text(2, FLOW, HIFT, 6561, 896))
    return llm, flow, hift, path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=24, help="LM layers (of 24)")
    ap.add_argument("--tokens", type=int, default=100, help="speech tokens to generate (40 ms each)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_cosyvoice_bench"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch

    from lite.cosyvoice import CosyVoice
    from model_zoo.families.cosyvoice import convert_cosyvoice
    from model_zoo.reference.cosyvoice_llm import greedy_sampling
    os.makedirs(args.work, exist_ok=True)
    llm, flow, hift, path = build(args.work, args.layers)
    out = path + "_lite"
    if not os.path.isfile(os.path.join(out, "config.json")):
        convert_cosyvoice(path, out)
    llm.sampling = greedy_sampling
    rng = np.random.default_rng(0)
    prompt_text, text = rng.integers(0, 300, 20).tolist(), rng.integers(0, 300, 12).tolist()
    prompt_tokens = rng.integers(0, 6561, 50)
    prompt_feat = rng.standard_normal((100, 80)).astype(np.float32) - 5
    embedding = rng.standard_normal(192).astype(np.float32)
    ratio = args.tokens / len(text)   # min = max: exactly `tokens` tokens
    seconds = args.tokens * 0.04
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        tts = CosyVoice(out, threads=threads)

        def lite_run(n):
            r = n / len(text)
            t0 = time.perf_counter()
            tokens = tts.generate_tokens(text, prompt_text, prompt_tokens, greedy=True, max_token_text_ratio=r,
                                         min_token_text_ratio=r)
            t1 = time.perf_counter()
            mel = tts.flow.mel(np.asarray(tokens), prompt_tokens, prompt_feat, embedding)
            t2 = time.perf_counter()
            tts.vocoder.waveform(mel, np.random.default_rng(0))
            return t1 - t0, t2 - t1, time.perf_counter() - t2, tokens

        def torch_run(n):
            r = n / len(text)
            with torch.no_grad():
                t0 = time.perf_counter()
                tokens = list(llm.inference(torch.tensor(text), torch.tensor(prompt_text),
                                            torch.from_numpy(prompt_tokens), max_token_text_ratio=r,
                                            min_token_text_ratio=r))
                t1 = time.perf_counter()
                mel = flow.inference(torch.tensor([tokens]), torch.tensor([len(tokens)]),
                                     torch.from_numpy(prompt_tokens[None]), torch.tensor([len(prompt_tokens)]),
                                     torch.from_numpy(prompt_feat[None]), torch.tensor([len(prompt_feat)]),
                                     torch.from_numpy(embedding[None]))
                t2 = time.perf_counter()
                hift.inference(mel)
            return t1 - t0, t2 - t1, time.perf_counter() - t2, tokens

        lite_run(4), torch_run(4)   # warm-up (plans, packed weights)
        same = lite_run(8)[3] == torch_run(8)[3]
        times = {f"{e}_{s}": [] for e in ("lite", "torch") for s in ("llm", "flow", "hift")}
        for r in range(args.repeat):
            for name in (("lite", "torch") if r % 2 == 0 else ("torch", "lite")):
                stages = (lite_run if name == "lite" else torch_run)(args.tokens)[:3]
                for stage, t in zip(("llm", "flow", "hift"), stages):
                    times[f"{name}_{stage}"].append(t)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append(dict(threads=threads, same=same, **med))
        print(rows[-1], flush=True)
    command = f"python -m benchmarks.cosyvoice --layers {args.layers} --tokens {args.tokens}"
    lines = [
        "# Speech synthesis: lite vs PyTorch eager (CosyVoice 2)",
        "",
        f"{cpu_name()}; {time.strftime('%Y-%m-%d')}. `{command}`. A CosyVoice2-0.5B-shaped release (the yaml's flow "
        f"and HiFT sizes, the Qwen2.5-0.5B backbone with {args.layers} of its 24 layers; seeded random weights, "
        f"float32), a fixed prompt (20 + 12 text tokens, 50 prompt speech tokens, 100 mel frames, an x-vector; the "
        f"audio front end not timed), {args.tokens} speech tokens ({seconds:g} s of 24 kHz audio) generated greedily "
        "by both, batch 1. `llm`: the text-speech LM; `flow`: encoder + 10 Euler steps of the estimator with "
        "guidance; `hift`: the vocoder; RTF = total / audio length. Median of "
        f"{args.repeat} rounds, engines alternating. PyTorch: model_zoo/reference/cosyvoice_*.py (the original's "
        "modules as written from its code; the LM on transformers' Qwen2ForCausalLM with its cache). `same`: 8 "
        "tokens equal.",
        "",
        "| threads | llm s lite | PyTorch | flow s lite | PyTorch | hift s lite | PyTorch | RTF lite | RTF PyTorch "
        "| lite / PyTorch | same |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lite_all = r["lite_llm"] + r["lite_flow"] + r["lite_hift"]
        torch_all = r["torch_llm"] + r["torch_flow"] + r["torch_hift"]
        lines.append(f"| {r['threads']} | {r['lite_llm']:.2f} | {r['torch_llm']:.2f} | {r['lite_flow']:.2f} | "
                     f"{r['torch_flow']:.2f} | {r['lite_hift']:.2f} | {r['torch_hift']:.2f} | "
                     f"{lite_all / seconds:.2f} | {torch_all / seconds:.2f} | {lite_all / torch_all:.2f} | "
                     f"{'yes' if r['same'] else 'no'} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
