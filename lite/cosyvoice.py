"""CosyVoice 2 / 3 speech synthesis on the runtime: text -> 24 kHz waveform, in the voice of a prompt recording.

    tts = CosyVoice.from_pretrained("path/to/CosyVoice2-0.5B")      # a directory model_zoo convert wrote
    wave, rate = tts.zero_shot("Hello there.", "the prompt's transcript", "prompt.wav")

As the original's CosyVoice2 / CosyVoice3 (cosyvoice.cli), non-streaming, with its text front end off
(text_frontend=False: the text is spoken as given, neither normalised nor split into sentences):
- the prompt recording gives 80-bin log mel frames at 24 kHz (1920-point frames every 480 samples: the flow's
  prompt), 25 Hz speech tokens (the speech tokenizer graph on 128-bin Whisper log mel at 16 kHz) and a 192-dim
  speaker embedding (the CAM++ graph on mean-removed 80-bin Kaldi fbank at 16 kHz); tokens and frames are cut to a
  common length (two frames a token);
- the text-speech LM (the llm step graph: Qwen2 layers, paged KV cache) reads [sos, prompt text + text, task_id,
  prompt speech tokens] and continues the speech tokens, repetition-aware sampling (nucleus top-p 0.8 / top-k 25;
  a pick repeated in the last 10 tokens is redrawn from the full distribution) or greedy; at least 2 and at most 20
  tokens per text token; any special id (from speech_token_size on: 3 in CosyVoice 2, 200 in 3) stops it;
  CosyVoice 3's sos / task_id are rows of its speech table, CosyVoice 2's of llm_embedding;
- the flow (lite.cosyvoice_flow) turns prompt + new tokens into mel frames (the prompt's frames as the condition,
  10 Euler steps with classifier-free guidance; CosyVoice 3's estimator a DiT) and HiFT (lite.cosyvoice_vocoder;
  CosyVoice 3's causal) renders them.
Modes: zero_shot (prompt transcript and recording), cross_lingual (the recording only: no prompt in the LM) and
instruct (an instruction such as "speak happily<|endofprompt|>" in place of the transcript, no prompt speech
tokens in the LM)."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .checkpoint_graph import load_graph
from .lock_step import LockStepDecoder

PROMPT_RATE, FRONT_END_RATE = 24000, 16000


def ras_choose(logp: np.ndarray, decoded: list[int], rng: np.random.Generator, top_p: float = 0.8,
               top_k: int = 25, win_size: int = 10, tau_r: float = 0.1) -> int:
    """Repetition-aware sampling (VALL-E 2, the original's ras_sampling): from the most probable ids, in order, while
    their cumulative probability is below top_p and fewer than top_k are taken, one in proportion to its probability;
    if that id already occurs win_size x tau_r times in the last win_size tokens, one from the whole distribution."""
    probs = np.exp(logp.astype(np.float64) - logp.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[order])
    taken = min(int(np.searchsorted(cumulative, top_p, side="left")) + 1, top_k, len(order))
    head = probs[order[:taken]]
    pick = int(order[rng.choice(taken, p=head / head.sum())])
    if sum(1 for t in decoded[-win_size:] if t == pick) >= win_size * tau_r:
        pick = int(rng.choice(len(probs), p=probs))
    return pick


class CosyVoice:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        from tokenizers import Tokenizer

        from .cosyvoice_flow import CosyVoiceFlow
        from .cosyvoice_vocoder import CosyVoiceVocoder
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") not in ("cosyvoice2", "cosyvoice3"):
            raise ValueError(f"'{model_dir}' is not a converted CosyVoice 2 / 3 model (model_type "
                             f"{self.config.get('model_type')!r}); convert its release with python -m model_zoo "
                             "convert")
        self.model_dir, self.threads = model_dir, threads
        suffix = "" if weight_format == "float32" else f"_{weight_format}"

        def graph(stem: str) -> str:
            path = os.path.join(model_dir, f"{stem}{suffix}.ms")
            if not os.path.isfile(path):
                raise FileNotFoundError(f"'{model_dir}' has no {stem}{suffix}.ms (converted with another weight "
                                        "format?)")
            return path
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        llm = self.config["llm"]
        self.speech_token_size = int(llm["speech_token_size"])
        self.sampling = {k: llm["sampling"][k] for k in ("top_p", "top_k", "win_size", "tau_r")
                         if k in (llm.get("sampling") or {})}
        from safetensors.numpy import load_file
        rows = load_file(os.path.join(model_dir, "llm_rows.safetensors"))
        self.text_table = rows["text_embedding"]   # [text vocab, H]
        # CosyVoice 2: sos and task_id rows of llm_embedding; CosyVoice 3: ids of the step graph's speech table
        self.llm_rows = rows.get("llm_embedding")
        self.sos_task = None if self.llm_rows is not None else (int(llm["sos_id"]), int(llm["task_id"]))
        self.llm = LockStepDecoder(load_graph(graph("llm"), threads), 1, 256)
        self.flow = CosyVoiceFlow(graph("flow_encoder"), graph("flow_estimator"),
                                  np.load(os.path.join(model_dir, "flow_noise.npy")), self.config["flow"], threads)
        self.vocoder = CosyVoiceVocoder(graph("hift"), self.config["hift"], threads)
        self.sample_rate = int(self.config.get("sample_rate", PROMPT_RATE))
        self._front: dict[str, Any] = {}

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, threads: int = 1) -> "CosyVoice":
        from .checkpoint_graph import converted_weight_format
        return cls(model_dir, weight_format or converted_weight_format(model_dir), threads)

    # -- text and prompt audio ----------------------------------------------------------------------------------------
    def text_ids(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        return list(self.tokenizer.encode(text).ids)

    def _front_graph(self, stem: str):
        if stem not in self._front:
            path = os.path.join(self.model_dir, f"{stem}.ms")
            if not os.path.isfile(path):
                raise FileNotFoundError(f"'{self.model_dir}' has no {stem}.ms (the release's "
                                        f"{'speech_tokenizer_v2' if stem == 'speech_tokenizer' else 'campplus'}.onnx "
                                        "was not there when it was converted)")
            self._front[stem] = load_graph(path, self.threads)
        return self._front[stem]

    def prompt_features(self, audio) -> dict[str, np.ndarray]:
        """A prompt recording's flow frames [T, 80], speech tokens [T / 2] and speaker embedding [192], as the
        original's frontend_zero_shot (tokens and frames cut to two frames a token)."""
        from .audio import kaldi_fbank, load_audio, log_mel, log_mel_magnitude
        feat_cfg = self.config.get("feat_extractor") or {}
        wave24 = load_audio(audio, self.sample_rate)
        feat = log_mel_magnitude(wave24, self.sample_rate, int(feat_cfg.get("n_fft", 1920)),
                                 int(feat_cfg.get("hop_size", 480)), int(feat_cfg.get("num_mels", 80)),
                                 float(feat_cfg.get("fmin", 0) or 0), feat_cfg.get("fmax", 8000))
        wave16 = load_audio(audio, FRONT_END_RATE)
        if wave16.size > 30 * FRONT_END_RATE:
            raise ValueError("a prompt recording longer than 30 s is not supported (as the original's tokenizer)")
        mel = log_mel(wave16, 128, FRONT_END_RATE)
        tokenizer = self._front_graph("speech_tokenizer")
        names = [i.name for i in tokenizer.get_inputs()]
        tokens = tokenizer.predict({names[0]: mel[None], names[1]: np.array([mel.shape[1]], np.int32)})[0]
        tokens = tokens.get_data_to_numpy().reshape(-1).astype(np.int64)
        fbank = kaldi_fbank(wave16, 80, FRONT_END_RATE)
        fbank = fbank - fbank.mean(axis=0, keepdims=True)
        speaker = self._front_graph("speaker_encoder")
        embedding = speaker.predict({speaker.get_inputs()[0].name: fbank[None].astype(np.float32)})[0]
        n = min(len(feat) // 2, len(tokens))
        return {"feat": feat[:2 * n], "tokens": tokens[:n],
                "embedding": embedding.get_data_to_numpy().reshape(-1).astype(np.float32)}

    # -- the text-speech LM -------------------------------------------------------------------------------------------
    def generate_tokens(self, text_ids, prompt_text_ids=(), prompt_tokens=(), greedy: bool = False,
                        seed: int | None = None, max_token_text_ratio: float = 20,
                        min_token_text_ratio: float = 2) -> list[int]:
        """Speech tokens of text_ids after the prompt (the original's Qwen2LM.inference)."""
        text_ids = [int(i) for i in text_ids]
        ids = [int(i) for i in prompt_text_ids] + text_ids
        prompt_tokens = np.asarray(prompt_tokens, np.int64).reshape(-1)
        if not text_ids:
            raise ValueError("nothing to speak: the text has no tokens")
        if ids and (min(ids) < 0 or max(ids) >= len(self.text_table)):
            raise ValueError(f"text token ids must be in [0, {len(self.text_table)})")
        if prompt_tokens.size and (prompt_tokens.min() < 0 or prompt_tokens.max() >= self.speech_token_size):
            raise ValueError(f"prompt speech tokens must be in [0, {self.speech_token_size})")
        rows, tokens, embed_rows = self._prompt(ids, prompt_tokens)
        min_len, max_len = int(len(text_ids) * min_token_text_ratio), int(len(text_ids) * max_token_text_ratio)
        rng = np.random.default_rng(seed)
        self.llm.ensure(tokens.shape[1] + max_len)
        logits = self.llm.step(tokens, 0, np.zeros(1, np.int64), {"embed_rows": embed_rows, "embeds": rows})[0]
        position, decoded = tokens.shape[1], []
        no_rows = {"embed_rows": np.zeros((0, 1), np.int64), "embeds": np.zeros((0, rows.shape[1]), np.float32)}
        for i in range(max_len):
            logp = logits.astype(np.float64)
            logp = logp - logp.max() - np.log(np.exp(logp - logp.max()).sum())
            pick = self._choose(logp, decoded, rng, greedy, ignore_eos=i < min_len)
            if pick >= self.speech_token_size:
                break
            decoded.append(pick)
            logits = self.llm.step(np.array([[pick]], np.int64), position, np.zeros(1, np.int64), no_rows)[0]
            position += 1
        return decoded

    def _prompt(self, text_ids: list[int], prompt_tokens: np.ndarray):
        """The LM's prompt [sos, text embeddings, task_id, prompt speech tokens] as the step's token ids [1, n] and
        the rows that replace some of their embeddings: (rows [k, H], ids, positions [k, 1])."""
        text = self.text_table[text_ids].astype(np.float32)
        if self.sos_task is None:   # CosyVoice 2: sos / task_id are llm_embedding's rows
            rows = np.concatenate([self.llm_rows[:1], text, self.llm_rows[1:2]]).astype(np.float32)
            ids = np.concatenate([np.zeros(len(rows), np.int64), prompt_tokens])
            return rows, ids[None], np.arange(len(rows), dtype=np.int64)[:, None]
        sos, task = self.sos_task
        ids = np.concatenate([[sos], np.zeros(len(text), np.int64), [task], prompt_tokens]).astype(np.int64)
        return text, ids[None], np.arange(1, len(text) + 1, dtype=np.int64)[:, None]

    def _choose(self, logp: np.ndarray, decoded: list[int], rng, greedy: bool, ignore_eos: bool) -> int:
        if greedy:   # the best id, the best code while stopping is not allowed yet
            return int(np.argmax(logp[:self.speech_token_size] if ignore_eos else logp))
        for _ in range(101):   # as the original: redraw a stop id while too few tokens are out
            pick = ras_choose(logp, decoded, rng, **self.sampling)
            if not ignore_eos or pick < self.speech_token_size:
                return pick
        raise RuntimeError("sampling kept choosing a stop token before the minimum length (check the input)")

    # -- tokens to waveform -------------------------------------------------------------------------------------------
    def token2wav(self, tokens, prompt_tokens, prompt_feat, embedding, speed: float = 1.0,
                  seed: int | None = None) -> np.ndarray:
        mel = self.flow.mel(np.asarray(tokens, np.int64), np.asarray(prompt_tokens, np.int64),
                            np.asarray(prompt_feat, np.float32), np.asarray(embedding, np.float32))
        if speed != 1.0:   # as the original: linear interpolation of the frames (align_corners=False)
            if speed <= 0:
                raise ValueError("speed must be positive")
            frames = max(1, int(mel.shape[1] / speed))
            src = np.clip((np.arange(frames) + 0.5) * mel.shape[1] / frames - 0.5, 0, mel.shape[1] - 1)
            lo = np.floor(src).astype(np.int64)
            hi, frac = np.minimum(lo + 1, mel.shape[1] - 1), (src - lo).astype(np.float32)
            mel = mel[:, lo] * (1 - frac) + mel[:, hi] * frac
        return self.vocoder.waveform(mel.astype(np.float32), np.random.default_rng(seed))

    # -- modes ---------------------------------------------------------------------------------------------------------
    def zero_shot(self, text: str, prompt_text: str, prompt_audio, greedy: bool = False, seed: int | None = None,
                  speed: float = 1.0) -> tuple[np.ndarray, int]:
        """Speak `text` in the voice of `prompt_audio` (a WAV path or bytes, or (samples, rate)) whose words are
        `prompt_text`."""
        p = self.prompt_features(prompt_audio)
        tokens = self.generate_tokens(self.text_ids(text), self.text_ids(prompt_text), p["tokens"], greedy, seed)
        return self.token2wav(tokens, p["tokens"], p["feat"], p["embedding"], speed, seed), self.sample_rate

    def cross_lingual(self, text: str, prompt_audio, greedy: bool = False, seed: int | None = None,
                      speed: float = 1.0) -> tuple[np.ndarray, int]:
        """The voice of `prompt_audio` without its transcript (the LM gets no prompt; the flow does)."""
        p = self.prompt_features(prompt_audio)
        tokens = self.generate_tokens(self.text_ids(text), (), (), greedy, seed)
        return self.token2wav(tokens, p["tokens"], p["feat"], p["embedding"], speed, seed), self.sample_rate

    def instruct(self, text: str, instruct_text: str, prompt_audio, greedy: bool = False, seed: int | None = None,
                 speed: float = 1.0) -> tuple[np.ndarray, int]:
        """`instruct_text` (the original's instruct2: e.g. "Speak happily.", <|endofprompt|> appended when
        missing) in place of the transcript; the prompt's speech tokens only in the flow."""
        if "<|endofprompt|>" not in instruct_text:
            instruct_text = instruct_text + "<|endofprompt|>"
        p = self.prompt_features(prompt_audio)
        tokens = self.generate_tokens(self.text_ids(text), self.text_ids(instruct_text), (), greedy, seed)
        return self.token2wav(tokens, p["tokens"], p["feat"], p["embedding"], speed, seed), self.sample_rate

    speakers: list[str] = []   # no preset voices: every voice comes from a prompt recording

    def speak(self, text: str, reference_audio=None, reference_text: str | None = None, instruct: str | None = None,
              seed: int | None = None, speed: float = 1.0, **_: Any) -> tuple[np.ndarray, int]:
        """The server's and model_zoo's entry: zero-shot with a transcript, instruct with an instruction, else
        cross-lingual; a prompt recording is required."""
        if reference_audio is None:
            raise ValueError("CosyVoice speaks in the voice of a prompt recording: give reference audio")
        if instruct:
            return self.instruct(text, instruct, reference_audio, seed=seed, speed=speed)
        if reference_text:
            return self.zero_shot(text, reference_text, reference_audio, seed=seed, speed=speed)
        return self.cross_lingual(text, reference_audio, seed=seed, speed=speed)


CosyVoice2 = CosyVoice3 = CosyVoice   # the original's class names; one pipeline runs both versions
