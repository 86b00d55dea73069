"""FireRedASR-AED speech recognition on the runtime: audio -> text through the Conformer encoder graph (once per
utterance: encoder states and every decoder layer's cross-attention keys and values) and the decoder step graph on
the paged KV cache, beam search over its beams in lock step (model_zoo/multimodal/fireredasr_graphs.py).

    asr = FireRedASR.from_pretrained("path/to/FireRedASR-AED-L")   # the release directory (converted on first use)
    asr.transcribe(["a.wav"])                                      # ["..."]

As the project's pipeline: 80-bin Kaldi fbank of the 16-bit samples (no dither) normalised by cmvn.ark's global
statistics; the encoder over them (6 frames of zero context appended); beam search from <sos> with the project's
batch_beam_search rules (log-softmax of logits / softmax_smoothing, eos_penalty on eos, a finished beam extends only
by eos at no cost, the GNMT length penalty ((5 + length) / 6) ^ length_penalty at the end), up to as many tokens
as encoder frames (or decode_max_len); tokens mapped through dict.txt, SentencePiece's "▁" turned into spaces."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .audio import cmvn_from_stats, kaldi_fbank, load_audio, read_kaldi_matrix
from .checkpoint_graph import converted_weight_format, load_graph, read_token_ids
from .lock_step import LockStepDecoder

SPM_SPACE = "\u2581"


class FireRedASR:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1, beam_size: int = 3):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") != "fireredasr_aed":
            raise ValueError(f"not a FireRedASR-AED model (model_type {self.config.get('model_type')!r})")
        self.sos, self.eos = int(self.config.get("sos_id", 3)), int(self.config.get("eos_id", 4))
        self.idim = int(self.config.get("idim", 80))
        cmvn = os.path.join(model_dir, "cmvn.ark")
        self.cmvn = cmvn_from_stats(read_kaldi_matrix(cmvn)) if os.path.isfile(cmvn) else None
        if self.cmvn is not None and self.cmvn[0].size != self.idim:
            raise ValueError(f"cmvn.ark has {self.cmvn[0].size} dimensions, the model takes {self.idim}")
        self.vocab = read_token_ids(os.path.join(model_dir, "dict.txt"), "token dictionary")
        suffix = "" if weight_format == "float32" else f"_{weight_format}"
        graphs = {stem: os.path.join(model_dir, f"{stem}{suffix}.ms") for stem in ("encoder", "decoder")}
        if not all(os.path.isfile(p) for p in graphs.values()):
            from model_zoo.families.fireredasr import convert_fireredasr
            convert_fireredasr(model_dir, model_dir, weight_format)
        models = {stem: load_graph(path, threads) for stem, path in graphs.items()}
        self.encoder = models["encoder"]
        self.beam_size = beam_size
        self.steps = LockStepDecoder(models["decoder"], beam_size, 64)
        self.d = int(self.config.get("d_model", 1280))

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, threads: int = 1,
                        **kwargs) -> "FireRedASR":
        return cls(model_dir, weight_format or converted_weight_format(model_dir), threads, **kwargs)

    # -- front end ------------------------------------------------------------------------------------------------
    def features(self, audio) -> np.ndarray:
        """[frames, idim] CMVN-normalised fbank of one utterance (a WAV path or bytes, float samples in [-1, 1] at
        16 kHz, or (samples, rate))."""
        x = load_audio(audio, 16000) * 32768.0   # Kaldi's scale: 16-bit sample values
        feats = kaldi_fbank(x, self.idim)
        if feats.shape[0] == 0:
            raise ValueError(f"audio of {x.size} samples is shorter than one 25 ms frame")
        if self.cmvn is not None:
            feats = (feats - self.cmvn[0]) * self.cmvn[1]
        return feats.astype(np.float32)

    def encode(self, feats: np.ndarray) -> dict[str, np.ndarray]:
        """The encoder's outputs for one utterance's features: encoder_states and cross_k.i / cross_v.i."""
        from model_zoo.multimodal.conformer_parts import sinusoid_table
        padded = np.pad(feats, ((0, 6), (0, 0)))[None]   # the subsampling's 6 frames of right context
        steps = ((padded.shape[1] - 1) // 2 - 1) // 2
        if steps < 1:
            raise ValueError(f"{feats.shape[0]} frames are too few for the encoder's 4x subsampling")
        rel_pos = np.concatenate([sinusoid_table(steps, self.d)[::-1], sinusoid_table(steps, self.d, -1.0)[1:]])
        index = (steps - 1) - np.arange(steps)[:, None] + np.arange(steps)[None, :]
        outs = self.encoder.predict({"features": padded.astype(np.float32), "rel_pos": np.ascontiguousarray(rel_pos),
                                     "rel_index": index.astype(np.int64)})
        return {o.name: t.get_data_to_numpy() for o, t in zip(self.encoder.get_outputs(), outs)}

    # -- decoding -------------------------------------------------------------------------------------------------
    def generate_ids(self, audios: Sequence, beam_size: int | None = None, decode_max_len: int = 0,
                     softmax_smoothing: float = 1.0, length_penalty: float = 0.0,
                     eos_penalty: float = 1.0) -> list[list[int]]:
        """The best hypothesis's token ids (without sos / eos) of each utterance."""
        if isinstance(audios, (str, bytes, np.ndarray)):
            raise TypeError("audios is a list (of paths, WAV bytes or sample arrays)")
        if not 0.0 < eos_penalty <= 1.0:
            raise ValueError(f"eos_penalty must be in (0, 1], got {eos_penalty}")
        return [self._beam_search(self.encode(self.features(a)), beam_size or self.beam_size, decode_max_len,
                                  softmax_smoothing, length_penalty, eos_penalty) for a in audios]

    def _beam_search(self, enc: dict, B: int, max_len: int, smoothing: float, length_penalty: float,
                     eos_penalty: float) -> list[int]:
        INF = 1e10
        frames = enc["encoder_states"].shape[1]
        limit = max_len if max_len > 0 else frames
        self.steps.reserve(B, min(limit + 1, 64))   # grown as the hypotheses get longer
        cross = {k: np.ascontiguousarray(np.repeat(v, B, axis=0)) for k, v in enc.items() if k.startswith("cross_")}
        slots = np.arange(B)
        ys = np.full((B, 1), self.sos, np.int64)
        scores = np.array([0.0] + [-INF] * (B - 1))
        finished = np.zeros(B, bool)
        done_row = np.array([0.0] + [-INF] * (B - 1))
        for t in range(limit):
            self.steps.ensure(t + 1, 64)
            logits = self.steps.step(ys[:, -1:], t, slots, cross).astype(np.float64) / smoothing
            logp = logits - logits.max(axis=1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
            if eos_penalty != 1.0:
                logp[:, self.eos] *= eos_penalty
            top_ids = np.argsort(-logp, axis=1, kind="stable")[:, :B]
            top = np.take_along_axis(logp, top_ids, axis=1)
            top = np.where(finished[:, None], done_row[None], top)
            top_ids = np.where(finished[:, None], self.eos, top_ids)
            total = (scores[:, None] + top).reshape(-1)
            best = np.argsort(-total, kind="stable")[:B]
            rows = best // B
            scores = total[best]
            ys = np.concatenate([ys[rows], top_ids.reshape(-1)[best][:, None]], axis=1)
            if np.any(rows != np.arange(B)):
                self.steps.reorder(rows, t + 1)   # the survivors' caches (positions 0..t) into their new slots
            finished = ys[:, -1] == self.eos
            if finished.all():
                break
        lengths = (ys != self.eos).sum(axis=1)
        final = scores / ((5 + lengths) / 6.0) ** length_penalty if length_penalty > 0 else scores
        b = int(np.argmax(final))
        return [int(t) for t in ys[b, 1:lengths[b]]]

    def detokenize(self, ids: Sequence[int]) -> str:
        """The tokens' text (the special sos / eos / pad / blank ids dropped), SentencePiece spaces restored."""
        special = {self.sos, self.eos, int(self.config.get("pad_id", 2)), int(self.config.get("blank_id", 0))}
        text = "".join(self.vocab.get(int(i), "") for i in ids if int(i) not in special)
        return text.replace(SPM_SPACE, " ").strip()

    def transcribe(self, audios: Sequence, **decode) -> list[str]:
        return [self.detokenize(ids) for ids in self.generate_ids(audios, **decode)]
