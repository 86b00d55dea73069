"""Speech recognition: lite's Qwen3-ASR pipeline (log-mel front end, the audio graph, the step graph with the audio
rows) beside PyTorch eager (transformers' Qwen3ASRProcessor + Qwen3ASRForConditionalGeneration.generate), one run,
the same seeded random weights.

A Qwen3-ASR-0.6B-shaped model: its real sizes (128 mel bins; audio encoder 896 wide, 18 layers, 14 heads, FFN 3584,
480 conv channels, 100-frame chunks, 800-frame attention windows; projector to 1024; Qwen3 decoder 1024 wide, 16 /
8 heads of 128, MLP 3072, vocab 151936, tied) with `--layers` of the decoder's 28. `--seconds` of audio (a chord and
noise), the language forced (English), `--new-tokens` greedy tokens decoded whatever they are (end-of-text ignored
by both, so both do the same work; prefix caching off, so every call prefills). Reported per thread count: the whole call (features, encoder, prefill, decode)
and its real-time factor (time / audio length), the time to the first token, and the front end + encoder alone.
Each engine runs once a round, the order alternating; the median of `--repeat` rounds.

    python -m benchmarks.asr --out benchmarks/results/asr.md"""
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

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>", "<|endoftext|>"]
WORDS = "<unk> <pad> system user assistant language English".split()
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'audio' %}"
            "<|audio_start|><|audio_pad|><|audio_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% endif %}")


def build(work: str, layers: int):
    import torch
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import (PreTrainedTokenizerFast, Qwen3ASRConfig, Qwen3ASRFeatureExtractor,
                              Qwen3ASRForConditionalGeneration)
    path = os.path.join(work, f"qwen3_asr_0_6b_{layers}l")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tok.add_tokens([AddedToken("<asr_text>", special=False)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"})
    tokenizer.chat_template = TEMPLATE
    audio_id = tokenizer.convert_tokens_to_ids("<|audio_pad|>")
    config = Qwen3ASRConfig(
        audio_config=dict(num_mel_bins=128, d_model=896, encoder_layers=18, encoder_attention_heads=14,
                          encoder_ffn_dim=3584, output_dim=1024, downsample_hidden_size=480),
        text_config=dict(hidden_size=1024, num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
                         head_dim=128, intermediate_size=3072, vocab_size=151936, max_position_embeddings=65536),
        audio_token_id=audio_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3ASRForConditionalGeneration(config).eval()
    with torch.no_grad():   # every table away from its initial value
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    if not os.path.isfile(os.path.join(path, "config.json")):
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        Qwen3ASRFeatureExtractor().save_pretrained(path)
    return model, tokenizer, path


def speech(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * 16000)) / 16000
    chord = sum(np.sin(2 * np.pi * f * t) for f in (196.0, 247.0, 294.0)) * 0.1
    return (chord + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=28, help="decoder layers (of 28)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_asr_bench"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

    from lite.qwen3_asr import Qwen3ASR
    os.makedirs(args.work, exist_ok=True)
    model, tokenizer, path = build(args.work, args.layers)
    processor = Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tokenizer,
                                  chat_template=TEMPLATE)
    audio = speech(args.seconds)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        asr = Qwen3ASR.from_pretrained(path, threads=threads, num_blocks=128, block_size=16,
                                       max_num_batched_tokens=512, prefix_caching=False)   # every round prefills
        asr.engine.eos_token_ids = set()   # fixed-length decoding, as min_new_tokens does for PyTorch

        def lite_run(new_tokens):
            t0 = time.perf_counter()
            tokens = asr.generate_ids([audio], language="English", max_new_tokens=new_tokens)[0]
            return time.perf_counter() - t0, tokens

        def lite_encoder():
            t0 = time.perf_counter()
            asr.audio_rows(audio)
            return time.perf_counter() - t0

        def torch_run(new_tokens):
            t0 = time.perf_counter()
            inputs = processor.apply_transcription_request(audio=[audio], language="English")
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            return time.perf_counter() - t0, out[0, inputs["input_ids"].shape[1]:].tolist()

        def torch_encoder():
            t0 = time.perf_counter()
            feats = processor.feature_extractor(audio, sampling_rate=16000, padding=True, return_attention_mask=True,
                                                return_tensors="pt")
            with torch.no_grad():
                model.model.get_audio_features(feats["input_features"], feats["attention_mask"])
            return time.perf_counter() - t0

        lite_run(2), torch_run(2)   # warm-up (plans, packed weights)
        same = lite_run(8)[1] == torch_run(8)[1]
        times = {k: [] for k in ("lite_ttft", "lite_all", "lite_enc", "torch_ttft", "torch_all", "torch_enc")}
        for r in range(args.repeat):
            for name in (("lite", "torch") if r % 2 == 0 else ("torch", "lite")):
                run, enc = (lite_run, lite_encoder) if name == "lite" else (torch_run, torch_encoder)
                times[f"{name}_enc"].append(enc())
                times[f"{name}_ttft"].append(run(1)[0])
                times[f"{name}_all"].append(run(args.new_tokens)[0])
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append(dict(threads=threads, same=same, **med))
        print(rows[-1], flush=True)
        del asr
    command = (f"python -m benchmarks.asr --layers {args.layers} --seconds {args.seconds:g} "
               f"--new-tokens {args.new_tokens}")
    lines = [
        "# Speech recognition: lite vs PyTorch eager",
        "",
        f"{cpu_name()}; {time.strftime('%Y-%m-%d')}. `{command}`. A Qwen3-ASR-0.6B-shaped model (its real sizes, "
        f"{args.layers} of the decoder's 28 layers; seeded random weights, float32), {args.seconds:g} s of 16 kHz "
        f"audio, language forced, {args.new_tokens} greedy tokens (end-of-text ignored by both), batch 1, prefix caching "
        "off (the same clip every round would otherwise skip its prefill). `call`: "
        "features, encoder, prefill and decode; RTF = call / audio length; TTFT: the same with one token; "
        "`encoder`: the log-mel front end and the audio encoder alone. Median of "
        f"{args.repeat} rounds, engines alternating. PyTorch: transformers' Qwen3ASRProcessor and generate (SDPA). "
        "`same`: the first 8 tokens equal. ONNX Runtime is not measured: no exporter for this architecture is "
        "available offline here.",
        "",
        "| threads | call s lite | PyTorch | RTF lite | RTF PyTorch | lite / PyTorch | TTFT s lite | PyTorch | "
        "encoder s lite | PyTorch | same |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['lite_all']:.2f} | {r['torch_all']:.2f} | "
                     f"{r['lite_all'] / args.seconds:.3f} | {r['torch_all'] / args.seconds:.3f} | "
                     f"{r['lite_all'] / r['torch_all']:.2f} | {r['lite_ttft']:.2f} | {r['torch_ttft']:.2f} | "
                     f"{r['lite_enc']:.2f} | {r['torch_enc']:.2f} | {'yes' if r['same'] else 'no'} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
