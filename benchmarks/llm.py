"""Text generation on a Qwen2.5-0.5B-shaped decoder (its config.json values, seeded random weights), lite's engine
beside PyTorch eager (transformers' generate with its KV cache) in one run, float32: prompt processing of a
512-token prompt and decoding of 128 tokens at batch 1, in tokens/s, at each thread count; and the memory-bandwidth
bound of decoding (a STREAM-triad measurement over the bytes of weights one decode step reads).

    python -m benchmarks.llm --threads 1 2 --out benchmarks/results/llm.md

Peers still to add to the run: llama.cpp (llama-cpp-python from source), onnxruntime-genai and openvino-genai."""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np

from .machine import cpu_name
from .results_io import write_table

QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=True)


def triad_gbps(mb: int = 256, repeats: int = 5) -> float:
    """STREAM triad a = b + s * c over three float64 arrays of `mb` MB each, in NumPy (its ufuncs run on one thread:
    this is one core's bandwidth, the bound of a one-thread decode; two threads may draw more)."""
    n = mb * 1024 * 1024 // 8
    b, c = np.random.rand(n), np.random.rand(n)
    a = np.empty_like(b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)
        best = min(best, time.perf_counter() - t0)
    return 4 * n * 8 / best / 1e9   # NumPy's two passes move 4 arrays' worth (c, a, a, b -> a)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the real 24 (a quick run)")
    ap.add_argument("--concurrent", type=int, default=8, help="requests of the throughput run (64-token prompts)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from lite.llm import SamplingParams
    from lite.llm.engine import LLMEngine
    from model_zoo.decoder_graph import write_decoder

    config = dict(QWEN25_05B, **({"num_hidden_layers": args.layers} if args.layers else {}))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**config)).eval()
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    unique = {v.__array_interface__["data"][0]: v for v in weights.values()}   # a tied LM head is the embedding
    params = sum(v.size for v in unique.values())
    # bytes one decode step reads: every weight once (the tied embedding as the LM head; its row gather is small)
    step_bytes = params * 4
    workdir = tempfile.mkdtemp(prefix="lite_llm_bench_")
    t0 = time.perf_counter()
    path = write_decoder(model.config.to_dict(), weights, os.path.join(workdir, "decoder"), block_size=16)
    convert_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, config["vocab_size"], args.prompt).tolist()
    warm = rng.integers(0, config["vocab_size"], args.prompt).tolist()   # no prefix in common: no cached blocks
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        with torch.no_grad():   # PyTorch eager: prefill = one forward of the prompt; decode = generate's loop
            ids = torch.tensor([prompt])
            model(ids[:, :32])   # warm-up
            t0 = time.perf_counter()
            model(ids)
            pt_prefill = args.prompt / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                                 pad_token_id=0, eos_token_id=None)
            total = time.perf_counter() - t0
            pt_decode = (args.new - 1) / max(total - args.prompt / pt_prefill, 1e-9)
        pt_tokens = out[0, args.prompt:].tolist()
        engine = LLMEngine(path, config, num_blocks=64, block_size=16, threads=threads,
                           max_num_batched_tokens=args.prompt)
        # warm-up: the plans of a whole-prompt step and of decode steps up to the same block-table bucket
        engine.generate([warm], SamplingParams(max_new_tokens=args.new, temperature=0))
        engine.add_request("bench", prompt, SamplingParams(max_new_tokens=args.new, temperature=0))
        t0 = time.perf_counter()
        engine.step()   # the whole prompt in one step
        lite_prefill = args.prompt / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        while engine.scheduler.has_work():
            engine.step()
        lite_decode = (args.new - 1) / (time.perf_counter() - t0)
        same = engine.scheduler.requests["bench"].output_ids == pt_tokens
        bound = triad_gbps() * 1e9 / step_bytes
        # Throughput: `concurrent` requests (64-token prompts, `new` tokens each) together; PyTorch generates the same
        # prompts as one batch (equal lengths: no padding).
        batch = [rng.integers(0, config["vocab_size"], 64).tolist() for _ in range(args.concurrent)]
        t0 = time.perf_counter()
        outs = engine.generate(batch, SamplingParams(max_new_tokens=args.new, temperature=0))
        lite_tput = sum(len(o) for o in outs) / (time.perf_counter() - t0)
        with torch.no_grad():
            t0 = time.perf_counter()
            model.generate(torch.tensor(batch), max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                           pad_token_id=0, eos_token_id=None)
            pt_tput = args.concurrent * args.new / (time.perf_counter() - t0)
        rows.append((threads, lite_prefill, pt_prefill, lite_decode, pt_decode, bound, same, lite_tput, pt_tput))
        print(rows[-1], flush=True)
    lines = [
        "# LLM generation: lite's engine and PyTorch eager",
        "",
        f"Qwen2.5-0.5B-shaped decoder ({config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
        f"{config['num_attention_heads']} heads / {config['num_key_value_heads']} KV heads, vocab "
        f"{config['vocab_size']}; {params / 1e6:.0f} M parameters, seeded random weights), float32, batch 1, a "
        f"{args.prompt}-token prompt then {args.new} greedy tokens. {cpu_name()}, {platform.machine()}; "
        f"{time.strftime('%Y-%m-%d')}. `python -m benchmarks.llm`. Conversion of the checkpoint to the step graph: "
        f"{convert_s:.1f} s. Bound: one core's STREAM-triad bandwidth (NumPy) / the {step_bytes / 1e9:.2f} GB of "
        "weights a decode step reads (two threads can draw more than one core's bandwidth).",
        "",
        "| threads | prefill tok/s lite | prefill tok/s PyTorch | lite / PyTorch | decode tok/s lite | decode tok/s "
        "PyTorch | lite / PyTorch | decode bound tok/s | lite % of bound | same tokens | "
        f"{args.concurrent} requests tok/s lite | PyTorch (one batch) | lite / its batch-1 decode |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|",
    ]
    for t, lp, pp, ld, pd, bound, same, lt, pt in rows:
        lines.append(f"| {t} | {lp:.1f} | {pp:.1f} | {lp / pp:.2f} | {ld:.2f} | {pd:.2f} | {ld / pd:.2f} | "
                     f"{bound:.2f} | {100 * ld / bound:.0f}% | {'yes' if same else 'no'} | {lt:.1f} | {pt:.1f} | "
                     f"{lt / ld:.1f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_table(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
