"""CosyVoice's HiFT vocoder on the runtime: tiny HiFTGenerators (model_zoo.reference.cosyvoice_hift, seeded random
weights: every parameter perturbed, weight-norm magnitudes and Snake alphas included, f0 spanning voiced and unvoiced
frames) built by model_zoo.multimodal.cosyvoice_hift_graph from their state dicts and run through
lite.cosyvoice_vocoder.CosyVoiceVocoder: the waveform within 1e-4 (absolute) of the reference's inference with the
same phase / noise draws, for two mel lengths, both sine generators (SineGen2 at 24 kHz: CosyVoice 2; SineGen at
22050 Hz), both weight-norm key forms (parametrizations.weight.original0/1 and weight_g/weight_v under generator.),
CosyVoice 2's full-size config; the draws' order; bad inputs refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.families.cosyvoice import RELEASE_HIFT_V2

TOL = 1e-4

TINY = dict(in_channels=80, base_channels=16, nb_harmonics=8, nsf_alpha=0.1, nsf_sigma=0.003,
            nsf_voiced_threshold=10, upsample_rates=[2, 3], upsample_kernel_sizes=[4, 7],
            istft_params=dict(n_fft=16, hop_len=4), resblock_kernel_sizes=[3, 5],
            resblock_dilation_sizes=[[1, 3], [1, 2]], source_resblock_kernel_sizes=[5, 3],
            source_resblock_dilation_sizes=[[1, 3], [1]], lrelu_slope=0.1, audio_limit=0.99,
            f0_predictor=dict(num_class=1, in_channels=80, cond_channels=16))


def reference(config: dict, seed: int, scale: float = 0.1):
    """A HiFTGenerator (CausalHiFTGenerator for a causal config) with every parameter randomised; f0 ~
    |15 + N(0, 60)| Hz, so some frames are unvoiced."""
    from model_zoo.reference.cosyvoice_hift import HiFTGenerator
    torch.manual_seed(seed)
    model = HiFTGenerator.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("alpha"):
                p.uniform_(0.5, 1.5)
            elif name.endswith("original0"):             # the weight-norm magnitudes g: no longer ||v||
                p.mul_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif not name.startswith("f0_predictor.classifier"):
                p.add_(torch.randn_like(p) * scale * p.detach().abs().mean().clamp(min=0.05))
        cls = model.f0_predictor.classifier
        z = model.f0_predictor.condnet(torch.randn(1, config["in_channels"], 64))[0].T @ cls.weight[0]
        gain = 60.0 / z.std().item()
        cls.weight.mul_(gain)
        cls.bias.fill_(15.0 - gain * z.mean().item())
    return model


def build(tmp_path, config: dict, weights: dict, name: str, threads: int = 1):
    from converter.writer import write_ms
    from lite.cosyvoice_vocoder import CosyVoiceVocoder
    from model_zoo.multimodal.cosyvoice_hift_graph import build_cosyvoice_hift_graph
    path = write_ms(build_cosyvoice_hift_graph(config, weights), str(tmp_path / f"{name}.ms")).path
    return CosyVoiceVocoder(path, config, threads)


def draws(vocoder, frames: int, seed: int):
    rng = np.random.default_rng(seed)
    phase = vocoder.draw_phase(rng)
    noise = rng.standard_normal((frames * vocoder.samples_per_frame, vocoder.harmonics), dtype=np.float32)
    return phase, noise


def expected(model, mel: np.ndarray, phase: np.ndarray, noise: np.ndarray) -> np.ndarray:
    return model.inference(torch.from_numpy(mel)[None], torch.from_numpy(phase),
                           torch.from_numpy(noise)[None])[0].numpy()


@pytest.mark.parametrize("rate", [24000, 22050])
def test_waveform_equals_reference(tmp_path, rate):
    from model_zoo.reference.cosyvoice_hift import weights_of
    config = dict(TINY, sampling_rate=rate)
    model = reference(config, seed=rate % 7)
    vocoder = build(tmp_path, config, weights_of(model), "hift")
    assert vocoder.samples_per_frame == 24 and vocoder.sinegen2 == (rate == 24000)
    rng = np.random.default_rng(1)
    for frames in (9, 23):                       # one graph, two lengths
        mel = rng.standard_normal((80, frames)).astype(np.float32)
        with torch.no_grad():
            f0 = model.f0_predictor(torch.from_numpy(mel)[None])[0].numpy()
        assert (f0 > 10).any() and (f0 <= 10).any()  # voiced and unvoiced frames
        phase, noise = draws(vocoder, frames, seed=frames)
        want = expected(model, mel, phase, noise)
        got = vocoder.waveform(mel, phase=phase, noise=noise)
        assert got.shape == want.shape == (frames * 24,) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
        assert 0.02 < np.abs(want).max() < 0.99    # audible, not clamped
        other = expected(model, mel, phase, noise[::-1].copy())
        assert np.abs(other - want).max() > 10 * TOL   # the noise matters at this tolerance


def test_legacy_weight_norm_names(tmp_path):
    """hift.pt as torch.nn.utils.weight_norm saves it (weight_g / weight_v), under generator.: the same vocoder."""
    from model_zoo.reference.cosyvoice_hift import HiFTGenerator, legacy_weight_norm_names, weights_of
    config = dict(TINY, sampling_rate=24000)
    model = reference(config, seed=3)
    legacy = {"generator." + k: v for k, v in legacy_weight_norm_names(weights_of(model)).items()}
    assert any(k.endswith("weight_g") for k in legacy) and not any("parametrizations" in k for k in legacy)
    reloaded = HiFTGenerator(**config).eval()     # the reference loads that form too, strictly
    reloaded.load_state_dict({k[len("generator."):]: torch.from_numpy(v) for k, v in legacy.items()}, strict=True)
    vocoder = build(tmp_path, config, legacy, "legacy")
    mel = np.random.default_rng(2).standard_normal((1, 80, 11)).astype(np.float32)
    phase, noise = draws(vocoder, 11, seed=4)
    want = expected(model, mel[0], phase, noise)
    np.testing.assert_array_equal(expected(reloaded, mel[0], phase, noise), want)
    np.testing.assert_allclose(vocoder.waveform(mel, phase=phase, noise=noise[None]), want, rtol=0, atol=TOL)


def test_reference_draws_like_the_original(tmp_path):
    """Given no draws the reference makes them with torch in the original's order; the vocoder with numpy: the same
    as passing its draws explicitly, and different draws give a different waveform."""
    from model_zoo.reference.cosyvoice_hift import weights_of
    config = dict(TINY, sampling_rate=24000)
    model = reference(config, seed=5)
    mel = np.random.default_rng(6).standard_normal((80, 10)).astype(np.float32)
    torch.manual_seed(9)
    drawn = model.inference(torch.from_numpy(mel)[None])[0].numpy()
    torch.manual_seed(9)
    rand_ini = torch.rand(1, 9)
    rand_ini[0, 0] = 0
    noise = torch.randn_like(torch.empty(1, 9, 240).transpose(1, 2))   # SineGen2's sines are a transposed view
    np.testing.assert_array_equal(drawn, expected(model, mel, rand_ini[0].numpy(), noise[0].numpy()))

    vocoder = build(tmp_path, config, weights_of(model), "draws")
    a = vocoder.waveform(mel, rng=np.random.default_rng(7))
    phase, noise = draws(vocoder, 10, seed=7)
    assert phase[0] == 0 and (phase[1:] > 0).all() and (phase < 1).all()
    np.testing.assert_array_equal(a, vocoder.waveform(mel, phase=phase, noise=noise))
    assert np.abs(a - vocoder.waveform(mel, rng=np.random.default_rng(8))).max() > 10 * TOL


@pytest.mark.parametrize("rate, rates, kernels", [(24000, [8, 5, 3], [16, 11, 7]), (22050, [8, 8], [16, 16])])
def test_excitation_phase_over_30_seconds(tmp_path, rate, rates, kernels):
    """The sine source from one f0 over 30 s (480 / 256 samples a frame; phases up to ~1e6 rad, where a float32
    ulp is 0.06): the graph repeats torch's float32 arithmetic (exact frame sums, the interpolation's fused
    multiply-adds), so it stays within 1e-6 of the reference everywhere."""
    from converter.writer import write_ms
    from lite.checkpoint_graph import load_graph
    from model_zoo.multimodal.cosyvoice_hift_graph import build_cosyvoice_hift_source_graph, upsample_scale
    from model_zoo.reference.cosyvoice_hift import weights_of
    config = dict(TINY, sampling_rate=rate, upsample_rates=rates, upsample_kernel_sizes=kernels,
                  source_resblock_kernel_sizes=[3] * len(rates), source_resblock_dilation_sizes=[[1]] * len(rates))
    model = reference(config, seed=4)
    s, frames = upsample_scale(config), 30 * rate // upsample_scale(config)
    path = write_ms(build_cosyvoice_hift_source_graph(config, weights_of(model)), str(tmp_path / "src.ms")).path
    rng = np.random.default_rng(5)
    f0 = np.abs(rng.normal(220, 90, (1, frames, 1))).astype(np.float32)
    f0[:, ::9] = rng.uniform(0, 10, (1, len(f0[0, ::9]), 1))       # unvoiced frames
    f0[:, 5::97] = rng.uniform(3000, 9000, (1, len(f0[0, 5::97]), 1))   # k f0 > sr: the % 1 matters
    phase = (rng.uniform(0, 1, 9) if rate != 22050 else rng.uniform(-np.pi, np.pi, 9)).astype(np.float32)
    phase[0] = 0
    noise = rng.standard_normal((1, frames * s, 9), dtype=np.float32)
    with torch.no_grad():
        want = model.m_source(torch.from_numpy(f0).repeat_interleave(s, dim=1), torch.from_numpy(phase),
                              torch.from_numpy(noise))[0, :, 0].numpy()
    got = load_graph(path).predict([f0, phase, noise])[0].get_data_to_numpy().reshape(-1)
    assert got.shape == want.shape == (frames * s,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_cosyvoice2_full_size(tmp_path):
    """CosyVoice 2's own config (512 channels, rates 8 x 5 x 3, 480 samples a frame): shapes and values."""
    from model_zoo.reference.cosyvoice_hift import weights_of
    model = reference(RELEASE_HIFT_V2, seed=11, scale=0.02)
    assert sum(p.numel() for p in model.parameters()) > 20_000_000
    vocoder = build(tmp_path, RELEASE_HIFT_V2, weights_of(model), "cosyvoice2", threads=2)
    assert vocoder.samples_per_frame == 480 and vocoder.sampling_rate == 24000 and vocoder.sinegen2
    mel = np.random.default_rng(12).standard_normal((80, 12)).astype(np.float32)
    phase, noise = draws(vocoder, 12, seed=13)
    want = expected(model, mel, phase, noise)
    got = vocoder.waveform(mel, phase=phase, noise=noise)
    assert got.shape == want.shape == (12 * 480,)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    assert np.abs(want).max() > 0.01


def test_bad_inputs_are_refused(tmp_path):
    from converter.ir import ConverterError
    from model_zoo.multimodal.cosyvoice_hift_graph import build_cosyvoice_hift_graph
    from model_zoo.reference.cosyvoice_hift import weights_of
    config = dict(TINY, sampling_rate=24000)
    weights = weights_of(reference(config, seed=1))
    vocoder = build(tmp_path, config, weights, "bad")
    mel = np.zeros((80, 6), np.float32)
    assert vocoder.waveform(mel, rng=np.random.default_rng(0)).shape == (144,)
    for bad in (np.zeros((81, 6), np.float32), np.zeros((2, 80, 6), np.float32), np.zeros((80,), np.float32),
                np.zeros((80, 0), np.float32)):
        with pytest.raises(ValueError, match="mel must be"):
            vocoder.waveform(bad)
    with pytest.raises(ValueError, match="float32"):
        vocoder.waveform(np.zeros((80, 6), np.int64))
    with pytest.raises(ValueError, match="NaN"):
        vocoder.waveform(np.full((80, 6), np.nan, np.float32))
    with pytest.raises(ValueError, match="noise must be"):
        vocoder.waveform(mel, noise=np.zeros((143, 9), np.float32))
    with pytest.raises(ValueError, match="phase must be"):
        vocoder.waveform(mel, phase=np.zeros(8, np.float32))

    missing = {k: v for k, v in weights.items() if not k.startswith("conv_post.")}
    with pytest.raises(ConverterError, match="conv_post"):
        build_cosyvoice_hift_graph(config, missing)
    wrong = dict(weights, **{"conv_pre.bias": np.zeros(17, np.float32)})
    with pytest.raises(ConverterError, match="conv_pre.bias"):
        build_cosyvoice_hift_graph(config, wrong)
    with pytest.raises(ValueError, match="float32"):
        build_cosyvoice_hift_graph(config, weights, weight_format="int8")
