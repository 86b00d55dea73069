"""Token sampling for generation: `SamplingParams` (the options users of vLLM / OpenAI / onnxruntime-genai expect)
and `SequenceSampler`, which turns one sequence's next-token logits into a token.

Order, as vLLM applies it: repetition penalty (prompt and output tokens), presence and frequency penalties
(output tokens, OpenAI's definition), temperature, top-k, top-p, min-p, then a draw from the remaining
distribution with the sequence's own seeded generator (temperature 0: the arg max, no draw)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 1.0          # 0: greedy
    top_k: int = 0                    # 0 or -1: off
    top_p: float = 1.0                # 1: off
    min_p: float = 0.0                # 0: off
    repetition_penalty: float = 1.0   # 1: off; > 1 discourages tokens already in the prompt or output
    presence_penalty: float = 0.0     # subtracted once from each token already generated
    frequency_penalty: float = 0.0    # subtracted per occurrence of each token already generated
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    n: int = 1

    def __post_init__(self) -> None:
        checks = [
            (self.max_new_tokens >= 1, "max_new_tokens must be >= 1"),
            (self.temperature >= 0 and np.isfinite(self.temperature), "temperature must be finite and >= 0"),
            (self.top_k == -1 or self.top_k >= 0, "top_k must be >= 0 (or -1: off)"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
            (self.repetition_penalty > 0 and np.isfinite(self.repetition_penalty), "repetition_penalty must be > 0"),
            (-2 <= self.presence_penalty <= 2, "presence_penalty must be in [-2, 2]"),
            (-2 <= self.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2]"),
            (self.n >= 1, "n must be >= 1"),
            (all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty strings"),
        ]
        bad = [why for ok, why in checks if not ok]
        if bad:
            raise ValueError("invalid SamplingParams: " + "; ".join(bad))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def apply_penalties(logits: np.ndarray, prompt_ids: np.ndarray, output_counts: dict[int, int],
                    params: SamplingParams) -> np.ndarray:
    """The logits with the repetition, presence and frequency penalties applied: a new float32 array, or `logits`
    itself (as float32) when no penalty is set (a copy of a 151936-token row per decode step, ~50 us, for nothing)."""
    penalised = params.repetition_penalty != 1.0 or (output_counts and (params.presence_penalty or
                                                                        params.frequency_penalty))
    if not penalised:
        return np.asarray(logits, np.float32)
    out = np.array(logits, dtype=np.float32, copy=True)
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([np.asarray(prompt_ids, np.int64).ravel(),
                                         np.fromiter(output_counts, np.int64, len(output_counts))]))
        v = out[seen]
        out[seen] = np.where(v > 0, v / params.repetition_penalty, v * params.repetition_penalty)
    if output_counts and (params.presence_penalty or params.frequency_penalty):
        ids = np.fromiter(output_counts, np.int64, len(output_counts))
        counts = np.fromiter(output_counts.values(), np.float32, len(output_counts))
        out[ids] -= params.presence_penalty + params.frequency_penalty * counts
    return out


def filter_logits(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Temperature, then top-k, top-p and min-p: the logits with excluded tokens at -inf."""
    out = np.asarray(logits, np.float32) / np.float32(params.temperature if params.temperature > 0 else 1.0)
    vocab = out.shape[-1]
    if 0 < params.top_k < vocab:
        kth = np.partition(out, vocab - params.top_k)[vocab - params.top_k]   # the k-th largest
        out = np.where(out < kth, -np.inf, out)   # ties with the k-th are kept
    if params.top_p < 1.0 or params.min_p > 0.0:
        probs = softmax(out)
        if params.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cumulative = np.cumsum(probs[order])
            # keep the smallest prefix whose mass reaches top_p (at least the most likely token)
            keep = cumulative - probs[order] < params.top_p
            dropped = order[~keep]
            out[dropped] = -np.inf
            probs[dropped] = 0.0
        if params.min_p > 0.0:
            out = np.where(probs < params.min_p * probs.max(), -np.inf, out)
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    finite = np.isfinite(logits)
    shifted = np.where(finite, logits - logits[finite].max(), -np.inf)
    e = np.exp(shifted, dtype=np.float64)
    return (e / e.sum()).astype(np.float64)


class SequenceSampler:
    """One sequence's sampling state: its generator (seeded per request, so a seeded request is reproducible
    whatever else runs beside it) and the counts of the tokens it has generated."""

    def __init__(self, params: SamplingParams, prompt_ids: list[int] | np.ndarray, seed_offset: int = 0):
        self.params = params
        self.prompt_ids = np.asarray(prompt_ids, np.int64)
        seed = None if params.seed is None else params.seed + seed_offset   # n > 1: one stream per choice
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.counts: dict[int, int] = {}

    def next_token(self, logits: np.ndarray) -> int:
        logits = apply_penalties(np.asarray(logits, np.float32).ravel(), self.prompt_ids, self.counts, self.params)
        if self.params.greedy:
            token = int(np.argmax(logits))
        else:
            probs = softmax(filter_logits(logits, self.params))
            token = int(self.rng.choice(probs.shape[0], p=probs))
        self.counts[token] = self.counts.get(token, 0) + 1
        return token
