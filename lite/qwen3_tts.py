"""Qwen3-TTS (12 Hz) speech synthesis on the runtime: text -> 24 kHz waveform.

    tts = Qwen3TTS.from_pretrained("path/to/Qwen3-TTS-12Hz-0.6B-CustomVoice")   # converted on first use
    wave, rate = tts.speak("Hello there.", language="english", speaker="vivian")

As the project's generate: the prompt is one row per position, text and codec tracks summed ("dual track"): the
role tokens' text projections; the codec prefix (think / nothink, the language id unless "auto" (a dialect speaker's
dialect for Chinese), the speaker's codec embedding, pad, bos) under tts_pad ... tts_bos; then the first text token
over codec bos (streaming mode: the rest of the text is fed one token a frame, then tts_eos, then tts_pad) or the
whole text and tts_eos over codec pad, then tts_pad over codec bos (non-streaming). An optional instruction (VoiceDesign's
voice description, CustomVoice's style; not for the 0.6B CustomVoice) is put first as its text projection. Each
frame the talker step graph (Qwen3 layers, paged KV cache) gives its hidden state; codebook 0 is chosen from
codec_head's logits (repetition penalty over earlier frames, the special codec ids suppressed except eos, eos
blocked for the first 2 frames, then greedy or temperature / top-k / top-p sampling); the code predictor step graph
(5 Qwen3 layers, a fresh cache each frame) takes [talker hidden, codebook 0's embedding] and fills codebooks 1..15
one at a time through its heads; the frame's next talker input is the sum of all 16 codebook embeddings plus the
next text row. Until codebook 0 is eos; the codes go through the 12 Hz codec decoder graph (speech_tokenizer/) in
300-frame chunks with 25 frames of left context."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .checkpoint_graph import checkpoint_graph
from .lock_step import LockStepDecoder

SAMPLE_RATE = 24000


class _Tensors:
    """The numpy side's tensors of the checkpoint (the text embedding rows read as needed)."""

    def __init__(self, model_dir: str):
        from safetensors import safe_open
        files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"'{model_dir}' has no *.safetensors (a Qwen3-TTS checkpoint)")
        self.handles = [safe_open(os.path.join(model_dir, f), framework="numpy") for f in files]
        self.where = {k: h for h in self.handles for k in h.keys()}

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.where:
            raise KeyError(f"the checkpoint has no tensor '{name}'")
        return np.asarray(self.where[name].get_tensor(name), np.float32)

    def rows(self, name: str, ids) -> np.ndarray:
        sliced = self.where[name].get_slice(name)
        return np.stack([np.asarray(sliced[int(i):int(i) + 1], np.float32)[0] for i in ids])


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class Qwen3TTS:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        from .llm.tokenizer import ChatTokenizer
        self.model_dir = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") != "qwen3_tts":
            raise ValueError(f"not a Qwen3-TTS model (model_type {self.config.get('model_type')!r})")
        tokenizer_dir = os.path.join(model_dir, "speech_tokenizer")
        if not os.path.isdir(tokenizer_dir):
            raise FileNotFoundError(f"'{model_dir}' has no speech_tokenizer/ (the 12 Hz codec)")
        self.kind = self.config.get("tts_model_type", "custom_voice")
        self.weight_format, self.threads = weight_format, threads
        self._speaker_encoder = None
        self.talker_cfg = dict(self.config["talker_config"])
        self.groups = int(self.talker_cfg.get("num_code_groups", 16))
        self.tokenizer = ChatTokenizer(model_dir)
        w = self.w = _Tensors(model_dir)
        self.codec_table = w["talker.model.codec_embedding.weight"]                          # [codec vocab, H]
        self.codec_head = w["talker.codec_head.weight"]
        p = "talker.code_predictor."
        self.cp_tables = [w[f"{p}model.codec_embedding.{i}.weight"] for i in range(self.groups - 1)]
        self.cp_heads = [w[f"{p}lm_head.{i}.weight"] for i in range(self.groups - 1)]
        self.cp_proj = (w[p + "small_to_mtp_projection.weight"], w[p + "small_to_mtp_projection.bias"]) \
            if p + "small_to_mtp_projection.weight" in w else None
        fc = "talker.text_projection."
        self.text_mlp = [(w[f"{fc}linear_fc{i}.weight"], w[f"{fc}linear_fc{i}.bias"] if f"{fc}linear_fc{i}.bias" in w
                          else None) for i in (1, 2)]
        self.talker = LockStepDecoder(checkpoint_graph(model_dir, "talker", "talker", weight_format, threads), 1, 512)
        self.predictor = LockStepDecoder(checkpoint_graph(model_dir, "code_predictor", "code_predictor",
                                                          weight_format, threads), 1, self.groups + 1)
        self.codec = checkpoint_graph(tokenizer_dir, "codec_decoder", "codec_decoder", weight_format, threads)
        with open(os.path.join(tokenizer_dir, "config.json")) as f:
            self.upsample = int(json.load(f).get("decode_upsample_rate", 1920))

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, threads: int = 1) -> "Qwen3TTS":
        from .checkpoint_graph import converted_weight_format
        return cls(model_dir, weight_format or converted_weight_format(model_dir), threads)

    @property
    def speakers(self) -> list[str]:
        """A CustomVoice model's preset speakers (none for VoiceDesign)."""
        return sorted((self.talker_cfg.get("spk_id") or {}).keys())

    # -- embeddings ---------------------------------------------------------------------------------------------------
    def text_rows(self, ids) -> np.ndarray:
        """text_projection(text_embedding(ids)): [len(ids), H]."""
        x = self.w.rows("talker.model.text_embedding.weight", ids)
        (w1, b1), (w2, b2) = self.text_mlp
        h = _silu(x @ w1.T + (0 if b1 is None else b1))
        return (h @ w2.T + (0 if b2 is None else b2)).astype(np.float32)

    def codec_rows(self, ids) -> np.ndarray:
        return self.codec_table[np.asarray(ids, np.int64)]

    def _language_id(self, language: str, speaker: str | None) -> int | None:
        ids = {k.lower(): int(v) for k, v in (self.talker_cfg.get("codec_language_id") or {}).items()}
        lang = (language or "auto").lower()
        language_id = None if lang == "auto" else ids.get(lang)
        if lang != "auto" and language_id is None:
            raise ValueError(f"language {language!r} is not one of this model's (auto, {', '.join(sorted(ids))})")
        dialect = (self.talker_cfg.get("spk_is_dialect") or {}).get((speaker or "").lower(), False)
        if lang in ("chinese", "auto") and speaker and dialect:
            language_id = ids[str(dialect).lower()]
        return language_id

    def speaker_embedding(self, audio) -> np.ndarray:
        """A Base model's x-vector [H] of a reference voice (a WAV path or bytes, samples at 24 kHz, or (samples,
        rate)): the ECAPA-TDNN speaker encoder graph on its log mel magnitudes (1024-point frames every 256 samples,
        128 Slaney mels up to 12 kHz), as the project's extract_speaker_embedding."""
        from .audio import load_audio, log_mel_magnitude
        if self.kind != "base":
            raise ValueError("this Qwen3-TTS model has no speaker encoder (voice cloning is the Base models')")
        if self._speaker_encoder is None:
            self._speaker_encoder = checkpoint_graph(self.model_dir, "speaker_encoder", "speaker_encoder",
                                                     self.weight_format, self.threads)
        mels = log_mel_magnitude(load_audio(audio, SAMPLE_RATE), SAMPLE_RATE)
        return self._speaker_encoder.predict({"mels": mels[None]})[0].get_data_to_numpy().astype(np.float32)

    def prompt(self, text: str, language: str = "auto", speaker: str | None = None, instruct: str | None = None,
               non_streaming: bool = False,
               speaker_embedding: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt rows [L, H], the text rows fed one a frame after it [N, H], tts_pad's row [H]).
        `speaker_embedding`: a Base model's x-vector of a reference voice (speaker_embedding()) in the speaker
        slot."""
        cfg, tc = self.config, self.talker_cfg
        ids = self.tokenizer.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n",
                                    add_special_tokens=False)
        if len(ids) < 9:
            raise ValueError("the text is empty")
        bos, eos, pad = self.text_rows([cfg["tts_bos_token_id"], cfg["tts_eos_token_id"], cfg["tts_pad_token_id"]])
        rows = []
        if instruct:
            if self.kind == "custom_voice" and cfg.get("tts_model_size") == "0b6":
                raise ValueError("the 0.6B CustomVoice model takes no instruction")
            rows.append(self.text_rows(self.tokenizer.encode(f"<|im_start|>user\n{instruct}<|im_end|>\n",
                                                             add_special_tokens=False)))
        elif self.kind == "voice_design":
            raise ValueError("VoiceDesign needs an instruction (the voice's description)")
        language_id = self._language_id(language, speaker)
        if self.kind == "base" and speaker_embedding is None:
            raise ValueError("a Base model speaks in a reference voice: give reference_audio")
        prefix = [tc["codec_nothink_id"], tc["codec_think_bos_id"], tc["codec_think_eos_id"]] if language_id is None \
            else [tc["codec_think_id"], tc["codec_think_bos_id"], language_id, tc["codec_think_eos_id"]]
        codec = [self.codec_rows(prefix)]
        if speaker_embedding is not None:
            if speaker:
                raise ValueError("a preset speaker or a reference voice's embedding, not both")
            codec.append(np.asarray(speaker_embedding, np.float32).reshape(1, -1))
        elif speaker:
            speakers = {k.lower(): v for k, v in (tc.get("spk_id") or {}).items()}
            if speaker.lower() not in speakers:
                raise ValueError(f"speaker {speaker!r} is not one of this model's ({', '.join(sorted(speakers))})")
            codec.append(self.codec_rows(np.atleast_1d(speakers[speaker.lower()])[:1]))
        codec.append(self.codec_rows([tc["codec_pad_id"], tc["codec_bos_id"]]))
        codec = np.concatenate(codec)
        rows.append(self.text_rows(ids[:3]))                                                   # <|im_start|>assistant\n
        rows.append(np.concatenate([np.repeat(pad[None], len(codec) - 2, 0), bos[None]]) + codec[:-1])
        body = ids[3:-5]
        if non_streaming:
            text_rows = np.concatenate([self.text_rows(body), eos[None]])
            rows.append(text_rows + self.codec_rows([tc["codec_pad_id"]])[0])
            rows.append((pad + codec[-1])[None])
            trailing = pad[None]
        else:
            rows.append(self.text_rows(body[:1]) + codec[-1:])
            rest = body[1:]
            trailing = np.concatenate([self.text_rows(rest), eos[None]]) if rest else eos[None]
        return np.concatenate(rows).astype(np.float32), trailing.astype(np.float32), pad.astype(np.float32)

    # -- decoding -----------------------------------------------------------------------------------------------------
    def _talker_step(self, rows: np.ndarray, start: int) -> np.ndarray:
        n = len(rows)
        hidden = self.talker.step(np.zeros((1, n), np.int64), start, np.zeros(1, np.int64),
                                  {"embed_rows": np.arange(n, dtype=np.int64)[:, None],
                                   "embeds": np.ascontiguousarray(rows, np.float32)})
        return hidden[0]

    def _predict_codes(self, hidden: np.ndarray, c0: int, choose) -> list[int]:
        """Codebooks 1..groups-1 of one frame."""
        def proj(x):
            return x if self.cp_proj is None else x @ self.cp_proj[0].T + self.cp_proj[1]
        rows = proj(np.stack([hidden, self.codec_table[c0]]))
        codes, start = [], 0
        for j in range(self.groups - 1):
            n = len(rows)
            h = self.predictor.step(np.zeros((1, n), np.int64), start, np.zeros(1, np.int64),
                                    {"embed_rows": np.arange(n, dtype=np.int64)[:, None],
                                     "embeds": np.ascontiguousarray(rows, np.float32)})[0]
            start += n
            code = choose(h @ self.cp_heads[j].T, None)
            codes.append(code)
            rows = proj(self.cp_tables[j][code][None])
        return codes

    def generate_codes(self, text: str, language: str = "auto", speaker: str | None = None,
                       instruct: str | None = None, non_streaming: bool | None = None, max_new_tokens: int = 2048,
                       do_sample: bool = True, top_k: int = 50, top_p: float = 1.0, temperature: float = 0.9,
                       repetition_penalty: float = 1.05, subtalker_dosample: bool = True, subtalker_top_k: int = 50,
                       subtalker_top_p: float = 1.0, subtalker_temperature: float = 0.9, seed: int | None = None,
                       reference_audio=None, reference_text: str | None = None,
                       eos_token_id: int | None = None) -> np.ndarray:
        """[frames, groups] codes (eos excluded), at most max_new_tokens frames (the project's generate, whose last
        talker step completes no frame, gives as many with max_new_tokens + 1). `reference_audio` (Base models): the
        voice to speak in, by its
        x-vector (the project's x_vector_only_mode); cloning in context from `reference_text` and the reference's
        codes needs the 12 Hz tokenizer's encoder, not built yet."""
        tc = self.talker_cfg
        if reference_text is not None:
            raise NotImplementedError("in-context voice cloning (reference_text with the reference audio's codes from "
                                      "the 12 Hz tokenizer's encoder) is not supported yet; x-vector cloning "
                                      "(reference_audio alone) is")
        if non_streaming is None:
            non_streaming = True   # the project's wrapper default for CustomVoice and VoiceDesign
        embedding = None if reference_audio is None else self.speaker_embedding(reference_audio)
        rows, trailing, pad = self.prompt(text, language, speaker, instruct, non_streaming, embedding)
        rng = np.random.default_rng(seed)
        eos = int(tc["codec_eos_token_id"] if eos_token_id is None else eos_token_id)
        vocab = int(tc["vocab_size"])
        suppressed = np.array([i for i in range(max(0, vocab - 1024), vocab) if i != int(tc["codec_eos_token_id"])],
                              np.int64)   # (as the project: the configured eos stays allowed whatever stops it)

        def sampler(sample, k, p, t):
            def choose(logits, _):
                logits = logits.astype(np.float64)
                if not sample:
                    return int(np.argmax(logits))
                logits = logits / max(t, 1e-6)
                if k and k < logits.size:
                    logits[logits < np.sort(logits)[-k]] = -np.inf
                probs = np.exp(logits - logits.max())
                probs /= probs.sum()
                if p < 1.0:
                    order = np.argsort(-probs)
                    keep = np.cumsum(probs[order]) - probs[order] < p
                    mask = np.zeros_like(probs, bool)
                    mask[order[keep]] = True
                    probs = np.where(mask, probs, 0.0)
                    probs /= probs.sum()
                return int(rng.choice(probs.size, p=probs))
            return choose
        talker_choose = sampler(do_sample, top_k, top_p, temperature)
        sub_choose = sampler(subtalker_dosample, subtalker_top_k, subtalker_top_p, subtalker_temperature)
        self.talker.ensure(len(rows) + 1)
        hidden = self._talker_step(rows, 0)
        position, frames, previous = len(rows), [], []
        for step in range(max_new_tokens):
            logits = (hidden @ self.codec_head.T).astype(np.float64)
            if repetition_penalty != 1.0 and previous:
                seen = np.unique(previous)
                logits[seen] = np.where(logits[seen] > 0, logits[seen] / repetition_penalty,
                                        logits[seen] * repetition_penalty)
            logits[suppressed] = -np.inf
            if step < 2:   # min_new_tokens 2
                logits[eos] = -np.inf
            c0 = talker_choose(logits, None)
            if c0 == eos:
                break
            previous.append(c0)
            codes = [c0] + self._predict_codes(hidden, c0, sub_choose)
            frames.append(codes)
            if step == max_new_tokens - 1:
                break
            row = self.codec_table[c0] + sum(self.cp_tables[j][codes[j + 1]] for j in range(self.groups - 1))
            row = row + (trailing[step] if step < len(trailing) else pad)
            self.talker.ensure(position + 1)
            hidden = self._talker_step(row[None].astype(np.float32), position)
            position += 1
        return np.asarray(frames, np.int64).reshape(-1, self.groups)

    def decode(self, codes: np.ndarray, chunk: int = 300, left_context: int = 25) -> np.ndarray:
        """[frames x 1920] float32 waveform of codes [frames, groups], in chunks with left context as the project
        decodes."""
        codes = np.asarray(codes, np.int64)
        out, start = [], 0
        while start < len(codes):
            end = min(start + chunk, len(codes))
            context = left_context if start - left_context > 0 else start
            wave = self.codec.predict({"codes": np.ascontiguousarray(codes[start - context:end].T)})[0]
            out.append(wave.get_data_to_numpy()[context * self.upsample:])
            start = end
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def speak(self, text: str, **options: Any) -> tuple[np.ndarray, int]:
        """(waveform float32 in [-1, 1], sampling rate)."""
        return self.decode(self.generate_codes(text, **options)), SAMPLE_RATE
