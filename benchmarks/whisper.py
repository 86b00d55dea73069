"""Whisper speech recognition: lite's pipeline (log-mel front end, the encoder graph with every decoder layer's cross
keys / values, the decoder step on the paged KV cache) beside PyTorch eager (transformers' WhisperFeatureExtractor +
WhisperForConditionalGeneration.generate) and ONNX Runtime (the same model exported by torch.onnx as an encoder and
a decoder step with past keys / values as inputs and outputs, decoded greedily in Python as onnxruntime users do
without GenAI), one run, the same seeded random weights.

A Whisper-small-shaped model: its real sizes (80 mel bins, 768 wide, 12 encoder and 12 decoder layers of 12 heads,
FFN 3072, 1500 audio positions, 448 text positions, vocab 51865, tied head). `--seconds` of audio (a chord and
noise; padded to 30 s by every engine, as Whisper does), English forced, `--new-tokens` greedy tokens decoded
whatever they are (end-of-text suppressed for all, so all do the same work). Reported per thread count: the whole
call (features, encoder, decoding) and its real-time factor (time / audio length), the time to the first token,
and the front end + encoder alone. Each engine runs once a round, the order alternating; the median of `--repeat`.

    python -m benchmarks.whisper --out benchmarks/results/whisper.md"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from .machine import cpu_name, package_version  # noqa: E402
from .results_io import publish  # noqa: E402

VOCAB, EOS, SOT, EN, TRANSLATE, TRANSCRIBE, NO_TIMESTAMPS = 51865, 50257, 50258, 50259, 50358, 50359, 50363


def build(work: str):
    import torch
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import (GenerationConfig, PreTrainedTokenizerFast, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration)
    path = os.path.join(work, "whisper_small")
    special = {EOS: "<|endoftext|>", SOT: "<|startoftranscript|>", EN: "<|en|>", TRANSLATE: "<|translate|>",
               TRANSCRIBE: "<|transcribe|>", NO_TIMESTAMPS: "<|notimestamps|>"}
    vocab = {special.get(i, f"w{i}"): i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in special.values()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", bos_token="<|endoftext|>",
                                        eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    config = WhisperConfig(vocab_size=VOCAB, num_mel_bins=80, d_model=768, encoder_layers=12, decoder_layers=12,
                           encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                           decoder_ffn_dim=3072, max_source_positions=1500, max_target_positions=448,
                           decoder_start_token_id=SOT, eos_token_id=EOS, bos_token_id=EOS, pad_token_id=EOS)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():   # every table away from its initial value
        for name, p in model.named_parameters():
            if "encoder.embed_positions" not in name:
                p.add_(torch.randn_like(p) * 0.02)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=SOT, eos_token_id=EOS, pad_token_id=EOS, bos_token_id=EOS,
        no_timestamps_token_id=NO_TIMESTAMPS, suppress_tokens=[EOS], begin_suppress_tokens=[220, EOS],
        max_length=448, is_multilingual=True, lang_to_id={"<|en|>": EN},
        task_to_id={"transcribe": TRANSCRIBE, "translate": TRANSLATE})
    if not os.path.isfile(os.path.join(path, "config.json")):
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        WhisperFeatureExtractor(feature_size=80).save_pretrained(path)
    return model, path


class _Step:
    """The decoder step as a module of plain tensors for torch.onnx: (input_ids [B, T], position offset, past self
    keys / values [layers, 2, B, heads, P, dim], cross keys / values [layers, 2, B, heads, S, dim]) -> (logits of the
    last token [B, V], the new past)."""

    @staticmethod
    def module(model):
        import torch

        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.decoder = model.model.decoder
                self.head = model.proj_out

            def forward(self, input_ids, offset, past, cross):
                dec = self.decoder
                T = input_ids.shape[1]
                positions = offset + torch.arange(T)
                x = dec.embed_tokens(input_ids) + dec.embed_positions.weight[positions][None]
                presents = []
                P = past.shape[4]
                mask = torch.ones(T, P + T, dtype=torch.bool).tril(diagonal=P)
                for i, layer in enumerate(dec.layers):
                    attn = layer.self_attn
                    h = layer.self_attn_layer_norm(x)
                    B, H = h.shape[0], attn.num_heads
                    q = attn.q_proj(h).view(B, T, H, -1).transpose(1, 2)
                    k = attn.k_proj(h).view(B, T, H, -1).transpose(1, 2)
                    v = attn.v_proj(h).view(B, T, H, -1).transpose(1, 2)
                    k = torch.cat([past[i, 0], k], dim=2)
                    v = torch.cat([past[i, 1], v], dim=2)
                    presents.append(torch.stack([k, v]))
                    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                    x = x + attn.out_proj(a.transpose(1, 2).reshape(B, T, -1))
                    ca = layer.encoder_attn
                    h = layer.encoder_attn_layer_norm(x)
                    q = ca.q_proj(h).view(B, T, H, -1).transpose(1, 2)
                    a = torch.nn.functional.scaled_dot_product_attention(q, cross[i, 0], cross[i, 1])
                    x = x + ca.out_proj(a.transpose(1, 2).reshape(B, T, -1))
                    h = layer.final_layer_norm(x)
                    x = x + layer.fc2(torch.nn.functional.gelu(layer.fc1(h)))
                x = dec.layer_norm(x[:, -1])
                return self.head(x), torch.stack(presents)

        return Step().eval()


def export_onnx(model, work: str) -> tuple[str, str]:
    """encoder.onnx (features -> cross keys / values of every layer) and step.onnx, exported once."""
    import torch
    enc_path, step_path = os.path.join(work, "whisper_encoder.onnx"), os.path.join(work, "whisper_step.onnx")
    layers, heads, d = 12, 12, 768

    model.requires_grad_(False)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, features):
            states = self.model.model.encoder(features).last_hidden_state
            B, S = states.shape[:2]
            kv = [torch.stack([l.encoder_attn.k_proj(states).view(B, S, heads, -1).transpose(1, 2),
                               l.encoder_attn.v_proj(states).view(B, S, heads, -1).transpose(1, 2)])
                  for l in self.model.model.decoder.layers]
            return torch.stack(kv)

    with torch.no_grad():
        if not os.path.isfile(enc_path):
            torch.onnx.export(Encoder().eval(), (torch.zeros(1, 80, 3000),), enc_path, input_names=["features"],
                              output_names=["cross"], dynamo=False, opset_version=17)
        if not os.path.isfile(step_path):
            past = torch.zeros(layers, 2, 1, heads, 4, d // heads)
            cross = torch.zeros(layers, 2, 1, heads, 1500, d // heads)
            torch.onnx.export(_Step.module(model), (torch.zeros(1, 1, dtype=torch.long), torch.tensor(4), past,
                                                    cross), step_path,
                              input_names=["input_ids", "offset", "past", "cross"], output_names=["logits", "present"],
                              dynamic_axes={"input_ids": {1: "T"}, "past": {4: "P"}, "present": {4: "PT"}},
                              dynamo=False, opset_version=17)
    return enc_path, step_path


def ov_peer(path: str, work: str, threads: int):
    """OpenVINO GenAI's WhisperPipeline beside lite: the checkpoint exported by optimum-intel (`optimum-cli export
    openvino --task automatic-speech-recognition-with-past --weight-format fp32`, from the side virtualenv of
    benchmarks.llm_peers.make_optimum_venv), run in float32 (INFERENCE_PRECISION_HINT f32) with the checkpoint's
    generation config (English, transcribe, end-of-text suppressed). Returns run(audio, new_tokens) -> (seconds,
    text, generated tokens)."""
    import openvino_genai as ov_genai

    from .llm_peers import optimum_export
    ir = path + "_openvino_fp32"
    if not os.path.isfile(os.path.join(ir, "openvino_decoder_model.xml")):
        # (the side venv the run was measured with: transformers 5.0, as the VLM export's)
        optimum_export(path, "automatic-speech-recognition-with-past", ir, os.path.join(work, "optimum-intel-venv"),
                       transformers_spec="transformers==5.0.0")
    pipe = ov_genai.WhisperPipeline(ir, "CPU", INFERENCE_PRECISION_HINT="f32", INFERENCE_NUM_THREADS=threads)

    def run(audio: np.ndarray, new_tokens: int) -> tuple[float, str, int]:
        config = pipe.get_generation_config()
        config.language, config.task, config.return_timestamps = "<|en|>", "transcribe", False
        config.max_new_tokens = new_tokens
        samples = audio.astype(np.float32).tolist()
        t0 = time.perf_counter()
        result = pipe.generate(samples, config)
        return time.perf_counter() - t0, result.texts[0], result.perf_metrics.get_num_generated_tokens()
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_whisper_bench"))
    ap.add_argument("--out")
    ap.add_argument("--no-openvino", action="store_true", help="leave OpenVINO GenAI out")
    args = ap.parse_args(argv)
    import onnxruntime as ort
    import torch
    from transformers import WhisperFeatureExtractor

    from lite.whisper import Whisper

    from .asr import speech
    os.makedirs(args.work, exist_ok=True)
    model, path = build(args.work)
    extractor = WhisperFeatureExtractor(feature_size=80)
    enc_path, step_path = export_onnx(model, args.work)
    audio = speech(args.seconds)
    prompt = [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS]
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        asr = Whisper.from_pretrained(path, threads=threads, max_batch=1)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        enc_sess = ort.InferenceSession(enc_path, opts, providers=["CPUExecutionProvider"])
        step_sess = ort.InferenceSession(step_path, opts, providers=["CPUExecutionProvider"])

        def lite_run(n):
            t0 = time.perf_counter()
            tokens = asr.generate_ids([audio], language="en", max_new_tokens=n)[0]
            return time.perf_counter() - t0, tokens

        def lite_encoder():
            t0 = time.perf_counter()
            asr.encoder.predict({"input_features": asr.features(audio)[None]})
            return time.perf_counter() - t0

        def torch_features():
            return extractor(audio, sampling_rate=16000, return_tensors="pt")["input_features"]

        def torch_run(n):
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(torch_features(), language="en", max_new_tokens=n, do_sample=False)
            return time.perf_counter() - t0, out[0].tolist()[-n:]

        def torch_encoder():
            t0 = time.perf_counter()
            with torch.no_grad():
                model.model.encoder(torch_features())
            return time.perf_counter() - t0

        def ort_run(n):
            t0 = time.perf_counter()
            feats = extractor(audio, sampling_rate=16000, return_tensors="np")["input_features"].astype(np.float32)
            cross = enc_sess.run(None, {"features": feats})[0]
            past = np.zeros((12, 2, 1, 12, 0, 64), np.float32)
            ids, offset, out = np.array([prompt], np.int64), 0, []
            for step in range(n):
                logits, past = step_sess.run(None, {"input_ids": ids, "offset": np.array(offset, np.int64),
                                                    "past": past, "cross": cross})
                logits[:, EOS] = -np.inf   # the generation config's suppress / begin-suppress tokens
                if step == 0:
                    logits[:, 220] = -np.inf
                offset += ids.shape[1]
                token = int(np.argmax(logits[0]))
                out.append(token)
                ids = np.array([[token]], np.int64)
            return time.perf_counter() - t0, out

        def ort_encoder():
            t0 = time.perf_counter()
            feats = extractor(audio, sampling_rate=16000, return_tensors="np")["input_features"].astype(np.float32)
            enc_sess.run(None, {"features": feats})
            return time.perf_counter() - t0

        runs = {"lite": (lite_run, lite_encoder), "torch": (torch_run, torch_encoder), "ort": (ort_run, ort_encoder)}
        if not args.no_openvino:
            ov_generate = ov_peer(path, args.work, threads)

            def ov_run(n):   # its text: the tokens' words ("w<id>"), special tokens skipped
                seconds, text, _ = ov_generate(audio, n)
                return seconds, text.split()
            runs["ov"] = (ov_run, None)   # (no separate encoder call)
        for run, _ in runs.values():
            run(2)   # warm-up (plans, packed weights)
        first = {k: run(8)[1] for k, (run, _) in runs.items()}
        same = first["lite"] == first["torch"] == first["ort"] and \
            ("ov" not in first or first["ov"] == [f"w{t}" for t in first["lite"]])
        times = {f"{k}_{m}": [] for k in runs for m in ("ttft", "all", "enc")}
        order = list(runs)
        for r in range(args.repeat):   # the order turned by one engine each round
            for name in order[r % len(order):] + order[:r % len(order)]:
                run, enc = runs[name]
                if enc:
                    times[f"{name}_enc"].append(enc())
                times[f"{name}_ttft"].append(run(1)[0])
                times[f"{name}_all"].append(run(args.new_tokens)[0])
        med = {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
        rows.append(dict(threads=threads, same=same, **med))
        print(rows[-1], first, flush=True)
    command = f"python -m benchmarks.whisper --seconds {args.seconds:g} --new-tokens {args.new_tokens}"
    ov = any("ov_all" in r and r["ov_all"] == r["ov_all"] for r in rows)
    lines = [
        "# Whisper speech recognition: lite vs PyTorch eager, ONNX Runtime and OpenVINO GenAI",
        "",
        f"{cpu_name()}; {time.strftime('%Y-%m-%d')}. `{command}`. A Whisper-small-shaped model (its real sizes; "
        f"seeded random weights, float32), {args.seconds:g} s of 16 kHz audio (padded to 30 s), English forced, "
        f"{args.new_tokens} greedy tokens (end-of-text suppressed for all), batch 1. `call`: features, encoder and "
        "decoding; RTF = call / audio length; TTFT: the same with one token; `encoder`: the log-mel front end and "
        f"the encoder alone. Median of {args.repeat} rounds, the engines' order turned by one each round. PyTorch: "
        "transformers' WhisperFeatureExtractor and generate (SDPA). ONNX Runtime: the encoder (with the cross keys / "
        "values) and a decoder step with past keys / values in and out, exported by torch.onnx (opset 17), greedy "
        "loop in Python. "
        + (f"OV: OpenVINO GenAI {package_version('openvino-genai')}'s WhisperPipeline, float32 (INFERENCE_PRECISION_HINT "
           "f32), the checkpoint exported by optimum-intel 2.2 (fp32), its own front end; no separate encoder call. "
           if ov else "")
        + "`call` ratios: lite's time / the peer's. `same`: the first 8 tokens equal across all.",
        "",
        "| threads | call s lite | PyTorch | ORT | OV | RTF lite | RTF best peer | lite / best peer | "
        "TTFT s lite | PyTorch | ORT | OV | lite / best peer | encoder s lite | PyTorch | ORT | same |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def cell(r, key):
        return f"{r[key]:.2f}" if key in r and r[key] == r[key] else "n/a"
    for r in rows:
        peers = [k for k in ("torch", "ort", "ov") if f"{k}_all" in r and r[f"{k}_all"] == r[f"{k}_all"]]
        best = min(r[f"{k}_all"] for k in peers)
        best_ttft = min(r[f"{k}_ttft"] for k in peers)
        lines.append(f"| {r['threads']} | {r['lite_all']:.2f} | {cell(r, 'torch_all')} | {cell(r, 'ort_all')} | "
                     f"{cell(r, 'ov_all')} | {r['lite_all'] / args.seconds:.3f} | {best / args.seconds:.3f} | "
                     f"{r['lite_all'] / best:.2f} | {r['lite_ttft']:.2f} | {cell(r, 'torch_ttft')} | "
                     f"{cell(r, 'ort_ttft')} | {cell(r, 'ov_ttft')} | {r['lite_ttft'] / best_ttft:.2f} | "
                     f"{r['lite_enc']:.2f} | {cell(r, 'torch_enc')} | {cell(r, 'ort_enc')} | "
                     f"{'yes' if r['same'] else 'no'} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
