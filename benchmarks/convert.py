"""Checkpoint conversion side by side: our checkpoint path (`converter_lite --fmk=HF`), ONNX Runtime GenAI's model
builder, llama.cpp's `convert_hf_to_gguf.py` (its Q4_0 made by `llama_model_quantize` from the float32 GGUF, as
llama.cpp has no 4-bit converter output) and `torch.onnx.export` followed by our ONNX path, on the same Hugging Face
directories: a Qwen2.5-0.5B-shaped and a Qwen3-1.7B-shaped model (their published config.json values, seeded random
weights, bfloat16 safetensors as the Hub holds them). Each conversion runs in its own process; reported: wall time
and that process's peak resident memory (`/usr/bin/time`'s maximum RSS, which counts mapped checkpoint pages too).

    python -m benchmarks.convert --work /tmp/convert_bench --out benchmarks/results/convert.md
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .llm_peers import (QWEN25_05B, PeerUnavailable, _llama_cpp_source, _offline_env, _CONVERT_WRAPPER,
                        _LLAMA_PRE_FALLBACK, make_test_checkpoint)
from .machine import cpu_name

QWEN3_17B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
MODELS = {"Qwen2.5-0.5B": ("qwen2", QWEN25_05B), "Qwen3-1.7B": ("qwen3", QWEN3_17B)}
PRECISIONS = ("float32", "bfloat16", "int8", "int4")
_OG = {"float32": "fp32", "bfloat16": "bf16", "int8": "int8", "int4": "int4"}
_LLAMA = {"float32": "f32", "bfloat16": "bf16", "int8": "q8_0"}


def make_checkpoint(work: Path, name: str) -> Path:
    """`name`'s config with seeded random weights as bfloat16 safetensors (shards of <= 2 GB, with an index) and a
    byte-level BPE tokenizer; reused when already written."""
    import torch
    import transformers
    from safetensors.torch import save_file

    model_type, shape = MODELS[name]
    out = work / name
    marker = out / "bench_checkpoint.json"
    stamp = {"model_type": model_type, "shape": shape, "dtype": "bfloat16"}
    if marker.exists() and json.loads(marker.read_text()) == json.loads(json.dumps(stamp)):
        return out
    if out.exists():
        shutil.rmtree(out)
    tok_dir = Path(make_tokenizer_only(work))
    out.mkdir(parents=True)
    cls = {"qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}[model_type]
    config = getattr(transformers, cls[0])(**shape, torch_dtype="bfloat16")
    with torch.device("meta"):
        meta = getattr(transformers, cls[1])(config)
    names = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
    if shape["tie_word_embeddings"]:
        names.pop("lm_head.weight", None)
    gen = torch.Generator().manual_seed(0)
    shards, current, size, weight_map = [], {}, 0, {}

    def flush():
        nonlocal current, size
        if current:
            shards.append(current)
            current, size = {}, 0
    for k, s in names.items():
        t = (torch.randn(s, generator=gen) * (1.0 if k.endswith("norm.weight") else 0.02)).to(torch.bfloat16)
        if size + t.numel() * 2 > (2 << 30):
            flush()
        current[k] = t
        size += t.numel() * 2
    flush()
    for i, tensors in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in tensors})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg = config.to_dict()
    cfg.update(shape, model_type=model_type, torch_dtype="bfloat16", architectures=[cls[1]])
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in tok_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, out / f.name)
    marker.write_text(json.dumps(stamp))
    return out


def make_tokenizer_only(work: Path) -> str:
    """The benchmark tokenizer of benchmarks.llm_peers (its checkpoint, 1 layer, is written once for it)."""
    return make_test_checkpoint(str(work / "tokenizer_source"), 1)


def drop_page_cache() -> bool:
    """Empties the page cache (root only), so every converter reads its checkpoint from disk and writes into free
    memory, whatever ran before it: without it the same conversion varied 9-17 s on this VM with the cache state
    the previous peer left. Returns whether it could."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, int]:
    """Runs cmd under /usr/bin/time: (seconds, peak RSS bytes); raises PeerUnavailable with its output's tail.
    The time runs until the output is on disk (a `sync` after the command; one before it too, so no converter pays
    for the previous one's dirty pages): our converter fsyncs its file, the peers do not, and on this VM the page
    cache takes writes at ~5 GB/s while the disk drains them at ~0.5 GB/s."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        subprocess.run(["sync"], check=False)
        drop_page_cache()
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name] + cmd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        subprocess.run(["sync"], check=False)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.strip().splitlines()[-6:])
            raise PeerUnavailable(f"exit {proc.returncode}: {tail}")
        return seconds, int(tf.read().strip().splitlines()[-1]) * 1024


def ours(ckpt: Path, out: Path, precision: str) -> list[str]:
    return [sys.executable, "-m", "converter.cli", "--fmk=HF", f"--modelFile={ckpt}", f"--outputFile={out}/model",
            f"--weightPrecision={precision}", "--verifyBuild=off"]


def ort_genai(ckpt: Path, out: Path, precision: str) -> list[str]:
    return [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out), "-p",
            _OG[precision], "-e", "cpu", "-c", str(out / "cache"), "--extra_options", "prune_lm_head=true"]


_TORCH_ONNX = r"""
import sys, torch, transformers
from converter.api import Converter, FmkType
src, out = sys.argv[1], sys.argv[2]
model = transformers.AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32).eval()
model.config.use_cache = False

class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits

ids = torch.ones(1, 8, dtype=torch.long)
seq = torch.export.Dim("seq", min=2, max=4096)
torch.onnx.export(Logits(model), (ids,), out + "/model.onnx", dynamo=True, dynamic_shapes={"input_ids": {1: seq}},
                  external_data=True)
del model
Converter().convert(FmkType.ONNX, out + "/model.onnx", out + "/model", verify_build=False)
"""


def run(args) -> str:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows, notes = [], []
    env = _offline_env()
    llama_src = None
    for name in args.models:
        ckpt = make_checkpoint(work, name)
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
        model_type = MODELS[name][0]
        for precision in args.precisions:
            cells = {"model": name, "precision": precision, "checkpoint MB": size / 1e6}
            jobs = {"lite (--fmk=HF)": lambda out: timed(ours(ckpt, out, precision), env),
                    "ORT GenAI builder": lambda out: timed(ort_genai(ckpt, out, precision), env)}

            def llama(out, precision=precision):
                nonlocal llama_src
                llama_src = llama_src or _llama_cpp_source(str(work))
                wrapper = out / "wrapper.py"
                wrapper.write_text(_CONVERT_WRAPPER)
                outtype = _LLAMA.get(precision, "f32")
                s, rss = timed([sys.executable, str(wrapper), str(llama_src),
                                _LLAMA_PRE_FALLBACK.get(model_type, "default"), str(ckpt), "--outtype", outtype,
                                "--outfile", str(out / "model.gguf")], env)
                if precision == "int4":   # then Q4_0 from the float32 GGUF (llama.cpp's quantize tool)
                    q = [sys.executable, "-c", "import sys, llama_cpp; p = llama_cpp.llama_model_quantize_default_params()"
                         "; p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0; p.nthread = 2; sys.exit(llama_cpp."
                         "llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))",
                         str(out / "model.gguf"), str(out / "model-q4_0.gguf")]
                    s2, rss2 = timed(q, env)
                    s, rss = s + s2, max(rss, rss2)
                return s, rss
            jobs["llama.cpp convert_hf_to_gguf"] = llama
            if precision == "float32" and not args.skip_torch_onnx:
                jobs["torch.onnx.export + lite ONNX"] = lambda out: timed(
                    [sys.executable, "-c", _TORCH_ONNX, str(ckpt), str(out)], env)
            for engine, job in jobs.items():
                out = work / "out" / f"{name}_{precision}_{engine.split()[0]}"
                if out.exists():
                    shutil.rmtree(out)
                out.mkdir(parents=True)
                try:
                    seconds, rss = job(out)
                    cells[engine] = (seconds, rss)
                    print(f"{name} {precision} {engine}: {seconds:.1f} s, {rss / 1e6:.0f} MB", flush=True)
                except PeerUnavailable as e:
                    cells[engine] = None
                    notes.append(f"{name} {precision} {engine}: failed: {str(e).splitlines()[-1][:300]}")
                    print(notes[-1], flush=True)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
            rows.append(cells)
    return render(rows, notes)


ENGINES = ("lite (--fmk=HF)", "ORT GenAI builder", "llama.cpp convert_hf_to_gguf", "torch.onnx.export + lite ONNX")


def render(rows: list[dict], notes: list[str]) -> str:
    lines = ["# Checkpoint conversion: time and peak memory", "",
             f"{cpu_name()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}. `python -m benchmarks.convert`. "
             "Bfloat16 safetensors checkpoints of the models' published configs with seeded random weights; each "
             "conversion in its own process, from a cold page cache (dropped before each, where permitted: "
             f"{'yes' if os.access('/proc/sys/vm/drop_caches', os.W_OK) else 'no'}), wall time until its output is on disk (`sync` before and after) "
             "and peak RSS "
             "(`/usr/bin/time`; mapped checkpoint pages count). "
             "ORT GenAI's builder and torch.onnx.export load the model through transformers first; llama.cpp's int4 "
             "is its float32 GGUF quantised to Q4_0 (time and peak of both steps).", "",
             "| model | precision | checkpoint MB | " + " | ".join(f"{e} s / MB" for e in ENGINES) +
             " | lite / fastest peer (time) | lite peak / checkpoint |",
             "|---|---|---:|" + "---:|" * len(ENGINES) + "---:|---:|"]
    for r in rows:
        cells = []
        for e in ENGINES:
            v = r.get(e, "n/a")
            cells.append("n/a" if v == "n/a" else "failed" if v is None else f"{v[0]:.1f} / {v[1] / 1e6:.0f}")
        lite = r.get(ENGINES[0])
        peers = [r[e][0] for e in ENGINES[1:] if r.get(e)]
        ratio = f"{lite[0] / min(peers):.2f}" if lite and peers else "n/a"
        frac = f"{lite[1] / 1e6 / r['checkpoint MB']:.2f}" if lite else "n/a"
        lines.append(f"| {r['model']} | {r['precision']} | {r['checkpoint MB']:.0f} | " + " | ".join(cells) +
                     f" | {ratio} | {frac} |")
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_convert_bench"))
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    ap.add_argument("--skip-torch-onnx", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    text = run(args)
    print(text)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
