"""CosyVoice 3's vocoder (CausalHiFTGenerator with CausalConvRNNF0Predictor) on the runtime: tiny causal generators
(model_zoo.reference.cosyvoice_hift, seeded random weights: every parameter perturbed, weight-norm magnitudes and
Snake alphas included, f0 spanning voiced and unvoiced frames) built by model_zoo.multimodal.cosyvoice_hift_graph from
their state dicts and run through lite.cosyvoice_vocoder.CosyVoiceVocoder: the waveform within 1e-4 (absolute) of
the reference's inference (finalize=True, F0 predictor in float64 as the original) with the same draws, for two mel
lengths, both weight-norm key forms, CosyVoice 3's full-size config (and its released tensor names and shapes); the
causal structure (early samples blind to later frames); the draws (uniform noise, the original's construction-time
table); which generator the config picks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.families.cosyvoice import RELEASE_HIFT_V2
from tests.model_zoo.test_cosyvoice_hift import TINY, TOL, build, expected, reference

CAUSAL = dict(TINY, sampling_rate=24000, conv_pre_look_right=4, causal=True)   # 24 samples a frame

COSYVOICE3 = dict(RELEASE_HIFT_V2, conv_pre_look_right=4, causal=True)   # CosyVoice 2's sizes, causal


def test_waveform_equals_reference(tmp_path):
    from model_zoo.reference.cosyvoice_hift import CausalHiFTGenerator, weights_of
    model = reference(CAUSAL, seed=2)
    assert isinstance(model, CausalHiFTGenerator)
    vocoder = build(tmp_path, CAUSAL, weights_of(model), "hift3")
    assert vocoder.samples_per_frame == 24 and vocoder.causal and vocoder.sinegen2
    rng = np.random.default_rng(1)
    for frames in (9, 23):                       # one graph, two lengths
        mel = rng.standard_normal((80, frames)).astype(np.float32)
        with torch.no_grad():
            f0 = model.f0(torch.from_numpy(mel)[None])[0].numpy()
        assert (f0 > 10).any() and (f0 <= 10).any()  # voiced and unvoiced frames
        phase, noise = vocoder.draws(np.random.default_rng(frames), frames)
        assert noise.shape == (1, frames * 24, 9) and noise.min() >= 0 and noise.max() < 1   # uniform [0, 1)
        want = expected(model, mel, phase, noise[0])
        got = vocoder.waveform(mel, phase=phase, noise=noise)
        assert got.shape == want.shape == (frames * 24,) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
        assert 0.02 < np.abs(want).max() < 0.99    # audible, not clamped
        other = expected(model, mel, phase, noise[0, ::-1].copy())
        assert np.abs(other - want).max() > 5 * TOL    # the noise (uniform, small) matters at this tolerance


def test_not_the_noncausal_generator(tmp_path):
    """The same tensors read as CosyVoice 2's layout would not fit: the causal ups are Conv1d's [out, in, k] (the
    transposed conv's are [in, out, k]) and conv_pre's kernel is look-ahead + 1, not 7."""
    from converter.ir import ConverterError
    from model_zoo.multimodal.cosyvoice_hift_graph import build_cosyvoice_hift_graph
    from model_zoo.reference.cosyvoice_hift import weights_of
    weights = weights_of(reference(CAUSAL, seed=2))
    assert weights["ups.0.parametrizations.weight.original1"].shape == (8, 16, 4)
    assert weights["conv_pre.parametrizations.weight.original1"].shape == (16, 80, 5)
    with pytest.raises(ConverterError, match="f0_predictor.condnet.0"):   # kernel 4, not 3
        build_cosyvoice_hift_graph(dict(TINY, sampling_rate=24000), weights)
    weights = {k: v for k, v in weights.items() if not k.startswith("f0_predictor.condnet.0.")}
    with pytest.raises(ConverterError, match="f0_predictor.condnet.0"):
        build_cosyvoice_hift_graph(CAUSAL, weights)


def test_causal_structure(tmp_path):
    """Waveform sample n sees mel frames up to n / 24 + 4 (conv_pre's look-ahead; the F0 predictor's is 3) and a few
    samples more (the centred STFT / iSTFT): changing the frames from 12 on leaves the first ~7 frames' samples as
    they were, in the graph and in the reference, and changes the rest."""
    from model_zoo.reference.cosyvoice_hift import weights_of
    model = reference(CAUSAL, seed=4)
    vocoder = build(tmp_path, CAUSAL, weights_of(model), "causal")
    rng = np.random.default_rng(3)
    mel = rng.standard_normal((80, 20)).astype(np.float32)
    later = mel.copy()
    later[:, 12:] = rng.standard_normal((80, 8))
    phase, noise = vocoder.draws(np.random.default_rng(4), 20)
    a, b = (vocoder.waveform(m, phase=phase, noise=noise) for m in (mel, later))
    ra, rb = (expected(model, m, phase, noise[0]) for m in (mel, later))
    edge = (12 - 5) * 24 - 32
    np.testing.assert_allclose(a[:edge], b[:edge], rtol=0, atol=1e-6)
    np.testing.assert_allclose(ra[:edge], rb[:edge], rtol=0, atol=1e-7)
    assert np.abs(a[12 * 24:] - b[12 * 24:]).max() > 10 * TOL
    np.testing.assert_allclose(b, rb, rtol=0, atol=TOL)
    # the look-ahead is there: frame 11 changed alone moves samples of frame 7
    ahead = mel.copy()
    ahead[:, 11] += 1
    c = vocoder.waveform(ahead, phase=phase, noise=noise)
    assert np.abs(c[7 * 24:8 * 24] - a[7 * 24:8 * 24]).max() > 10 * TOL


def test_legacy_weight_norm_names(tmp_path):
    """hift.pt as torch.nn.utils.weight_norm saves it (weight_g / weight_v), under generator.: the same vocoder, and
    the reference loads that form strictly."""
    from model_zoo.reference.cosyvoice_hift import HiFTGenerator, legacy_weight_norm_names, weights_of
    model = reference(CAUSAL, seed=3)
    legacy = {"generator." + k: v for k, v in legacy_weight_norm_names(weights_of(model)).items()}
    assert any(k.endswith("weight_g") for k in legacy) and not any("parametrizations" in k for k in legacy)
    reloaded = HiFTGenerator.from_config(CAUSAL).eval()
    reloaded.load_state_dict({k[len("generator."):]: torch.from_numpy(v) for k, v in legacy.items()}, strict=True)
    vocoder = build(tmp_path, CAUSAL, legacy, "legacy")
    mel = np.random.default_rng(2).standard_normal((1, 80, 11)).astype(np.float32)
    phase, noise = vocoder.draws(np.random.default_rng(4), 11)
    want = expected(model, mel[0], phase, noise[0])
    np.testing.assert_array_equal(expected(reloaded, mel[0], phase, noise[0]), want)
    np.testing.assert_allclose(vocoder.waveform(mel, phase=phase, noise=noise), want, rtol=0, atol=TOL)


def test_draws_like_the_original(tmp_path):
    """The original draws rand_ini (torch.rand(1, 9), [0] = 0) and its noise table (torch.rand(1, 300 x 24000, 9))
    when built, right after its F0 predictor argument, and reads the table's first rows on every call: the reference
    the same under one torch seed, its output without draws the same on every call. The vocoder draws with numpy, in
    the order draws() gives: waveform(mel, rng) equals passing draws(rng, frames)."""
    from model_zoo.reference.cosyvoice_hift import CausalConvRNNF0Predictor, HiFTGenerator, weights_of
    torch.manual_seed(9)
    model = HiFTGenerator.from_config(CAUSAL).eval()
    torch.manual_seed(9)
    CausalConvRNNF0Predictor(**CAUSAL["f0_predictor"])     # what HyperPyYAML builds before the generator
    rand_ini = torch.rand(1, 9)
    rand_ini[0, 0] = 0
    table = torch.rand(1, 10 * 24, 9)                      # the first rows of the original's table
    np.testing.assert_array_equal(model.m_source.rand_ini.numpy(), rand_ini.numpy())
    np.testing.assert_array_equal(model.m_source.noise_table(10 * 24).numpy(), table.numpy())
    model = reference(CAUSAL, seed=5)                      # (rand_ini, table) drawn under seed 5 when built
    mel = np.random.default_rng(6).standard_normal((80, 10)).astype(np.float32)
    first = model.inference(torch.from_numpy(mel)[None])[0].numpy()
    np.testing.assert_array_equal(model.inference(torch.from_numpy(mel)[None])[0].numpy(), first)
    torch.manual_seed(5)
    CausalConvRNNF0Predictor(**CAUSAL["f0_predictor"])
    rand_ini = torch.rand(1, 9)
    rand_ini[0, 0] = 0
    table = torch.rand(1, 10 * 24, 9)
    np.testing.assert_array_equal(first, expected(model, mel, rand_ini[0].numpy(), table[0].numpy()))

    vocoder = build(tmp_path, CAUSAL, weights_of(model), "draws")
    a = vocoder.waveform(mel, rng=np.random.default_rng(7))
    phase, noise = vocoder.draws(np.random.default_rng(7), 10)
    assert phase[0] == 0 and (phase[1:] > 0).all() and (phase < 1).all() and 0.4 < noise.mean() < 0.6
    np.testing.assert_array_equal(a, vocoder.waveform(mel, phase=phase, noise=noise))
    np.testing.assert_allclose(a, expected(model, mel, phase, noise[0]), rtol=0, atol=TOL)
    assert np.abs(a - vocoder.waveform(mel, rng=np.random.default_rng(8))).max() > 10 * TOL


def test_noncausal_draws_unchanged(tmp_path):
    """CosyVoice 2's vocoder keeps its draws: the phase, then standard normal noise."""
    from model_zoo.reference.cosyvoice_hift import weights_of
    config = dict(TINY, sampling_rate=24000)
    vocoder = build(tmp_path, config, weights_of(reference(config, seed=1)), "v2")
    assert not vocoder.causal
    phase, noise = vocoder.draws(np.random.default_rng(3), 5)
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(phase, vocoder.draw_phase(rng))
    np.testing.assert_array_equal(noise, rng.standard_normal((1, 120, 9), dtype=np.float32))


def test_cosyvoice3_full_size(tmp_path):
    """CosyVoice 3's own config (512 channels, rates 8 x 5 x 3, 480 samples a frame): the released hift.pt's names
    (CosyVoice 2's, with the causal layers' shapes), shapes and values."""
    from model_zoo.reference.cosyvoice_hift import HiFTGenerator, weights_of
    model = reference(COSYVOICE3, seed=11, scale=0.02)
    weights = weights_of(model)
    assert sum(p.numel() for p in model.parameters()) > 20_000_000
    v2_names = set(HiFTGenerator.from_config({k: v for k, v in COSYVOICE3.items()
                                              if k not in ("causal", "conv_pre_look_right")}).state_dict())
    assert set(weights) == v2_names
    shapes = {"conv_pre.parametrizations.weight.original1": (512, 80, 5),
              "ups.0.parametrizations.weight.original1": (256, 512, 16),
              "ups.0.parametrizations.weight.original0": (256, 1, 1),
              "ups.2.parametrizations.weight.original1": (64, 128, 7),
              "source_downs.0.weight": (256, 18, 30), "source_downs.1.weight": (128, 18, 6),
              "source_downs.2.weight": (64, 18, 1), "conv_post.parametrizations.weight.original1": (18, 64, 7),
              "f0_predictor.condnet.0.parametrizations.weight.original1": (512, 80, 4),
              "f0_predictor.condnet.8.parametrizations.weight.original1": (512, 512, 3),
              "f0_predictor.classifier.weight": (1, 512), "m_source.l_linear.weight": (1, 9)}
    assert {k: weights[k].shape for k in shapes} == shapes
    vocoder = build(tmp_path, COSYVOICE3, weights, "cosyvoice3", threads=2)
    assert vocoder.samples_per_frame == 480 and vocoder.sampling_rate == 24000 and vocoder.causal
    mel = np.random.default_rng(12).standard_normal((80, 12)).astype(np.float32)
    phase, noise = vocoder.draws(np.random.default_rng(13), 12)
    want = expected(model, mel, phase, noise[0])
    got = vocoder.waveform(mel, phase=phase, noise=noise)
    assert got.shape == want.shape == (12 * 480,)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    assert np.abs(want).max() > 0.01


@pytest.mark.parametrize("config, causal", [
    (dict(causal=True), True), (dict(causal=False), False), ({}, False),
    ({"__target__": "cosyvoice.hifigan.generator.CausalHiFTGenerator"}, True),
    ({"__target__": "cosyvoice.hifigan.generator.HiFTGenerator"}, False),
    (dict(conv_pre_look_right=4), True),
    ({"__target__": "cosyvoice.hifigan.generator.CausalHiFTGenerator", "causal": True, "conv_pre_look_right": 2,
      "f0_predictor": {"__target__": "cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor", "num_class": 1,
                       "in_channels": 80, "cond_channels": 16}}, True),
    ({"__target__": "cosyvoice.hifigan.generator.HiFTGenerator", "causal": True}, ValueError),
    (dict(causal=False, conv_pre_look_right=4), ValueError),
    ({"__target__": "cosyvoice.hifigan.generator.Other"}, ValueError),
    (dict(causal=True, f0_predictor={"__target__": "cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor"}),
     NotImplementedError),
    (dict(causal=True, sampling_rate=22050), NotImplementedError),
])
def test_config_decides(config, causal):
    """The graph module and the reference pick the same generator from the yaml's kwargs (the converter's causal
    key, the __target__, conv_pre_look_right) and refuse the same contradictions."""
    from model_zoo.multimodal.cosyvoice_hift_graph import hift_config
    from model_zoo.reference.cosyvoice_hift import CausalHiFTGenerator, HiFTGenerator
    base = {k: v for k, v in TINY.items() if k != "f0_predictor"}
    full = {**base, "sampling_rate": 24000, "f0_predictor": TINY["f0_predictor"], **config}
    if isinstance(causal, type):
        with pytest.raises(causal):
            hift_config(full)
        with pytest.raises(causal):
            HiFTGenerator.from_config(full)
        return
    cfg = hift_config(full)
    assert cfg["causal"] is causal and hift_config(cfg) == cfg
    assert cfg.get("conv_pre_look_right") == (full.get("conv_pre_look_right", 4) if causal else None)
    model = HiFTGenerator.from_config(full)
    assert isinstance(model, CausalHiFTGenerator) == causal
    if causal:
        assert model.conv_pre.parametrizations.weight.original1.shape[2] == cfg["conv_pre_look_right"] + 1
