"""Peer LLM engines on the same Hugging Face checkpoint directory, for a side-by-side table with lite's engine:
llama.cpp (llama-cpp-python, GGUF from the converter in its sdist), ONNX Runtime GenAI (its model builder) and
OpenVINO GenAI (IR exported by optimum-intel).

Each `run_<engine>(hf_dir, work_dir, precision, threads, prompt_ids, new_tokens, repeats)` converts the checkpoint once
per precision (cached under `work_dir/<engine>/<checkpoint>-<hash>/<precision>`), runs one warm-up generation, then
feeds `prompt_ids` (and `repeats - 1` rotations of it) as token ids (no tokenizer round trip) and decodes `new_tokens`
greedy tokens at batch 1, taking the median time of the runs. It returns

    {"engine", "precision", "threads", "prefill_tok_s", "decode_tok_s", "output_ids", "convert_s", "version",
     "cached", "notes"}

with the same definitions as `benchmarks.llm`: prefill = len(prompt) / time of the step that processes the prompt
and yields the first token; decode = (new_tokens - 1) / time of the remaining steps (one forward each). `convert_s`
is the time of the conversion that produced the cached model (`cached` says whether this call reused it). An engine
or precision that cannot run raises `PeerUnavailable` with the concrete reason.

Precisions: "float32", "bfloat16", "int8", "int4" (what each means per engine is in its function's docstring).

The hubs are unreachable here, so `make_test_checkpoint` builds a Qwen2.5-0.5B-shaped checkpoint with seeded random
weights and a small byte-level BPE tokenizer trained offline (the converters need tokenizer files):

    python -m benchmarks.llm_peers --layers 2 --threads 1 --prompt 64 --new 16 --precisions float32 int4

prints each engine's row and whether its greedy ids equal transformers' `generate(do_sample=False)`.

optimum-intel (OpenVINO's exporter) pins transformers<5.6 and does not import beside a newer one; the export then
runs from a side virtualenv: `make_optimum_venv(<work_dir>/optimum-intel-venv)` (or `--make-optimum-venv` here, or
$LLM_PEERS_OPTIMUM_CLI). Without it, run_openvino_genai raises PeerUnavailable saying so."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PRECISIONS = ("float32", "bfloat16", "int8", "int4")

QWEN25_05B: dict[str, Any] = dict(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True)

# Qwen2's pre-tokenizer split (its tokenizer.json), so the test tokenizer behaves like a Qwen2 one
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENIZER_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a small tokenizer trained offline for a benchmark checkpoint.",
    "Large language models generate text one token at a time; the prompt is processed first.",
    "Numbers like 12, 345 and 6789 are split into digits. Punctuation: !?;:()[]{}<>.",
]


class PeerUnavailable(RuntimeError):
    """A peer engine (or the requested precision of it) cannot run here; the message says why."""


# ----------------------------------------------------------------------------------------------------------------
# test checkpoint and reference


def make_test_checkpoint(dir: str, num_layers: int, seed: int = 0) -> str:
    """Write a Qwen2.5-0.5B-shaped Qwen2ForCausalLM with `num_layers` layers and `torch.manual_seed(seed)` random
    weights (float32 safetensors) plus a byte-level BPE tokenizer into `dir`; returns `dir`. Reuses an existing
    checkpoint written with the same arguments.

    The tokenizer is trained with `tokenizers` on a few sentences (no hub), uses Qwen2's pre-tokenizer split and
    special tokens and declares `tokenizer_class: Qwen2Tokenizer`; its vocabulary (a few hundred ids) is smaller
    than the model's 151936 rows, which the converters accept (llama.cpp pads the GGUF vocabulary with [PAD] tokens).
    Benchmark prompts are token ids below 151936 fed directly, so the tokenizer only has to satisfy the converters."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(dir)
    stamp = {"num_layers": num_layers, "seed": seed, "shape": QWEN25_05B}
    marker = out / "test_checkpoint.json"
    if marker.exists() and json.loads(marker.read_text()) == json.loads(json.dumps(stamp)):
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TOKENIZER_TEXT * 4, trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    eos = tok.token_to_id("<|endoftext|>")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text())
    tok_cfg["tokenizer_class"] = "Qwen2Tokenizer"   # what a real Qwen2 checkpoint declares
    cfg_path.write_text(json.dumps(tok_cfg, indent=2))
    torch.manual_seed(seed)
    config = Qwen2Config(**dict(QWEN25_05B, num_hidden_layers=num_layers), bos_token_id=eos, eos_token_id=eos,
                         pad_token_id=eos)
    model = Qwen2ForCausalLM(config).eval()
    model.save_pretrained(str(out), safe_serialization=True)
    # transformers 5 writes rope_parameters only; checkpoints on the hub (written by 4.x) carry the top-level
    # rope_theta / torch_dtype that converters written for them read (a missing rope_theta would default to 1e4)
    cfg = json.loads((out / "config.json").read_text())
    cfg.setdefault("rope_theta", QWEN25_05B["rope_theta"])
    cfg.setdefault("torch_dtype", "float32")
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    marker.write_text(json.dumps(stamp))
    return str(out)


def transformers_greedy(hf_dir: str, prompt_ids: list[int], new_tokens: int) -> list[int]:
    """Greedy ids of transformers' `generate(do_sample=False)` in float32 (EOS ignored): the reference output."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


# ----------------------------------------------------------------------------------------------------------------
# shared helpers


def _check(precision: str, supported: dict[str, Any], engine: str) -> Any:
    """The engine's setting for `precision` (ValueError for a name outside PRECISIONS)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
    if precision not in supported:
        raise PeerUnavailable(f"{engine} has no {precision} format on the CPU")
    return supported[precision]


def _checkpoint_signature(hf_dir: str) -> str:
    """Names, sizes and mtimes of the checkpoint's files: a cached conversion is reused only for the same files."""
    h = hashlib.sha256(os.path.abspath(hf_dir).encode())
    for p in sorted(Path(hf_dir).iterdir()):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _model_dir(work_dir: str, engine: str, hf_dir: str, key: str) -> Path:
    """work_dir/<engine>/<checkpoint name>-<hash of its path>/<key>: one cache per checkpoint and precision, so
    benchmarking two checkpoints with one work_dir does not make them evict each other's conversions."""
    tag = hashlib.sha256(os.path.abspath(hf_dir).encode()).hexdigest()[:8]
    return Path(work_dir) / engine / f"{Path(hf_dir).name}-{tag}" / key


def _cached(out_dir: Path, hf_dir: str) -> float | None:
    """convert_s of a finished conversion of this checkpoint in out_dir, or None."""
    marker = out_dir / "peer_convert.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("signature") == _checkpoint_signature(hf_dir):
            return float(info["convert_s"])
    return None


def _mark(out_dir: Path, hf_dir: str, convert_s: float) -> None:
    (out_dir / "peer_convert.json").write_text(json.dumps(
        {"signature": _checkpoint_signature(hf_dir), "convert_s": convert_s, "hf_dir": os.path.abspath(hf_dir)}))


def _run(cmd: list[str], what: str, cwd: str | None = None, env: dict[str, str] | None = None) -> None:
    """Run a converter; on failure raise PeerUnavailable with the tail of its output (the concrete error)."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise PeerUnavailable(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _timed_conversion(out_dir: Path, hf_dir: str, cmd: list[str], what: str) -> tuple[Path, float, bool]:
    """Runs a converter command offline, records its time in out_dir's marker: (out_dir, seconds, cached=False)."""
    t0 = time.perf_counter()
    _run(cmd, what, env=_offline_env())
    convert_s = time.perf_counter() - t0
    _mark(out_dir, hf_dir, convert_s)
    return out_dir, convert_s, False


def _offline_env() -> dict[str, str]:
    # the hubs are unreachable: never let a converter try them (it would hang on retries)
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")


def _result(engine: str, precision: str, threads: int, prompt_len: int, new_tokens: int, t_prefill: float,
            t_decode: float, output_ids: list[int], convert_s: float, version: str, cached: bool,
            notes: str) -> dict[str, Any]:
    return {"engine": engine, "precision": precision, "threads": threads,
            "prefill_tok_s": prompt_len / t_prefill,
            "decode_tok_s": (new_tokens - 1) / t_decode if new_tokens > 1 else float("nan"),
            "output_ids": [int(t) for t in output_ids], "convert_s": convert_s, "version": version,
            "cached": cached, "notes": notes}


def _warm_prompt(prompt_ids: list[int]) -> list[int]:
    # a warm-up prompt of the same length with no prefix in common (no engine can reuse cached KV)
    return [(t + 7919) % QWEN25_05B["vocab_size"] for t in prompt_ids]


def prompt_variants(prompt_ids: list[int], repeats: int) -> list[list[int]]:
    """The prompt, then rotations of it (the same tokens, no prefix in common: nothing an engine cached is reused),
    one per measured run."""
    return [prompt_ids[7 * i:] + prompt_ids[:7 * i] for i in range(repeats)]


def _measured(greedy: Callable[[list[int]], tuple[float, float, list[int]]], prompt_ids: list[int],
              repeats: int) -> tuple[float, float, list[int]]:
    """Median prefill and decode times of `repeats` greedy runs (prompt_variants), and the first run's tokens: this
    machine's figures move between runs, a median of a few is what a table can stand on."""
    runs = [greedy(p) for p in prompt_variants(prompt_ids, repeats)]
    return (float(np.median([r[0] for r in runs])), float(np.median([r[1] for r in runs])), runs[0][2])


# ----------------------------------------------------------------------------------------------------------------
# llama.cpp (llama-cpp-python)

# llama.cpp type per precision: the converter's --outtype, except q4_0 (llama_model_quantize on the f32 GGUF)
_LLAMA_TYPES: dict[str, Any] = {"float32": "f32", "bfloat16": "bf16", "int8": "q8_0", "int4": "q4_0"}

# Runs convert_hf_to_gguf.py's main() in a child process. The converter identifies a BPE pre-tokenizer by hashing
# the ids its tokenizer gives for a fixed text and refuses unknown hashes; a tokenizer trained offline (the test
# checkpoint) never matches, so for it we fall back to the architecture's own pre-tokenizer name. The ids we feed
# never go through llama.cpp's tokenizer, so this only labels the GGUF's tokenizer metadata.
_CONVERT_WRAPPER = r"""
import logging, sys
llama_dir, fallback_pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, llama_dir)
sys.path.insert(1, llama_dir + "/gguf-py")
import conversion.base as base
for cls in vars(base).values():
    if isinstance(cls, type) and "get_vocab_base_pre" in vars(cls):
        orig = cls.get_vocab_base_pre
        def patched(self, tokenizer, _orig=orig):
            try:
                return _orig(self, tokenizer)
            except NotImplementedError:
                logging.getLogger("llm_peers").warning("unknown BPE pre-tokenizer: labelled %r", fallback_pre)
                return fallback_pre
        cls.get_vocab_base_pre = patched
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
import convert_hf_to_gguf
convert_hf_to_gguf.main()
"""

# the pre-tokenizer label used when the checkpoint's tokenizer is not one llama.cpp knows, by model_type
_LLAMA_PRE_FALLBACK = {"qwen2": "qwen2", "qwen3": "qwen2", "llama": "llama-bpe"}


def _llama_cpp_source(work_dir: str) -> Path:
    """The llama.cpp tree of the installed llama-cpp-python's sdist, holding convert_hf_to_gguf.py, its
    `conversion` package and the matching `gguf-py` (the wheel does not ship them). `LLAMA_CPP_SOURCE` may point at
    an extracted `vendor/llama.cpp`; otherwise the sdist of the installed version is fetched with pip (PyPI) once
    and its Python parts are extracted into work_dir."""
    env_dir = os.environ.get("LLAMA_CPP_SOURCE")
    if env_dir and (Path(env_dir) / "convert_hf_to_gguf.py").exists():
        return Path(env_dir)
    import llama_cpp

    dest = Path(work_dir) / f"llama_cpp_src-{llama_cpp.__version__}"
    if (dest / "convert_hf_to_gguf.py").exists():
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        # --no-binary for this package only: its build requirements may still come as wheels (metadata only, fast)
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
              f"llama-cpp-python=={llama_cpp.__version__}", "-d", tmp], "pip download of the llama-cpp-python sdist")
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        prefix = f"{sdist.name[:-len('.tar.gz')]}/vendor/llama.cpp/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        staging = Path(tmp) / "x"
        with tarfile.open(sdist) as tf:
            members = [m for m in tf.getmembers()
                       if m.name.startswith(prefix) and m.name[len(prefix):].startswith(wanted)]
            tf.extractall(staging, members=members, filter="data")
        shutil.move(str(staging / prefix), str(dest))
    return dest


def _llama_cpp_convert(hf_dir: str, work_dir: str, precision: str) -> tuple[Path, float, bool]:
    """GGUF of hf_dir at `precision`: (path, convert_s, cached). float32/bfloat16/int8 come from the converter
    (--outtype f32/bf16/q8_0); int4 is llama.cpp's Q4_0 made by llama_model_quantize from the float32 GGUF (the
    converter has no 4-bit outtype), and its convert_s includes that float32 conversion."""
    out_dir = _model_dir(work_dir, "llama_cpp", hf_dir, precision)
    gguf = out_dir / f"model-{_LLAMA_TYPES[precision]}.gguf"
    cached = _cached(out_dir, hf_dir)
    if cached is not None and gguf.exists():
        return gguf, cached, True
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if precision == "int4":
        import llama_cpp
        f32, f32_s, _ = _llama_cpp_convert(hf_dir, work_dir, "float32")
        t0 = time.perf_counter() - f32_s   # count the float32 conversion it starts from
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
        params.nthread = max(1, os.cpu_count() or 1)
        rc = llama_cpp.llama_model_quantize(str(f32).encode(), str(gguf).encode(), params)
        if rc != 0:
            raise PeerUnavailable(f"llama_model_quantize to Q4_0 returned {rc}")
    else:
        src = _llama_cpp_source(work_dir)
        model_type = json.loads((Path(hf_dir) / "config.json").read_text()).get("model_type", "")
        wrapper = out_dir / "convert_wrapper.py"
        wrapper.write_text(_CONVERT_WRAPPER)
        _run([sys.executable, str(wrapper), str(src), _LLAMA_PRE_FALLBACK.get(model_type, "default"), hf_dir,
              "--outtype", _LLAMA_TYPES[precision], "--outfile", str(gguf)],
             f"convert_hf_to_gguf.py --outtype {_LLAMA_TYPES[precision]}", env=_offline_env())
    convert_s = time.perf_counter() - t0
    _mark(out_dir, hf_dir, convert_s)
    return gguf, convert_s, False


def _gguf_types(path: Path) -> str:
    """'GGUF q4_0: Q4_0 x14, F32 x11, Q8_0 x1 (token_embd Q8_0)': what the file really holds (llama.cpp's quantize
    keeps the output / tied-embedding tensor at a higher-bit type, and falls back when a row does not fit a block)."""
    from collections import Counter

    from gguf import GGUFReader

    tensors = GGUFReader(str(path)).tensors
    counts = Counter(t.tensor_type.name for t in tensors)
    embd = next((t.tensor_type.name for t in tensors if t.name == "token_embd.weight"), "?")
    return (f"GGUF {path.stem.split('-')[-1]}: " + ", ".join(f"{k} x{v}" for k, v in counts.most_common())
            + f" (token_embd {embd})")


def _ggml_build_note(llama_cpp) -> str:
    """Whether this llama.cpp build has its AMX kernels: on CPUs with AMX a build without them (GGML_NATIVE=OFF) is
    the one that runs on some virtual machines, where the AMX path faults (llama.cpp issue #20824)."""
    features = llama_cpp.llama_print_system_info().decode()
    if "AMX_INT8 = 1" in features:
        return " (its AMX kernels built in)"
    cpu = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return " (built without its AMX kernels)" if "amx_int8" in cpu else ""


def run_llama_cpp(hf_dir: str, work_dir: str, precision: str, threads: int, prompt_ids: list[int],
                  new_tokens: int, repeats: int = 1) -> dict[str, Any]:
    """llama.cpp through llama-cpp-python: GGUF f32 / bf16 / Q8_0 (converter) / Q4_0 (llama_model_quantize; as
    llama.cpp's quantize does by default, the output/tied-embedding tensor is kept at a higher-bit type).
    Prefill = `Llama.eval(prompt_ids)` on a fresh context (ids, no tokenizer), first token = argmax of its logits;
    decode = `eval([token])` + argmax per further token."""
    try:
        import llama_cpp
    except ImportError as e:
        raise PeerUnavailable(f"llama-cpp-python is not installed: {e}") from e
    _check(precision, _LLAMA_TYPES, "llama.cpp")
    gguf, convert_s, cached = _llama_cpp_convert(hf_dir, work_dir, precision)
    n_ctx = -(-(len(prompt_ids) + new_tokens + 8) // 256) * 256
    # flash_attn=True: llama.cpp's own default is "auto", which probes the backend and enables it on the CPU
    # (llama-cpp-python maps its bool to enabled/disabled only)
    llm = llama_cpp.Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                          n_batch=512, n_ubatch=512, logits_all=False, flash_attn=True, verbose=False)
    n_vocab = llm.n_vocab()

    def last_argmax() -> int:
        # Llama.eval() no longer copies logits into llm.scores unless logits_all: read the context's last row
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))

    def greedy(ids: list[int]) -> tuple[float, float, list[int]]:
        llm.reset()   # n_tokens = 0: eval() drops the cached KV past it
        t0 = time.perf_counter()
        llm.eval(ids)
        out = [last_argmax()]
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            llm.eval([out[-1]])
            out.append(last_argmax())
        return t1 - t0, time.perf_counter() - t1, out

    greedy(_warm_prompt(prompt_ids))
    t_prefill, t_decode, out = _measured(greedy, prompt_ids, repeats)
    llm.close()
    return _result("llama.cpp", precision, threads, len(prompt_ids), new_tokens, t_prefill, t_decode, out,
                   convert_s, f"llama-cpp-python {llama_cpp.__version__}{_ggml_build_note(llama_cpp)}", cached,
                   _gguf_types(gguf))


# ----------------------------------------------------------------------------------------------------------------
# ONNX Runtime GenAI

_OG_PRECISIONS: dict[str, Any] = {"float32": "fp32", "bfloat16": "bf16", "int8": "int8", "int4": "int4"}
# prune_lm_head: the prompt step computes the last position's logits only, as llama.cpp and OpenVINO GenAI do (by
# default the builder's graph projects every prompt position onto the 151936-row vocabulary, several times the
# FLOPs of a small model's layers)
_OG_EXTRA = ["prune_lm_head=true"]


def _og_build(hf_dir: str, work_dir: str, precision: str) -> tuple[Path, float, bool]:
    out_dir = _model_dir(work_dir, "onnxruntime_genai", hf_dir, precision)
    cached = _cached(out_dir, hf_dir)
    if cached is not None and (out_dir / "genai_config.json").exists():
        return out_dir, cached, True
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    return _timed_conversion(out_dir, hf_dir, [
        sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf_dir, "-o", str(out_dir),
        "-p", _OG_PRECISIONS[precision], "-e", "cpu", "-c", str(Path(work_dir) / "onnxruntime_genai" / "cache"),
        "--extra_options", *_OG_EXTRA], f"onnxruntime_genai.models.builder -p {_OG_PRECISIONS[precision]} -e cpu")


def load_onnxruntime_genai(hf_dir: str, work_dir: str, precision: str, threads: int):
    """(the onnxruntime_genai module, its Model of the checkpoint built by the builder (cached) on `threads` intra-op
    threads, the conversion's seconds, whether it was cached)."""
    try:
        import onnxruntime_genai as og
    except ImportError as e:
        raise PeerUnavailable(f"onnxruntime-genai is not installed: {e}") from e
    _check(precision, _OG_PRECISIONS, "onnxruntime-genai")
    model_dir, convert_s, cached = _og_build(hf_dir, work_dir, precision)
    cfg_path = model_dir / "genai_config.json"
    cfg = json.loads(cfg_path.read_text())
    session = cfg["model"]["decoder"].setdefault("session_options", {})
    session["intra_op_num_threads"] = threads
    session["inter_op_num_threads"] = 1
    cfg_path.write_text(json.dumps(cfg, indent=4))
    try:
        model = og.Model(str(model_dir))
    except RuntimeError as e:   # e.g. the CPU provider has no bf16 kernel for an op of the bf16 graph
        raise PeerUnavailable(f"onnxruntime-genai {og.__version__} cannot load the {_OG_PRECISIONS[precision]} "
                              f"CPU model: {e}") from e
    return og, model, convert_s, cached


def run_onnxruntime_genai(hf_dir: str, work_dir: str, precision: str, threads: int, prompt_ids: list[int],
                          new_tokens: int, repeats: int = 1) -> dict[str, Any]:
    """ONNX Runtime GenAI, CPU provider, model built by `onnxruntime_genai.models.builder -e cpu -p
    fp32|bf16|int8|int4` (int4/int8: MatMulNBits weight-only, block 32, the builder's CPU default accuracy_level 4 =
    int8 activations). Threads: `intra_op_num_threads` in the decoder's session_options of the written
    genai_config.json (our cached copy). Prefill = `append_tokens(prompt_ids)` + the first `generate_next_token()`
    (which only picks from the prompt's logits); decode = the further `generate_next_token()` calls."""
    og, model, convert_s, cached = load_onnxruntime_genai(hf_dir, work_dir, precision, threads)

    def greedy(ids: list[int]) -> tuple[float, float, list[int]]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + new_tokens, min_length=len(ids) + new_tokens,
                                  do_sample=False, batch_size=1)
        gen = og.Generator(model, params)
        t0 = time.perf_counter()
        gen.append_tokens(np.asarray([ids], dtype=np.int32))
        gen.generate_next_token()
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            gen.generate_next_token()
        t2 = time.perf_counter()
        out = list(gen.get_sequence(0))[len(ids):]
        del gen
        return t1 - t0, t2 - t1, out

    greedy(_warm_prompt(prompt_ids))
    t_prefill, t_decode, out = _measured(greedy, prompt_ids, repeats)
    return _result("onnxruntime-genai", precision, threads, len(prompt_ids), new_tokens, t_prefill, t_decode, out,
                   convert_s, f"onnxruntime-genai {og.__version__}", cached,
                   f"builder -p {_OG_PRECISIONS[precision]} -e cpu {' '.join(_OG_EXTRA)}")


# ----------------------------------------------------------------------------------------------------------------
# OpenVINO GenAI

# precision -> (optimum-cli --weight-format, runtime properties). bfloat16 is the float32 IR run with bf16 compute
# (OpenVINO's CPU default where the CPU has bf16; there is no bf16 weight format to export); float32 pins f32
# compute and an f32 KV cache (the CPU plugin's defaults here: bf16 compute, an f16 KV cache, and dynamic int8
# quantization of activations in groups of 32 for compressed weights). int8/int4 (NNCF data-free weight compression,
# optimum-intel's defaults) keep the plugin defaults, as a user would run them.
_OV_PRECISIONS: dict[str, Any] = {
    "float32": ("fp32", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}),
    "bfloat16": ("fp32", {"INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"}),
    "int8": ("int8", {}),
    "int4": ("int4", {}),
}


# optimum-intel pins transformers (2.2.0: transformers<5.6) and imports model classes that newer transformers
# renamed, so its exporter may not import beside the project's transformers. It then runs from a side virtualenv
# made by make_optimum_venv(): the exporter is the only thing that needs it (the IR runs in this process).
OPTIMUM_VENV_PINS = ["transformers==5.5.4", "optimum==2.3.0", "nncf==3.4.0", "huggingface-hub>=0.23.2,<1.22",
                     "requests>=2.33,<3", "setuptools"]
OPTIMUM_INTEL_PIN = "optimum-intel==2.2.0"


def make_optimum_venv(venv_dir: str, torch_spec: str = "torch==2.13.0", transformers_spec: str | None = None) -> str:
    """Create a virtualenv holding optimum-intel's exporter with the transformers it supports, and the same
    openvino / openvino-tokenizers versions as this environment (so the IR and tokenizer models match the runtime).
    optimum-intel is installed with --no-deps: its torchvision requirement would pull another torch, and the LLM
    export never imports torchvision. `transformers_spec` replaces the transformers pin (optimum-intel 2.2 exports
    Qwen2.5-VL only with transformers <= 5.0). Returns the path of its optimum-cli."""
    from importlib.metadata import version

    py = Path(venv_dir) / "bin" / "python"
    if not py.exists():
        _run([sys.executable, "-m", "venv", venv_dir], "python -m venv")
    pins = [torch_spec, *(p for p in OPTIMUM_VENV_PINS if not (transformers_spec and p.startswith("transformers"))),
            *([transformers_spec] if transformers_spec else []), f"openvino=={version('openvino')}",
            f"openvino-tokenizers=={version('openvino-tokenizers')}"]
    _run([str(py), "-m", "pip", "install", *pins], "pip install of the optimum-intel side environment")
    _run([str(py), "-m", "pip", "install", "--no-deps", OPTIMUM_INTEL_PIN], f"pip install {OPTIMUM_INTEL_PIN}")
    return str(Path(venv_dir) / "bin" / "optimum-cli")


def optimum_export(model_dir: str, task: str, out_dir: str, venv_dir: str, transformers_spec: str | None = None,
                   extra_files: tuple[str, ...] = ()) -> None:
    """`optimum-cli export openvino --task TASK --weight-format fp32` of model_dir into out_dir (written beside it,
    then renamed), with the optimum-cli of venv_dir (made by make_optimum_venv when missing); `extra_files` are copied
    in from model_dir before the rename."""
    cli = Path(venv_dir) / "bin" / "optimum-cli"
    if not cli.exists():
        cli = Path(make_optimum_venv(venv_dir, transformers_spec=transformers_spec))
    tmp = out_dir + ".tmp"
    subprocess.run([str(cli), "export", "openvino", "--model", model_dir, "--task", task, "--weight-format", "fp32",
                    tmp], check=True, stdout=subprocess.DEVNULL)
    for name in extra_files:
        shutil.copyfile(os.path.join(model_dir, name), os.path.join(tmp, name))
    os.replace(tmp, out_dir)


def _optimum_cli(work_dir: str) -> str:
    """The optimum-cli to export with: $LLM_PEERS_OPTIMUM_CLI, else this environment's when optimum-intel's OpenVINO
    exporter imports here, else work_dir/optimum-intel-venv's (make_optimum_venv)."""
    env_cli = os.environ.get("LLM_PEERS_OPTIMUM_CLI")
    if env_cli:
        return env_cli
    here = shutil.which("optimum-cli", path=os.path.dirname(sys.executable))
    if here:
        probe = subprocess.run([sys.executable, "-c", "import optimum.intel.openvino"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=_offline_env())
        if probe.returncode == 0:
            return here
        why = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else f"exit {probe.returncode}"
    else:
        why = "optimum-intel is not installed in this environment"
    side = Path(work_dir) / "optimum-intel-venv" / "bin" / "optimum-cli"
    if side.exists():
        return str(side)
    raise PeerUnavailable(
        f"optimum-intel's OpenVINO exporter does not import here ({why}); create its side environment with "
        f"benchmarks.llm_peers.make_optimum_venv({str(side.parent.parent)!r}) or set LLM_PEERS_OPTIMUM_CLI")


def _ov_export(hf_dir: str, work_dir: str, weight_format: str) -> tuple[Path, float, bool]:
    out_dir = _model_dir(work_dir, "openvino_genai", hf_dir, weight_format)
    cached = _cached(out_dir, hf_dir)
    if cached is not None and (out_dir / "openvino_model.xml").exists():
        return out_dir, cached, True
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    cli = _optimum_cli(work_dir)
    return _timed_conversion(out_dir, hf_dir, [
        cli, "export", "openvino", "--model", hf_dir, "--task", "text-generation-with-past",
        "--weight-format", weight_format, str(out_dir)], f"optimum-cli export openvino --weight-format {weight_format}")


def run_openvino_genai(hf_dir: str, work_dir: str, precision: str, threads: int, prompt_ids: list[int],
                       new_tokens: int, repeats: int = 1) -> dict[str, Any]:
    """OpenVINO GenAI `LLMPipeline` on CPU, IR exported by optimum-intel (`optimum-cli export openvino
    --weight-format fp32|int8|int4`), ids fed as an `ov.Tensor` (no tokenizer), `INFERENCE_NUM_THREADS=threads`.
    Prefill = TTFT and decode = 1 / TPOT from the pipeline's own perf metrics (TPOT excludes the first token)."""
    try:
        import openvino as ov
        import openvino_genai
    except ImportError as e:
        raise PeerUnavailable(f"openvino-genai is not installed: {e}") from e
    weight_format, props = _check(precision, _OV_PRECISIONS, "openvino-genai")
    model_dir, convert_s, cached = _ov_export(hf_dir, work_dir, weight_format)
    pipe = openvino_genai.LLMPipeline(str(model_dir), "CPU", INFERENCE_NUM_THREADS=threads, **props)
    gc = openvino_genai.GenerationConfig()
    gc.max_new_tokens = new_tokens
    gc.min_new_tokens = new_tokens
    gc.ignore_eos = True
    gc.do_sample = False

    def greedy(ids: list[int]) -> tuple[float, float, list[int]]:
        res = pipe.generate(ov.Tensor(np.asarray([ids], dtype=np.int64)), gc)
        pm = res.perf_metrics
        ttft_s = pm.get_ttft().mean / 1e3
        tpot_s = pm.get_tpot().mean / 1e3
        return ttft_s, tpot_s * (new_tokens - 1), list(res.tokens[0])

    greedy(_warm_prompt(prompt_ids))
    t_prefill, t_decode, out = _measured(greedy, prompt_ids, repeats)
    hint = props.get("INFERENCE_PRECISION_HINT", "plugin default")
    return _result("openvino-genai", precision, threads, len(prompt_ids), new_tokens, t_prefill, t_decode, out,
                   convert_s, f"openvino-genai {openvino_genai.__version__}", cached,
                   f"IR {weight_format}, inference precision {hint}")


PEERS: dict[str, Callable[..., dict[str, Any]]] = {
    "llama_cpp": run_llama_cpp,
    "onnxruntime_genai": run_onnxruntime_genai,
    "openvino_genai": run_openvino_genai,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    ap.add_argument("--engines", nargs="+", default=list(PEERS), choices=list(PEERS))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "llm_peers"))
    ap.add_argument("--json", help="write all rows (and the reference ids) to this file")
    ap.add_argument("--make-optimum-venv", action="store_true",
                    help="create <work>/peers/optimum-intel-venv when optimum-intel does not import here")
    args = ap.parse_args(argv)
    peers_dir = os.path.join(args.work, "peers")
    if args.make_optimum_venv and "openvino_genai" in args.engines:
        try:
            _optimum_cli(peers_dir)
        except PeerUnavailable:
            print("creating the optimum-intel side environment", flush=True)
            make_optimum_venv(os.path.join(peers_dir, "optimum-intel-venv"))
    hf_dir = make_test_checkpoint(os.path.join(args.work, f"qwen2_{args.layers}l"), args.layers)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, QWEN25_05B["vocab_size"], args.prompt).tolist()
    ref = transformers_greedy(hf_dir, prompt, args.new)
    print(f"transformers greedy: {ref}", flush=True)
    rows: list[dict[str, Any]] = []
    for engine in args.engines:
        for precision in args.precisions:
            for threads in args.threads:
                try:
                    r = PEERS[engine](hf_dir, peers_dir, precision, threads, prompt, args.new)
                except PeerUnavailable as e:
                    print(f"{engine} {precision} t{threads}: unavailable: {e}", flush=True)
                    rows.append({"engine": engine, "precision": precision, "threads": threads,
                                 "unavailable": str(e)})
                    continue
                same = sum(a == b for a, b in zip(r["output_ids"], ref))
                r["matches_transformers"] = f"{same}/{len(ref)}"
                rows.append(r)
                print(f"{r['engine']:18s} {precision:8s} t{threads}: prefill {r['prefill_tok_s']:8.1f} tok/s, "
                      f"decode {r['decode_tok_s']:7.2f} tok/s, convert {r['convert_s']:6.1f} s"
                      f"{' (cached)' if r['cached'] else ''}, same ids as transformers {same}/{len(ref)} "
                      f"[{r['version']}; {r['notes']}]", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"reference": ref, "prompt": prompt, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
