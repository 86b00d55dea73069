"""The sampling filters against their definitions, on crafted logits; seeded sampling is reproducible."""
from __future__ import annotations

import numpy as np
import pytest

from lite.llm import SamplingParams, SequenceSampler, apply_penalties, filter_logits


def kept(logits, **kw):
    return set(np.flatnonzero(np.isfinite(filter_logits(np.asarray(logits, np.float32), SamplingParams(**kw)))))


def test_top_k_keeps_the_k_largest():
    logits = [0.1, 3.0, -1.0, 2.0, 2.5, 0.0]
    assert kept(logits, top_k=3) == {1, 3, 4}
    assert kept(logits, top_k=1) == {1}
    assert kept(logits, top_k=0) == set(range(6)) == kept(logits, top_k=-1) == kept(logits, top_k=99)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(probs)
    assert kept(logits, top_p=0.5) == {0}            # 0.5 reaches 0.5 alone
    assert kept(logits, top_p=0.6) == {0, 1}         # 0.5 < 0.6 <= 0.8
    assert kept(logits, top_p=0.8) == {0, 1}
    assert kept(logits, top_p=0.81) == {0, 1, 2}
    assert kept(logits, top_p=0.01) == {0}           # the most likely token always stays


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    probs = np.array([0.6, 0.25, 0.1, 0.05])
    assert kept(np.log(probs), min_p=0.2) == {0, 1}      # threshold 0.12
    assert kept(np.log(probs), min_p=0.05) == {0, 1, 2, 3}


def test_temperature_scales_before_the_filters():
    logits = np.array([2.0, 1.0, 0.0], np.float32)
    np.testing.assert_allclose(filter_logits(logits, SamplingParams(temperature=0.5)), logits / 0.5)
    # a low temperature concentrates mass: top_p=0.9 then keeps only the best token
    assert kept(logits, temperature=0.1, top_p=0.9) == {0}
    assert kept(logits, temperature=10.0, top_p=0.9) == {0, 1, 2}


def test_penalties_follow_their_definitions():
    logits = np.array([2.0, -1.0, 0.5, 3.0], np.float32)
    got = apply_penalties(logits, prompt_ids=[0], output_counts={1: 2, 3: 1},
                          params=SamplingParams(repetition_penalty=2.0))
    np.testing.assert_allclose(got, [1.0, -2.0, 0.5, 1.5])   # positive / 2, negative * 2, unseen unchanged
    got = apply_penalties(logits, prompt_ids=[0], output_counts={1: 2, 3: 1},
                          params=SamplingParams(presence_penalty=0.5, frequency_penalty=0.25))
    np.testing.assert_allclose(got, [2.0, -1.0 - 0.5 - 0.5, 0.5, 3.0 - 0.5 - 0.25])   # output tokens only


def test_greedy_is_the_arg_max_after_penalties():
    s = SequenceSampler(SamplingParams(temperature=0, repetition_penalty=10.0), prompt_ids=[3])
    assert s.next_token(np.array([0.0, 1.0, 0.5, 5.0])) == 1   # 5.0 / 10 = 0.5 < 1.0


def test_seeded_sampling_is_reproducible_and_follows_the_distribution():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=50).astype(np.float32)
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=1234)
    def draw(p: SamplingParams) -> list[int]:
        sampler = SequenceSampler(p, [])
        return [sampler.next_token(logits) for _ in range(40)]

    assert draw(params) == draw(params)
    assert draw(params) != draw(SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=99))
    # every drawn token is one the filters keep; frequencies approach the filtered softmax
    allowed = kept(logits, temperature=0.8, top_k=20, top_p=0.9)
    sampler = SequenceSampler(SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=7), [])
    counts = np.zeros(50)
    for _ in range(4000):
        counts[sampler.next_token(logits)] += 1
    assert set(np.flatnonzero(counts)) <= allowed
    f = filter_logits(logits, SamplingParams(temperature=0.8, top_k=20, top_p=0.9))
    p = np.exp(f - f.max())
    p /= p.sum()
    assert np.abs(counts / counts.sum() - p).max() < 0.03


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(min_p=2),
                                 dict(max_new_tokens=0), dict(repetition_penalty=0), dict(n=0), dict(stop=[""]),
                                 dict(presence_penalty=3)])
def test_invalid_parameters_are_refused(bad):
    with pytest.raises(ValueError, match="invalid SamplingParams"):
        SamplingParams(**bad)
