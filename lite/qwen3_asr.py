"""Qwen3-ASR on the runtime: speech -> (language, transcript).

    asr = Qwen3ASR.from_pretrained("path/to/Qwen3-ASR-0.6B-hf")      # a transformers-layout checkpoint, or converted
    asr.transcribe(["speech.wav"])                                      # [{"language": "English", "text": "..."}]
    asr.transcribe([(samples, 44100)], language="English")             # forced language; any rate is resampled

Each audio becomes Qwen3ASRFeatureExtractor's 128-bin log-mel frames (lite.audio; clips under min_length samples
zero-padded, the frames padded to whole 2 x n_window chunks), the audio graph
(model_zoo/multimodal/qwen3_asr_audio_graph.py) turns them into rows for the language model, and the chat prompt (the
checkpoint's template: an optional system context, the user's audio part, the assistant turn continued from "language
<Name><asr_text>" when the language is forced, as transformers' apply_transcription_request builds it) has its audio
placeholder repeated once per row. The step graph (Qwen3 with image-style rows at the placeholders) decodes greedily in
one continuous batch; the reply "language <Name><asr_text><text>" is split into the language and the transcript."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .audio import load_audio, log_mel, mel_filters
from .llm.multimodal import PromptEmbeddings
from .qwen2_vl_image import block_diagonal

# The languages Qwen3-ASR names in its replies, by ISO 639 code (the OpenAI API's `language` is a code).
LANGUAGES = {"zh": "Chinese", "en": "English", "yue": "Cantonese", "ar": "Arabic", "de": "German", "fr": "French",
             "es": "Spanish", "pt": "Portuguese", "id": "Indonesian", "it": "Italian", "ko": "Korean", "ru": "Russian",
             "th": "Thai", "vi": "Vietnamese", "ja": "Japanese", "tr": "Turkish", "hi": "Hindi", "ms": "Malay",
             "nl": "Dutch", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "pl": "Polish", "cs": "Czech",
             "fil": "Filipino", "fa": "Persian", "el": "Greek", "hu": "Hungarian", "mk": "Macedonian",
             "ro": "Romanian"}
MARKER = "<asr_text>"
CONTINUE = "LITE_CONTINUE_FINAL_MESSAGE"   # marks where the continued assistant turn stops


def post_cnn_steps(frames: np.ndarray) -> np.ndarray:
    """Time steps after the encoder's three (k=3, s=2, p=1) convolutions; zero stays zero."""
    steps = np.asarray(frames, np.int64)
    for _ in range(3):
        steps = np.where(steps > 0, (steps - 1) // 2 + 1, 0)
    return steps


def encoder_inputs(features: np.ndarray, valid_frames: int, n_window: int = 50,
                   n_window_infer: int = 800) -> dict[str, np.ndarray]:
    """The audio graph's inputs for one clip's [mel, frames] features (frames a multiple of 2 n_window, the first
    `valid_frames` real): the chunks, the valid time steps of each, and the attention windows (as transformers'
    Qwen3ASREncoder cuts them: n_window_infer frames' worth of the longest chunk's steps, the rest in the last)."""
    mel, frames = features.shape
    chunk = 2 * n_window
    if frames % chunk:
        raise ValueError(f"{frames} feature frames are not whole chunks of {chunk}")
    chunks = frames // chunk
    chunked = features.reshape(mel, chunks, chunk).transpose(1, 0, 2)[:, None]
    lengths = np.clip(valid_frames - chunk * np.arange(chunks), 0, chunk)
    per_chunk = post_cnn_steps(lengths)
    steps = int(post_cnn_steps(np.array([chunk]))[0])
    valid = np.concatenate([i * steps + np.arange(n) for i, n in enumerate(per_chunk)]).astype(np.int64)
    window = int(per_chunk.max()) * (n_window_infer // chunk)
    total = valid.size
    windows = [window] * (total // window) + ([total % window] if total % window else [])
    return {"input_features": np.ascontiguousarray(chunked, np.float32), "valid_steps": valid,
            "window_mask": block_diagonal(windows)}


def parse_reply(text: str, forced_language: str | None = None) -> dict:
    """{"language", "text"} of a reply "language <Name><asr_text><transcript>" (the language None when the model
    heard no speech); a forced language's reply is the transcript alone."""
    text = text.strip()
    if forced_language is not None and MARKER not in text:
        return {"language": LANGUAGES.get(forced_language.lower(), forced_language), "text": text}
    if MARKER not in text:
        return {"language": None, "text": text}
    prefix, transcript = text.split(MARKER, 1)
    language = None
    for line in prefix.strip().splitlines():
        line = line.strip()
        if line:
            language = line[len("language "):].strip() if line.lower().startswith("language ") else line
            break
    if language is not None and language.lower() == "none":
        language = None
    return {"language": language or None, "text": transcript.strip()}


class Qwen3ASR:
    def __init__(self, text_engine, audio_model, config: dict, features: dict):
        self.text_engine, self.engine, self.tokenizer = text_engine, text_engine.engine, text_engine.tokenizer
        self.audio_model, self.config = audio_model, config
        audio = config.get("audio_config") or {}
        self.n_mels = int(features.get("feature_size", audio.get("num_mel_bins", 128)))
        self.sampling_rate = int(features.get("sampling_rate", 16000))
        self.n_fft, self.hop = int(features.get("n_fft", 400)), int(features.get("hop_length", 160))
        self.min_length = int(features.get("min_length", 8000))
        self.n_window = int(audio.get("n_window", features.get("n_window", 50)))
        self.n_window_infer = int(audio.get("n_window_infer", 800))
        self.filters = mel_filters(self.sampling_rate, self.n_fft, self.n_mels, 0.0, 8000.0)
        self.audio_token_id = int(config.get("audio_token_id", 151676))

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, block_size: int | None = None,
                        threads: int = 1, **engine_args) -> "Qwen3ASR":
        """`weight_format` / `block_size` None: what `python -m model_zoo convert` wrote into the directory, else
        float32 / 16."""
        from .checkpoint_graph import checkpoint_graph
        from .llm.text_engine import TextEngine
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        manifest = os.path.join(model_dir, "model_zoo.json")
        if weight_format is None:
            weight_format = "float32"
            if os.path.isfile(manifest):
                with open(manifest) as f:
                    weight_format = json.load(f).get("weight_format", "float32")
        if config.get("model_type") != "qwen3_asr":
            raise ValueError(f"not a Qwen3-ASR model (model_type {config.get('model_type')!r})")
        text_engine = TextEngine.from_pretrained(model_dir, weight_format=weight_format, block_size=block_size,
                                                 threads=threads, **engine_args)
        audio_model = checkpoint_graph(model_dir, "audio", "audio", weight_format, threads)
        features = {}
        pre = os.path.join(model_dir, "preprocessor_config.json")
        if os.path.isfile(pre):
            with open(pre) as f:
                features = json.load(f)
        return cls(text_engine, audio_model, config, features)

    def features(self, audio) -> tuple[np.ndarray, int]:
        """([mel, frames padded to whole chunks] log-mel features, the real frames) of one audio."""
        samples = load_audio(audio, self.sampling_rate)
        if samples.size < self.min_length:   # as the reference: short clips padded, counted as real frames
            samples = np.pad(samples, (0, self.min_length - samples.size))
        mel = log_mel(samples, self.n_mels, self.sampling_rate, self.n_fft, self.hop, self.filters)
        valid = mel.shape[1]
        chunk = 2 * self.n_window
        pad = (-valid) % chunk
        return np.pad(mel, ((0, 0), (0, pad))), valid

    def audio_rows(self, audio) -> np.ndarray:
        """[audio tokens, hidden] rows for the language model."""
        features, valid = self.features(audio)
        feeds = encoder_inputs(features, valid, self.n_window, self.n_window_infer)
        return self.audio_model.predict(feeds)[0].get_data_to_numpy()

    def prompt(self, context: str | None, language: str | None) -> str:
        """The chat text with one audio placeholder: transformers' apply_transcription_request conversation, the
        assistant turn continued from its prefill (continue_final_message: the text ends where the prefill does,
        found by a marker appended to it, so an empty prefill drops the turn's end too)."""
        messages = []
        if context is not None:
            messages.append({"role": "system", "content": [{"type": "text", "text": context}]})
        language = LANGUAGES.get(language.lower(), language) if language else None
        prefill = f"language {language}{MARKER}" if language is not None else ""
        messages += [{"role": "user", "content": [{"type": "audio"}]},
                     {"role": "assistant", "content": [{"type": "text", "text": prefill + CONTINUE}]}]
        rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=False)
        if CONTINUE not in rendered:
            raise ValueError("the chat template dropped the assistant's prefill")
        return rendered[:rendered.rindex(CONTINUE)]

    def transcribe(self, audios: Sequence, language: str | None = None, context: str | None = None,
                   max_new_tokens: int = 256) -> list[dict]:
        """One {"language", "text"} per audio (paths or bytes of PCM WAV files, float arrays at 16 kHz, or (array,
        rate) pairs), decoded greedily in one batch."""
        outputs = self.generate_ids(audios, language, context, max_new_tokens)
        eos = set(self.engine.eos_token_ids)
        return [parse_reply(self.tokenizer.decode([t for t in out if t not in eos]), language) for out in outputs]

    def generate_ids(self, audios: Sequence, language: str | None = None, context: str | None = None,
                     max_new_tokens: int = 256) -> list[list[int]]:
        """The reply's token ids per audio (greedy, one continuous batch)."""
        from .llm import SamplingParams
        if isinstance(audios, (str, bytes, np.ndarray, tuple)):
            raise TypeError("audios is a list (one entry per clip)")
        prompts, embeddings = zip(*(self.request(audio, language, context) for audio in audios))
        return self.engine.generate(list(prompts), SamplingParams(max_new_tokens=max_new_tokens, temperature=0),
                                    list(embeddings))

    def request(self, audio, language: str | None = None, context: str | None = None
                ) -> tuple[list[int], PromptEmbeddings]:
        """(prompt ids, the audio rows at their placeholders) of one clip, ready for the engine (the server queues
        it beside chat requests)."""
        base = self.tokenizer.encode(self.prompt(context, language), add_special_tokens=False)
        if base.count(self.audio_token_id) != 1:
            raise ValueError(f"the chat template wrote {base.count(self.audio_token_id)} audio placeholders, not 1")
        at = base.index(self.audio_token_id)
        rows = self.audio_rows(audio)
        ids = base[:at] + [self.audio_token_id] * rows.shape[0] + base[at + 1:]
        return ids, PromptEmbeddings(np.arange(at, at + rows.shape[0]), rows)
