"""Text generation on a Qwen2.5-0.5B-shaped decoder (its config.json values, seeded random weights written as a
Hugging Face directory), lite's engine beside llama.cpp, ONNX Runtime GenAI, OpenVINO GenAI (benchmarks.llm_peers:
each converts the same directory with its own tools and quantises with its own schemes) and PyTorch eager
(transformers' generate with its KV cache, float32) in one run: prompt processing of a 512-token prompt and decoding
of 128 greedy tokens at batch 1, in tokens/s, per weight precision and thread count; lite's throughput with 8
concurrent requests; and the memory-bandwidth bound of decoding: STREAM-triad bandwidth / the bytes of weights one
decode step reads at that precision.

    python -m benchmarks.llm --threads 1 2 --out benchmarks/results/llm.md
    python -m benchmarks.llm --layers 4 --precisions int8 --engines llama_cpp   # a quick look"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

# NumPy's OpenBLAS starts a thread per core that spins after any BLAS call: on a two-core machine one of them can
# take a core from the engine being measured. Nothing measured here needs NumPy's BLAS (set before NumPy loads it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from .llm_peers import (PEERS, PRECISIONS, QWEN25_05B, PeerUnavailable, make_test_checkpoint,  # noqa: E402
                        prompt_variants)
from .machine import cpu_name  # noqa: E402
from .results_io import publish  # noqa: E402

GROUP = 32   # int4 block of rows (llama.cpp Q4_0's and the ONNX Runtime GenAI builder's default block)


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


def step_bytes(config: dict, precision: str) -> float:
    """Bytes of weights one decode step reads at `precision`: every matrix (the layers' and the LM head, the tied
    embedding's transposed copy) as stored (codes plus float32 scales: one per column for int8, per block of 32 rows
    of a column for int4); norms and biases in float32. The embedding's row gather is negligible."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)] * layers + \
             [(h, config["vocab_size"])]

    def size(k: int, n: int) -> float:
        if precision == "float32":
            return 4 * k * n
        if precision == "bfloat16":
            return 2 * k * n
        if precision == "int8":
            return k * n + 4 * n
        return k * n / 2 + 4 * n * -(-k // GROUP)
    small = 4 * (layers * (2 * h + h + 2 * kv) + h)   # norms, q/k/v biases, the final norm
    return sum(size(k, n) for k, n in shapes) + small


# lite's settings per weight precision: TextEngine's defaults (int8/int4 products on activations quantised to int8
# per block, attention's products on bf16 where the CPU has bf16 dot products; bf16 products on activations rounded
# to bf16), the schemes the peers run by default too.
LITE_OPTIONS = {"float32": {}, "bfloat16": {"precision_mode": "preferred_bf16"},
                "int8": {"dynamic_quant": True, "precision_mode": "preferred_bf16"},
                "int4": {"dynamic_quant": True, "precision_mode": "preferred_bf16"}}


def _peer_child(engine: str, args: tuple, out) -> None:
    try:
        out.put(("ok", PEERS[engine](*args)))
    except PeerUnavailable as e:
        out.put(("unavailable", str(e)))
    except Exception as e:   # noqa: BLE001 - reported by the parent with its type
        out.put(("error", f"{type(e).__name__}: {e}"))


def run_peer_isolated(engine: str, *args) -> dict:
    """PEERS[engine](*args) in a child process: a peer that dies on a signal (llama.cpp's AMX kernels on some VMs,
    OpenVINO's one-thread bf16 plugin here) is reported as not run, with the signal, instead of ending the benchmark."""
    import multiprocessing as mp
    import queue
    import signal

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_peer_child, args=(engine, args, out))
    child.start()
    result = None
    while result is None:
        try:
            result = out.get(timeout=5)
        except queue.Empty:
            if not child.is_alive():
                break
    child.join()
    if result is None:
        code = child.exitcode or 0
        why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        raise PeerUnavailable(f"crashed ({why})")
    kind, value = result
    if kind == "unavailable":
        raise PeerUnavailable(value)
    if kind == "error":
        raise RuntimeError(f"{engine}: {value}")
    return value


def run_lite(path: str, config: dict, threads: int, prompt: list[int], warm: list[int], new: int,
             concurrent: list[list[int]], options: dict, repeats: int = 1) -> dict:
    from lite.llm import SamplingParams
    from lite.llm.engine import LLMEngine

    engine = LLMEngine(path, config, num_blocks=(len(prompt) + new) // 16 * 2 + 64, block_size=16, threads=threads,
                       max_num_batched_tokens=len(prompt), **options)
    # warm-up: the plans of a whole-prompt step and of decode steps up to the same block-table bucket
    engine.generate([warm], SamplingParams(max_new_tokens=new, temperature=0))
    prefills, decodes, ids = [], [], None
    for i, variant in enumerate(prompt_variants(prompt, repeats)):   # rotations: no cached prefix
        request = engine.add_request(f"bench{i}", variant, SamplingParams(max_new_tokens=new, temperature=0))
        t0 = time.perf_counter()
        engine.step()   # the whole prompt in one step
        prefills.append(len(prompt) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        while engine.scheduler.has_work():
            engine.step()
        decodes.append((new - 1) / (time.perf_counter() - t0))
        ids = ids or list(request.output_ids)
    # Throughput: the concurrent requests (64-token prompts, `new` tokens each) in one continuous batch
    tputs = []
    for batch in zip(*(prompt_variants(p, repeats) for p in concurrent)):
        t0 = time.perf_counter()
        outs = engine.generate(batch, SamplingParams(max_new_tokens=new, temperature=0))
        tputs.append(sum(len(o) for o in outs) / (time.perf_counter() - t0))
    return {"prefill": float(np.median(prefills)), "decode": float(np.median(decodes)), "ids": ids,
            "tput": float(np.median(tputs))}


def run_pytorch(hf_dir: str, threads: int, prompt: list[int], new: int, repeats: int = 1) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    prefills, decodes, ids = [], [], None
    with torch.no_grad():   # prefill = one forward of the prompt; decode = generate's loop
        model(torch.tensor([prompt[:32]]))   # warm-up
        for variant in prompt_variants(prompt, repeats):
            x = torch.tensor([variant])
            t0 = time.perf_counter()
            model(x)
            prefill_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = model.generate(x, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                                 eos_token_id=None)
            total = time.perf_counter() - t0
            prefills.append(len(prompt) / prefill_s)
            decodes.append((new - 1) / max(total - prefill_s, 1e-9))
            ids = ids or out[0, len(prompt):].tolist()
    return {"prefill": float(np.median(prefills)), "decode": float(np.median(decodes)), "ids": ids}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--layers", type=int, default=QWEN25_05B["num_hidden_layers"],
                    help="fewer layers than the real 24 (a quick run)")
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    ap.add_argument("--engines", nargs="*", default=list(PEERS), choices=list(PEERS))
    ap.add_argument("--concurrent", type=int, default=8, help="requests of the throughput run (64-token prompts)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds per setting: each engine measured once a round, in turn (the prompt and rotations "
                         "of it); the median over rounds is reported")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_llm_bench"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    from converter.frontends.checkpoint import open_checkpoint
    from model_zoo.language.decoder_graph import write_decoder

    hf_dir = make_test_checkpoint(os.path.join(args.work, f"qwen2_{args.layers}l"), args.layers)
    weights, config = open_checkpoint(hf_dir)   # read lazily, tensor by tensor, as each conversion writes
    rng = np.random.default_rng(0)
    vocab = config["vocab_size"]
    prompt = rng.integers(0, vocab, args.prompt).tolist()
    warm = rng.integers(0, vocab, args.prompt).tolist()   # no prefix in common: no cached blocks
    concurrent = [rng.integers(0, vocab, 64).tolist() for _ in range(args.concurrent)]
    triads: list[float] = []   # one per round, measured just before it
    rows, notes = [], []
    for precision in args.precisions:
        t0 = time.perf_counter()
        path = write_decoder(config, weights, os.path.join(args.work, f"decoder_{args.layers}l_{precision}.ms"),
                             block_size=16, weight_format=precision, group_size=GROUP)
        notes.append(f"lite {precision}: conversion {time.perf_counter() - t0:.1f} s, "
                     f"{os.path.getsize(path) / 1e6:.0f} MB")
        # The file's dirty pages written back before anything is timed: straight after writing the 2 GB float32 file,
        # lite's first two-thread prompt read 51 tok/s on a 2-vCPU VM, 85 alone minutes later (the writeback likely
        # ran on the second vCPU meanwhile).
        os.sync()
        for threads in args.threads:
            row = {"precision": precision, "threads": threads}
            row_triads = []
            # Rounds: each engine runs once a round, in turn, on the round's prompt (a rotation), and the median over
            # rounds is reported. This VM's speed drifts over minutes; engines measured one after another, each
            # through all its runs, caught different phases of it (ratios moved 10-20% between whole runs).
            runs: dict[str, list[dict]] = {}
            unavailable: set[str] = set()
            for r, variant in enumerate(prompt_variants(prompt, args.repeats)):
                # the bound's bandwidth beside the round it bounds: the host's load moves it 20-30% within a run
                row_triads.append(triad_gbps())
                batch = [prompt_variants(p, args.repeats)[r] for p in concurrent]
                # The order turns by one engine a round: whoever ran right after another's long two-thread runs
                # met the host slowed by them (lite's one-thread decode 93 -> 60 tok/s measured straight after a
                # minute of its own two-thread prompts), and a fixed order gave that seat to one engine every round.
                order = ["lite"] + (["pytorch"] if precision == "float32" else []) + list(args.engines)
                for engine in order[r % len(order):] + order[:r % len(order)]:
                    if engine in unavailable:
                        continue
                    if engine == "lite":
                        runs.setdefault("lite", []).append(run_lite(path, config, threads, variant, warm, args.new,
                                                                    batch, LITE_OPTIONS[precision]))
                        continue
                    if engine == "pytorch":
                        runs.setdefault("pytorch", []).append(run_pytorch(hf_dir, threads, variant, args.new))
                        continue
                    try:
                        res = run_peer_isolated(engine, hf_dir, os.path.join(args.work, "peers"), precision, threads,
                                                variant, args.new, 1)
                        runs.setdefault(engine, []).append({"prefill": res["prefill_tok_s"],
                                                            "decode": res["decode_tok_s"], "ids": res["output_ids"]})
                        if threads == args.threads[0] and r == 0:
                            notes.append(f"{engine} {precision}: {res['version']}; {res['notes']}; conversion "
                                         f"{res['convert_s']:.1f} s")
                    except PeerUnavailable as e:
                        unavailable.add(engine)
                        row[engine] = None
                        if threads == args.threads[0]:
                            notes.append(f"{engine} {precision}: not run: {e}")
            triads += row_triads
            row["bound"] = float(np.median(row_triads)) * 1e9 / step_bytes(config, precision)
            for name, measured in runs.items():
                row[name] = {key: float(np.median([m[key] for m in measured])) for key in measured[0] if key != "ids"}
                row[name]["ids"] = measured[0]["ids"]   # round 0: the prompt itself
            rows.append(row)
            print({k: (v if not isinstance(v, dict) else {x: y for x, y in v.items() if x != "ids"})
                   for k, v in row.items()}, flush=True)
    import lite
    tall_int8 = ("as float32 GEMMs on the decoded weights: its integer multiplies are no faster than its FMAs"
                 if lite._lite.dq_tall_int8_path() == "float" else "in integer arithmetic too")
    if lite._lite.dq_tall_int4_path() == "bf16":
        tall_int8 += (", int4 products of 32 rows or more as AMX-BF16 tile products on the codes decoded per task, "
                      "activations rounded to bf16")
    bf16_cpu = "avx512_bf16" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
    attention = ("; int8 / int4 with precision_mode preferred_bf16 too (TextEngine's default): attention's products "
                 "on bf16" if bf16_cpu else "")
    names = {"llama_cpp": "llama.cpp", "onnxruntime_genai": "ORT GenAI", "openvino_genai": "OpenVINO GenAI",
             "pytorch": "PyTorch"}
    peers = [e for e in args.engines] + ["pytorch"]
    lines = [
        "# LLM generation: lite's engine beside llama.cpp, ONNX Runtime GenAI, OpenVINO GenAI and PyTorch",
        "",
        f"Qwen2.5-0.5B-shaped decoder ({config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
        f"{config['num_attention_heads']} heads / {config['num_key_value_heads']} KV heads, vocab {vocab}; seeded "
        f"random weights as a Hugging Face directory, the same one every engine converts), batch 1, a {args.prompt}-"
        f"token prompt then {args.new} greedy tokens; every figure the median of {args.repeats} rounds, each engine run once a round in turn, the order turned by one engine each round (the prompt and rotations of it, nothing cached between them). {cpu_name()}, {platform.machine()}; {time.strftime('%Y-%m-%d')}. "
        "`python -m benchmarks.llm`. Each engine quantises with its own scheme: lite int8 = a scale per output column, "
        f"int4 = blocks of {GROUP} rows with float32 scales, activations quantised to int8 on the fly (a scale per "
        f"block of {GROUP} values for int4, of 128 for int8; Context dynamic_quant; on this CPU int8 products of more "
        f"than 8 rows (prompts) {tall_int8}{attention}), bf16 with activations rounded to bf16 (precision_mode preferred_bf16) "
        "where the CPU has bf16 dot products, else bf16 weights widened to float32; llama.cpp Q8_0 / Q4_0 (blocks of 32, activations quantised to 8 bits); "
        "ORT GenAI's and OpenVINO's builders their defaults. "
        f"Bound: one core's STREAM-triad bandwidth (NumPy, measured before each round, the median of a row's rounds; "
        f"{min(triads):.1f}-{max(triads):.1f} GB/s over the run) / the bytes of weights a decode step "
        "reads at that precision (two threads can draw more than one core's bandwidth). `same`: lite's 128 tokens "
        "equal PyTorch's (float32).",
        "",
        "| precision | threads | prefill tok/s lite | " + " | ".join(names[e] for e in peers) +
        " | lite / best peer | decode tok/s lite | " + " | ".join(names[e] for e in peers) +
        f" | lite / best peer | bound tok/s | lite % of bound | {args.concurrent} requests tok/s lite | "
        "lite / its batch-1 decode |",
        "|---|---:|---:|" + "---:|" * len(peers) + "---:|---:|" + "---:|" * len(peers) + "---:|---:|---:|---:|---:|",
    ]

    def cell(v):
        return "n/a" if v is None else f"{v:.1f}"
    for row in rows:
        lite = row["lite"]
        pre = [row.get(e)["prefill"] if row.get(e) else None for e in peers]
        dec = [row.get(e)["decode"] if row.get(e) else None for e in peers]
        best_pre = max([p for p in pre if p] or [float("nan")])
        best_dec = max([d for d in dec if d] or [float("nan")])
        lines.append(f"| {row['precision']} | {row['threads']} | {lite['prefill']:.1f} | " +
                     " | ".join(cell(p) for p in pre) + f" | {lite['prefill'] / best_pre:.2f} | {lite['decode']:.2f} | " +
                     " | ".join(cell(d) for d in dec) + f" | {lite['decode'] / best_dec:.2f} | {row['bound']:.1f} | "
                     f"{100 * lite['decode'] / row['bound']:.0f}% | {lite['tput']:.1f} | "
                     f"{lite['tput'] / lite['decode']:.1f}x |")
    same = [f"{r['threads']} thread(s): {'yes' if r['lite']['ids'] == r['pytorch']['ids'] else 'no'}"
            for r in rows if "pytorch" in r]
    lines += ["", "lite float32 tokens equal PyTorch's: " + ", ".join(same) + ".", "", "Notes:", ""]
    lines += [f"- {n}" for n in notes]
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
