"""Whisper speech recognition on the runtime: audio -> text through an encoder graph (once per audio: encoder states
and every decoder layer's cross-attention keys and values) and a decoder step graph with the KV cache in paged blocks
(model_zoo/multimodal/whisper_graphs.py), decoding a batch of audios in lock step.

    asr = Whisper.from_pretrained("path/to/whisper-small")      # a transformers checkpoint (converted on first use)
    asr.transcribe(["a.wav", "b.wav"], language="en")           # ["...", "..."]

As WhisperForConditionalGeneration.generate does for audio up to 30 s, greedily: WhisperFeatureExtractor's log-mel
of the audio padded to 30 s; the decoder prompt <|startoftranscript|> <|language|> <|task|> <|notimestamps|> (the
language detected from the first step's language-token logits when not given, for multilingual checkpoints); the
generation config's suppress_tokens always and begin_suppress_tokens at the first generated token; until eos."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .audio import load_audio, log_mel, mel_filters
from .checkpoint_graph import checkpoint_graph, converted_weight_format
from .lock_step import LockStepDecoder


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


class Whisper:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1, block_size: int = 16,
                 max_batch: int = 8):
        from .llm.tokenizer import ChatTokenizer
        self.config = _read_json(os.path.join(model_dir, "config.json"))
        if self.config.get("model_type") != "whisper":
            raise ValueError(f"not a Whisper model (model_type {self.config.get('model_type')!r})")
        self.generation = _read_json(os.path.join(model_dir, "generation_config.json"))
        pre = _read_json(os.path.join(model_dir, "preprocessor_config.json"))
        self.tokenizer = ChatTokenizer(model_dir)
        self.mels = int(self.config.get("num_mel_bins", 80))
        self.sampling_rate = int(pre.get("sampling_rate", 16000))
        self.n_fft, self.hop = int(pre.get("n_fft", 400)), int(pre.get("hop_length", 160))
        self.frames = 2 * int(self.config.get("max_source_positions", 1500))
        self.samples = int(pre.get("n_samples", self.frames * self.hop))
        self.filters = mel_filters(self.sampling_rate, self.n_fft, self.mels, 0.0, 8000.0)
        self.max_positions = int(self.config.get("max_target_positions", 448))
        self.block_size, self.max_batch = block_size, max_batch
        self.encoder = checkpoint_graph(model_dir, "encoder", "encoder", weight_format, threads)
        self.decoder = checkpoint_graph(model_dir, "decoder", "decoder", weight_format, threads)
        self.steps = LockStepDecoder(self.decoder, max_batch, self.max_positions)
        if self.steps.block != block_size:
            raise ValueError(f"the decoder graph was built for KV blocks of {self.steps.block} tokens, not "
                             f"{block_size}")
        gen = self.generation
        self.eos = int(gen.get("eos_token_id", self.config.get("eos_token_id", 50257)))
        self.start = int(gen.get("decoder_start_token_id", self.config.get("decoder_start_token_id", 50258)))
        self.lang_to_id = {k: int(v) for k, v in (gen.get("lang_to_id") or {}).items()}
        self.task_to_id = {k: int(v) for k, v in (gen.get("task_to_id") or {}).items()}
        self.no_timestamps = gen.get("no_timestamps_token_id")
        self.multilingual = bool(gen.get("is_multilingual", bool(self.lang_to_id)))
        self.suppress = np.asarray(gen.get("suppress_tokens") or [], np.int64)
        self.begin_suppress = np.asarray(gen.get("begin_suppress_tokens") or [], np.int64)

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, threads: int = 1,
                        **kwargs) -> "Whisper":
        return cls(model_dir, weight_format or converted_weight_format(model_dir), threads, **kwargs)

    # -- front end ------------------------------------------------------------------------------------------------
    def features(self, audio) -> np.ndarray:
        """[mels, frames] log-mel of one audio (a path, WAV bytes or float samples at the model's rate), padded
        with silence (or cut) to 30 s as WhisperFeatureExtractor does."""
        x = load_audio(audio, self.sampling_rate) if not isinstance(audio, np.ndarray) else \
            np.asarray(audio, np.float32).reshape(-1)
        if x.size == 0:
            raise ValueError("empty audio")
        if not np.all(np.isfinite(x)):
            raise ValueError("audio samples must be finite (NaN or Inf found)")
        x = np.pad(x[:self.samples], (0, max(0, self.samples - x.size)))
        return log_mel(x, self.mels, self.sampling_rate, self.n_fft, self.hop, self.filters)[:, :self.frames]

    # -- decoding -------------------------------------------------------------------------------------------------
    def _language_id(self, language: str) -> int:
        code = language.strip().lower()
        for key in (f"<|{code}|>", code):
            if key in self.lang_to_id:
                return self.lang_to_id[key]
        from .qwen3_asr import LANGUAGES   # ISO code -> name
        iso = {v.lower(): k for k, v in LANGUAGES.items()}.get(code)
        if iso and f"<|{iso}|>" in self.lang_to_id:
            return self.lang_to_id[f"<|{iso}|>"]
        raise ValueError(f"language {language!r} is not one of this model's ({', '.join(sorted(self.lang_to_id))})")

    def generate_ids(self, audios: Sequence, language: str | None = None, task: str | None = None,
                     max_new_tokens: int | None = None) -> list[list[int]]:
        """Each audio's generated token ids (the decoder prompt not included; eos included when reached)."""
        if isinstance(audios, (str, bytes, np.ndarray)):
            raise TypeError("audios is a list (of paths, WAV bytes or sample arrays)")
        out: list[list[int]] = []
        for i in range(0, len(audios), self.max_batch):
            out += self._generate_batch(list(audios[i:i + self.max_batch]), language, task, max_new_tokens)
        return out

    def _generate_batch(self, audios: list, language: str | None, task: str | None,
                        max_new_tokens: int | None) -> list[list[int]]:
        B = len(audios)
        features = np.stack([self.features(a) for a in audios])
        enc = {o.name: t.get_data_to_numpy() for o, t in zip(self.encoder.get_outputs(),
                                                             self.encoder.predict({"input_features": features}))}
        cross_all = {k: np.ascontiguousarray(v) for k, v in enc.items() if k.startswith("cross_")}
        rows = np.arange(B)
        prompt = [[self.start] for _ in range(B)]
        done_prefix = 0   # prompt tokens already in the cache
        if self.multilingual and self.lang_to_id:
            if language is None:   # detected: the most likely language token after <|startoftranscript|>
                logits = self.steps.step(np.array(prompt, np.int64), 0, rows, cross_all)
                done_prefix = 1
                lang_ids = np.array(sorted(self.lang_to_id.values()), np.int64)
                langs = lang_ids[np.argmax(logits[:, lang_ids], axis=1)]
            else:
                langs = np.full(B, self._language_id(language), np.int64)
            # the task token: the one asked for (or the config's); with a given language transcribe by default;
            # a detected language alone gets none (as generate builds its init tokens)
            task = task or self.generation.get("task") or ("transcribe" if language is not None else None)
            if task is not None and task not in self.task_to_id:
                raise ValueError(f"task must be one of {', '.join(self.task_to_id)}, not {task!r}")
            for p, lang in zip(prompt, langs):
                p += [int(lang)] + ([self.task_to_id[task]] if task else [])
        elif language is not None or task is not None:
            raise ValueError("this Whisper checkpoint is English-only: it takes no language or task")
        if self.no_timestamps is not None:
            for p in prompt:
                p.append(int(self.no_timestamps))
        prompt_len = len(prompt[0])
        limit = self.max_positions - prompt_len
        new = limit if max_new_tokens is None else min(max_new_tokens, limit)
        generated: list[list[int]] = [[] for _ in range(B)]
        active = rows.copy()
        tokens = np.array(prompt, np.int64)[:, done_prefix:]
        start = done_prefix
        cross = cross_all
        for step in range(new):
            logits = self.steps.step(tokens, start, active, cross)
            if self.suppress.size:
                logits[:, self.suppress] = -np.inf
            if step == 0 and self.begin_suppress.size:
                logits[:, self.begin_suppress] = -np.inf
            picked = np.argmax(logits, axis=1)
            start += tokens.shape[1]
            keep = []
            for j, (slot, token) in enumerate(zip(active, picked)):
                generated[slot].append(int(token))
                if token != self.eos:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):   # finished sequences leave the batch
                active = active[keep]
                cross = {k: np.ascontiguousarray(v[active]) for k, v in cross_all.items()}
            tokens = picked[keep][:, None].astype(np.int64)
        return generated

    def transcribe(self, audios: Sequence, language: str | None = None, task: str | None = None,
                   max_new_tokens: int | None = None) -> list[str]:
        return [self.tokenizer.decode([t for t in ids if t != self.eos]).strip()
                for ids in self.generate_ids(audios, language, task, max_new_tokens)]
