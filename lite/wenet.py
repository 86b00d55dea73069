"""WeNet U2 / U2++ speech recognition on the runtime, full-context: audio -> text through the encoder graph (CMVN,
subsampling, Conformer, CTC log-probabilities) and, for attention rescoring, the decoder graph over the CTC n-best
(model_zoo/multimodal/wenet_graphs.py).

    asr = WeNet.from_pretrained("path/to/wenet_u2pp")   # a release directory (final.pt, train.yaml, units.txt)
    asr.transcribe(["a.wav"], mode="attention_rescoring", beam_size=10, ctc_weight=0.3, reverse_weight=0.5)

As WeNet's recognize: an 80-bin Kaldi fbank of the 16-bit samples (no dither); `ctc_greedy_search` (the frames'
argmax, repeats collapsed, blanks dropped), `ctc_prefix_beam_search` (prefixes with blank / non-blank ending
log-probabilities, the top beam_size tokens of each frame, the top beam_size prefixes kept), `attention_rescoring`
(each n-best hypothesis scored by the left-to-right decoder, mixed with the right-to-left decoder's score on it
reversed by reverse_weight, plus ctc_weight x its CTC score; eos closes both). Tokens are mapped through units.txt,
SentencePiece's "▁" turned into spaces."""
from __future__ import annotations

import json
import math
import os
from typing import Sequence

import numpy as np

from .audio import kaldi_fbank, load_audio
from .checkpoint_graph import converted_weight_format, load_graph, read_token_ids

MODES = ("ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring")
NEG_INF = -float("inf")


def _log_add(*xs: float) -> float:
    m = max(xs)
    return m if m == NEG_INF else m + math.log(sum(math.exp(x - m) for x in xs))


def ctc_prefix_beam_search(logp: np.ndarray, beam_size: int, blank: int = 0) -> list[tuple[tuple[int, ...], float]]:
    """The n-best (prefix, log-probability) of CTC log-probabilities [frames, vocab]: each prefix's probability of
    ending in blank (pb) and in a token (pnb), extended by the frame's top beam_size tokens; a repeated token extends
    only a prefix that ended in blank; the best beam_size prefixes kept each frame (ties in first-seen order)."""
    beams: list[tuple[tuple[int, ...], tuple[float, float]]] = [((), (0.0, NEG_INF))]
    for row in logp:
        nxt: dict[tuple[int, ...], list[float]] = {}
        for c in np.argsort(-row, kind="stable")[:beam_size]:
            c, p = int(c), float(row[c])
            for prefix, (pb, pnb) in beams:
                if c == blank:
                    e = nxt.setdefault(prefix, [NEG_INF, NEG_INF])
                    e[0] = _log_add(e[0], pb + p, pnb + p)
                elif prefix and c == prefix[-1]:
                    e = nxt.setdefault(prefix, [NEG_INF, NEG_INF])
                    e[1] = _log_add(e[1], pnb + p)          # the same token continued
                    e = nxt.setdefault(prefix + (c,), [NEG_INF, NEG_INF])
                    e[1] = _log_add(e[1], pb + p)           # repeated after a blank
                else:
                    e = nxt.setdefault(prefix + (c,), [NEG_INF, NEG_INF])
                    e[1] = _log_add(e[1], pb + p, pnb + p)
        ranked = sorted(nxt.items(), key=lambda kv: _log_add(*kv[1]), reverse=True)[:beam_size]
        beams = [(k, (v[0], v[1])) for k, v in ranked]
    return [(k, _log_add(*v)) for k, v in beams]


def ctc_greedy_search(logp: np.ndarray, blank: int = 0) -> list[int]:
    best = np.argmax(logp, axis=1)
    out, last = [], None
    for t in best:
        if t != last and t != blank:
            out.append(int(t))
        last = t
    return out


class WeNet:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") != "wenet_u2":
            raise ValueError(f"not a WeNet U2 model (model_type {self.config.get('model_type')!r})")
        self.input_dim, self.vocab_size = int(self.config["input_dim"]), int(self.config["output_dim"])
        self.d = int((self.config.get("encoder_conf") or {}).get("output_size", 256))
        self.sos = self.eos = self.vocab_size - 1
        self.units = read_token_ids(os.path.join(model_dir, "units.txt"), "unit list")
        suffix = "" if weight_format == "float32" else f"_{weight_format}"
        graphs = {stem: os.path.join(model_dir, f"{stem}{suffix}.ms") for stem in ("encoder", "decoder")}
        if not all(os.path.isfile(p) for p in graphs.values()):
            from model_zoo.families.wenet import convert_wenet
            convert_wenet(model_dir, model_dir, weight_format)
        self.models = {stem: load_graph(path, threads) for stem, path in graphs.items()}
        self.has_right = any(i.name == "reversed_hyps" for i in self.models["decoder"].get_inputs())
        chunk_path = os.path.join(model_dir, f"encoder_chunk{suffix}.ms")
        if os.path.isfile(chunk_path):   # a causal model's streaming encoder
            self.models["encoder_chunk"] = load_graph(chunk_path, threads)

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, threads: int = 1) -> "WeNet":
        return cls(model_dir, weight_format or converted_weight_format(model_dir), threads)

    # -- graphs ---------------------------------------------------------------------------------------------------
    def features(self, audio) -> np.ndarray:
        """[frames, input_dim] Kaldi fbank of one utterance (16-bit sample scale; the graph applies the CMVN)."""
        x = load_audio(audio, 16000) * 32768.0
        feats = kaldi_fbank(x, self.input_dim)
        if feats.shape[0] < 7:
            raise ValueError(f"audio of {x.size} samples gives {feats.shape[0]} frames; the 4x subsampling needs 7")
        return feats

    def encode(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(encoder_out [1, T', d], CTC log-probabilities [T', vocab]) of one utterance's features."""
        from model_zoo.multimodal.conformer_parts import sinusoid_table
        steps = ((feats.shape[0] - 1) // 2 - 1) // 2
        model = self.models["encoder"]
        outs = model.predict({"features": np.ascontiguousarray(feats[None], np.float32),
                              "pos_emb": sinusoid_table(steps, self.d)})
        got = {o.name: t.get_data_to_numpy() for o, t in zip(model.get_outputs(), outs)}
        return got["encoder_out"], got["ctc_log_probs"]

    def decoder_scores(self, encoder_out: np.ndarray, hyps: list[list[int]]) -> tuple[np.ndarray, np.ndarray | None]:
        """Each hypothesis's left-to-right (and right-to-left) decoder score: the sum of its tokens' and the closing
        eos's log-probabilities."""
        N, L = len(hyps), max(len(h) for h in hyps) + 1
        left = np.full((N, L), self.eos, np.int64)
        right = np.full((N, L), self.eos, np.int64)
        left[:, 0] = right[:, 0] = self.sos
        for i, h in enumerate(hyps):
            left[i, 1:len(h) + 1] = h
            right[i, 1:len(h) + 1] = h[::-1]
        feeds = {"hyps": left, "encoder_out": np.ascontiguousarray(np.repeat(encoder_out, N, axis=0))}
        if self.has_right:
            feeds["reversed_hyps"] = right
        model = self.models["decoder"]
        got = {o.name: t.get_data_to_numpy() for o, t in zip(model.get_outputs(), model.predict(feeds))}

        def score(logp: np.ndarray, tokens: np.ndarray, i: int, n: int) -> float:
            return float(logp[i, np.arange(n), tokens[:n]].sum() + logp[i, n, self.eos])

        l_scores = np.array([score(got["left_log_probs"], np.array(h, np.int64), i, len(h))
                             for i, h in enumerate(hyps)])
        if not self.has_right:
            return l_scores, None
        r_scores = np.array([score(got["right_log_probs"], np.array(h[::-1], np.int64), i, len(h))
                             for i, h in enumerate(hyps)])
        return l_scores, r_scores

    # -- decoding -------------------------------------------------------------------------------------------------
    def stream(self, decoding_chunk_size: int = 16, num_decoding_left_chunks: int = -1) -> "WeNetStream":
        """A chunk-streaming session (causal models): `accept` audio as it arrives (partial text back), `finish`."""
        return WeNetStream(self, decoding_chunk_size, num_decoding_left_chunks)

    def generate_ids(self, audios: Sequence, mode: str = "attention_rescoring", beam_size: int = 10,
                     ctc_weight: float = 0.0, reverse_weight: float = 0.0, decoding_chunk_size: int = 0,
                     num_decoding_left_chunks: int = -1) -> list[list[int]]:
        """`decoding_chunk_size` > 0: the encoder runs chunk by chunk with its caches, as streaming does (WeNet's
        simulate_streaming), each chunk seeing num_decoding_left_chunks chunks back (-1: all)."""
        if isinstance(audios, (str, bytes, np.ndarray)):
            raise TypeError("audios is a list (of paths, WAV bytes or sample arrays)")
        self._check_mode(mode, reverse_weight)
        out = []
        for audio in audios:
            if decoding_chunk_size > 0:
                session = self.stream(decoding_chunk_size, num_decoding_left_chunks)
                session.accept(load_audio(audio, 16000))
                out.append(session.finish_ids(mode, beam_size, ctc_weight, reverse_weight))
                continue
            out.append(self.decode(*self.encode(self.features(audio)), mode, beam_size, ctc_weight, reverse_weight))
        return out

    def _check_mode(self, mode: str, reverse_weight: float) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if reverse_weight > 0 and not self.has_right:
            raise ValueError("reverse_weight needs a right-to-left decoder (a bitransformer with r_num_blocks)")

    def decode(self, encoder_out: np.ndarray, logp: np.ndarray, mode: str = "attention_rescoring",
               beam_size: int = 10, ctc_weight: float = 0.0, reverse_weight: float = 0.0) -> list[int]:
        """The token ids an utterance's encoder output and CTC log-probabilities give under `mode`."""
        if mode == "ctc_greedy_search":
            return ctc_greedy_search(logp)
        nbest = ctc_prefix_beam_search(logp, beam_size)
        hyps = [list(h) for h, _ in nbest]
        if mode == "ctc_prefix_beam_search" or not any(hyps):   # (only the empty hypothesis: nothing to rescore)
            return hyps[0]
        left, right = self.decoder_scores(encoder_out, hyps)
        scores = left if right is None or reverse_weight <= 0 else (1 - reverse_weight) * left + reverse_weight * right
        scores = scores + ctc_weight * np.array([s for _, s in nbest])
        return hyps[int(np.argmax(scores))]   # the first of equal scores, as WeNet's strict >

    def detokenize(self, ids: Sequence[int]) -> str:
        return "".join(self.units.get(int(i), "") for i in ids).replace("\u2581", " ").strip()

    def transcribe(self, audios: Sequence, **decode) -> list[str]:
        return [self.detokenize(ids) for ids in self.generate_ids(audios, **decode)]


class WeNetStream:
    """Chunk-streaming recognition on a causal WeNet model, as WeNet's forward_chunk_by_chunk runs the encoder:
    windows of (chunk - 1) x 4 + 7 fbank frames every 4 x chunk frames, each through the encoder_chunk graph with the
    layers' attention keys / values (up to num_decoding_left_chunks x chunk earlier outputs; -1: all) and their causal
    convolutions' last frames carried over. `accept(samples)` takes float samples at 16 kHz as they arrive and returns
    the CTC greedy text so far; `finish()` runs the last (possibly shorter) window and decodes the whole utterance
    (attention rescoring by default)."""

    def __init__(self, asr: WeNet, chunk: int = 16, left_chunks: int = -1):
        if "encoder_chunk" not in asr.models:
            raise ValueError("this WeNet model has no streaming encoder (a causal convolution module is needed)")
        if chunk <= 0:
            raise ValueError(f"decoding_chunk_size must be positive, not {chunk}")
        from model_zoo.multimodal.conformer_parts import sinusoid_table
        self.asr, self.model = asr, asr.models["encoder_chunk"]
        self.window, self.stride = (chunk - 1) * 4 + 7, 4 * chunk
        self.required = chunk * left_chunks if left_chunks >= 0 else -1
        inputs = {i.name: i for i in self.model.get_inputs()}
        L, _, H, _, dk = inputs["key_cache"].shape
        self.layers, self.heads, self.dk = int(L), int(H), int(dk)
        self.cnn = np.zeros(tuple(int(v) for v in inputs["cnn_cache"].shape), np.float32)
        self.keys = np.zeros((self.layers, 1, self.heads, 0, self.dk), np.float32)
        self.values = self.keys.copy()
        self.samples = np.zeros(0, np.float32)
        self.cur, self.offset, self.done = 0, 0, False
        self.outputs: list[np.ndarray] = []
        self.logps: list[np.ndarray] = []
        self.table = sinusoid_table
        self.d = asr.d

    def accept(self, samples) -> str:
        """More audio (float samples at 16 kHz, in [-1, 1]); the CTC greedy text of what has been encoded."""
        if self.done:
            raise ValueError("the stream is finished")
        x = np.asarray(samples, np.float32).reshape(-1)
        if not np.all(np.isfinite(x)):
            raise ValueError("audio samples must be finite (NaN or Inf found)")
        self.samples = np.concatenate([self.samples, x * 32768.0])
        self._run(final=False)
        return self.partial()

    def partial(self) -> str:
        if not self.logps:
            return ""
        return self.asr.detokenize(ctc_greedy_search(np.concatenate(self.logps)))

    def _run(self, final: bool) -> None:
        feats = kaldi_fbank(self.samples, self.asr.input_dim)
        n = feats.shape[0]
        while self.cur + 7 <= n and (final or self.cur + self.window <= n):
            self._chunk(feats[self.cur:self.cur + self.window])
            self.cur += self.stride

    def _chunk(self, window: np.ndarray) -> None:
        T = ((window.shape[0] - 1) // 2 - 1) // 2
        cached = self.keys.shape[3]
        keys, values = self.keys, self.values
        positions = self.table(self.offset + T, self.d)[self.offset - cached:]
        bias = np.zeros((1, 1, 1, cached + T), np.float32)
        if cached == 0:   # nothing cached yet: one empty row the bias masks out
            keys = np.zeros((self.layers, 1, self.heads, 1, self.dk), np.float32)
            values = keys.copy()
            positions = np.concatenate([np.zeros((1, self.d), np.float32), positions])
            bias = np.concatenate([np.full((1, 1, 1, 1), -1e30, np.float32), bias], axis=3)
        outs = self.model.predict({"features": np.ascontiguousarray(window[None], np.float32),
                                   "pos_emb": np.ascontiguousarray(positions), "key_cache": keys,
                                   "value_cache": values, "key_bias": bias, "cnn_cache": self.cnn})
        got = {o.name: t.get_data_to_numpy() for o, t in zip(self.model.get_outputs(), outs)}
        new_keys, new_values = got["new_key_cache"], got["new_value_cache"]
        if cached == 0:
            new_keys, new_values = new_keys[:, :, :, 1:], new_values[:, :, :, 1:]
        keep = 0 if self.required < 0 else max(new_keys.shape[3] - self.required, 0)
        self.keys = np.ascontiguousarray(new_keys[:, :, :, keep:])
        self.values = np.ascontiguousarray(new_values[:, :, :, keep:])
        self.cnn = np.ascontiguousarray(got["new_cnn_cache"])
        self.outputs.append(got["encoder_out"])
        self.logps.append(got["ctc_log_probs"])
        self.offset += T

    def encoded(self) -> tuple[np.ndarray, np.ndarray]:
        """(encoder output [1, T', d], CTC log-probabilities [T', vocab]) of the chunks run so far."""
        if not self.outputs:
            raise ValueError("no chunk has been encoded (the audio is shorter than 7 fbank frames)")
        return np.concatenate(self.outputs, axis=1), np.concatenate(self.logps)

    def finish_ids(self, mode: str = "attention_rescoring", beam_size: int = 10, ctc_weight: float = 0.0,
                   reverse_weight: float = 0.0) -> list[int]:
        self.asr._check_mode(mode, reverse_weight)
        if not self.done:
            self._run(final=True)
            self.done = True
        return self.asr.decode(*self.encoded(), mode, beam_size, ctc_weight, reverse_weight)

    def finish(self, **decode) -> str:
        return self.asr.detokenize(self.finish_ids(**decode))
