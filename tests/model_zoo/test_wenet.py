"""WeNet's row on the runtime: tiny U2++-style models (model_zoo.reference.wenet_u2, the PyTorch reference) with seeded
random weights saved as a WeNet release directory (final.pt, train.yaml, units.txt), converted by `python -m
model_zoo convert WeNet`; then lite.wenet.WeNet against the reference: the encoder's output and CTC log-probabilities
within 1e-4 (a causal LayerNorm conv module and a centred BatchNorm one), the CTC prefix beam search against
exhaustive sums over alignments, the decoders' rescoring scores within 1e-4, and whole transcripts (greedy, prefix
beam, attention rescoring with CTC and reverse weights) equal the reference pipeline's; the CLI; bad input named."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

UNITS = ["<blank>", "<unk>"] + [chr(0x4e00 + i) for i in range(12)] + ["\u2581hi", "\u2581there", "s", "<sos/eos>"]
CAUSAL_LN = dict(output_size=32, attention_heads=4, linear_units=48, num_blocks=2, cnn_module_kernel=8, causal=True,
                 cnn_module_norm="layer_norm", input_layer="conv2d", pos_enc_layer_type="rel_pos",
                 selfattention_layer_type="rel_selfattn", activation_type="swish", normalize_before=True,
                 use_dynamic_chunk=True)
CENTRED_BN = dict(CAUSAL_LN, cnn_module_kernel=5, causal=False, cnn_module_norm="batch_norm", use_dynamic_chunk=False)


def speech(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    tone = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) for f in rng.uniform(120, 2000, 3))
    return (0.1 * tone + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


def make_release(root, encoder_conf: dict, seed: int):
    import yaml

    from model_zoo.reference.wenet_u2 import U2Model
    root.mkdir(parents=True, exist_ok=True)
    decoder_conf = dict(attention_heads=4, linear_units=48, num_blocks=2, r_num_blocks=1, normalize_before=True)
    torch.manual_seed(seed)
    model = U2Model(80, len(UNITS), encoder_conf, "bitransformer", decoder_conf).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.6 if "ctc" in name or "decoder" in name else 0.2))
        model.encoder.global_cmvn.mean.uniform_(8, 12)
        model.encoder.global_cmvn.istd.uniform_(0.3, 0.6)
        for layer in model.encoder.encoders:
            norm = layer.conv_module.norm
            if isinstance(norm, torch.nn.BatchNorm1d):
                norm.running_mean.uniform_(-0.5, 0.5)
                norm.running_var.uniform_(0.5, 2.0)
    torch.save(model.state_dict(), root / "final.pt")
    train = dict(input_dim=80, output_dim=len(UNITS), encoder="conformer", encoder_conf=encoder_conf,
                 decoder="bitransformer", decoder_conf=decoder_conf, model_conf=dict(ctc_weight=0.3,
                                                                                    reverse_weight=0.3))
    (root / "train.yaml").write_text(yaml.safe_dump(train))
    (root / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)), encoding="utf-8")
    return model


@pytest.fixture(scope="module", params=["causal_layer_norm", "centred_batch_norm"])
def wenet(request, tmp_path_factory):
    from lite.wenet import WeNet
    root = tmp_path_factory.mktemp("wenet")
    conf = CAUSAL_LN if request.param == "causal_layer_norm" else CENTRED_BN
    model = make_release(root / "release", conf, seed=0 if conf is CAUSAL_LN else 1)
    assert model_zoo(["convert", "WeNet", "--checkpoint", str(root / "release"), "--output", str(root / "lite")]) == 0
    return model, WeNet.from_pretrained(str(root / "lite")), root


def test_wenet_encoder_and_ctc_equal_reference(wenet):
    model, asr, _ = wenet
    for seconds, seed in ((0.5, 1), (1.3, 2)):
        feats = asr.features(speech(seconds, seed))
        enc, logp = asr.encode(feats)
        want_enc, want_logp = model.ctc_log_probs(torch.from_numpy(feats))
        np.testing.assert_allclose(enc, want_enc.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logp, want_logp.numpy(), rtol=1e-4, atol=1e-4)


def test_ctc_prefix_beam_search_equals_exhaustive_sums():
    from lite.wenet import ctc_prefix_beam_search
    rng = np.random.default_rng(3)
    T, V = 5, 3
    z = rng.standard_normal((T, V)) * 1.5
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    exact: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(V), repeat=T):   # every alignment, collapsed to its label sequence
        labels = tuple(c for i, c in enumerate(path) if c != 0 and (i == 0 or c != path[i - 1]))
        exact[labels] = exact.get(labels, 0.0) + math.exp(sum(logp[t, c] for t, c in enumerate(path)))
    got = ctc_prefix_beam_search(logp, beam_size=64)   # wide enough to prune nothing
    got = [(p, s) for p, s in got if s > -math.inf]   # (as WeNet, a repeat after no blank leaves a -inf entry)
    assert len(got) == len(exact)
    for prefix, score in got:
        assert math.isclose(score, math.log(exact[prefix]), rel_tol=1e-9), prefix
    assert got[0][0] == max(exact, key=exact.get)


def test_wenet_rescoring_scores_equal_reference(wenet):
    from lite.wenet import ctc_prefix_beam_search
    model, asr, _ = wenet
    feats = asr.features(speech(1.0, 4))
    enc, logp = asr.encode(feats)
    hyps = [list(h) for h, _ in ctc_prefix_beam_search(logp, 4) if h][:3]
    assert hyps
    left, right = asr.decoder_scores(enc, hyps)
    memory = torch.from_numpy(enc)
    for i, h in enumerate(hyps):
        with torch.no_grad():
            lp = model.decoder.left_decoder(torch.tensor([[asr.sos] + h]), memory)[0]
            rp = model.decoder.right_decoder(torch.tensor([[asr.sos] + h[::-1]]), memory)[0]
        want_l = sum(float(lp[j, t]) for j, t in enumerate(h)) + float(lp[len(h), asr.eos])
        want_r = sum(float(rp[len(h) - 1 - j, t]) for j, t in enumerate(h)) + float(rp[len(h), asr.eos])
        assert math.isclose(left[i], want_l, rel_tol=1e-4, abs_tol=1e-3)
        assert math.isclose(right[i], want_r, rel_tol=1e-4, abs_tol=1e-3)


def test_wenet_transcripts_equal_reference(wenet):
    from lite.wenet import ctc_greedy_search, ctc_prefix_beam_search
    model, asr, _ = wenet
    audios = [speech(0.6, 5), speech(1.1, 6), speech(1.7, 7)]
    found = []
    for audio in audios:
        feats = torch.from_numpy(asr.features(audio))
        enc, logp = model.ctc_log_probs(feats)
        logp = logp.numpy()
        nbest = ctc_prefix_beam_search(logp, 10)
        hyps, ctc_scores = [list(h) for h, _ in nbest], [s for _, s in nbest]
        want = {"ctc_greedy_search": ctc_greedy_search(logp), "ctc_prefix_beam_search": hyps[0],
                "attention_rescoring": hyps[model.rescore(enc, hyps, ctc_scores, 0.3, 0.5)]}
        for mode, ids in want.items():
            kwargs = dict(ctc_weight=0.3, reverse_weight=0.5) if mode == "attention_rescoring" else {}
            assert asr.generate_ids([audio], mode=mode, **kwargs)[0] == ids, mode
        found.append(want["attention_rescoring"])
    assert any(len(f) > 2 for f in found)
    assert asr.transcribe(audios[:1])[0] == asr.detokenize(asr.generate_ids(audios[:1])[0])


def test_wenet_cli_and_errors(wenet, tmp_path, capsys):
    import wave
    _, asr, root = wenet
    path = tmp_path / "speech.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((speech(0.8, 8) * 32767).astype("<i2").tobytes())
    assert model_zoo(["run", "WeNet", "--model", str(root / "lite"), "--audio", str(path)]) == 0
    assert capsys.readouterr().out.strip() == asr.transcribe([str(path)])[0]
    with pytest.raises(ValueError, match="mode must be one of"):
        asr.generate_ids([str(path)], mode="beam")
    with pytest.raises(ValueError, match="subsampling needs 7"):
        asr.transcribe([np.zeros(800, np.float32)])
    from converter.ir import ConverterError
    from model_zoo.families.wenet import open_wenet
    (tmp_path / "final.pt").write_bytes((root / "release" / "final.pt").read_bytes()[:300])
    (tmp_path / "train.yaml").write_text("input_dim: 80\n")
    with pytest.raises(ConverterError, match="not a WeNet checkpoint"):
        open_wenet(str(tmp_path))


def test_wenet_streaming_equals_reference(wenet):
    """Chunk streaming (the encoder_chunk graph with its attention / convolution caches) on audio arriving in uneven
    pieces: the encoder output and CTC log-probabilities within 1e-4 of the reference's forward_chunk_by_chunk, for
    several chunk sizes and left contexts; the final transcript equals the reference pipeline on them; a centred
    (non-causal) model refuses to stream."""
    from lite.wenet import ctc_prefix_beam_search
    model, asr, _ = wenet
    audio = speech(1.4, 9)
    if not model.encoder.encoders[0].conv_module.causal:
        with pytest.raises(ValueError, match="no streaming encoder"):
            asr.stream(4)
        return
    feats = torch.from_numpy(asr.features(audio))
    pieces = np.split(audio, [1000, 1234, 6000, 6001, 15000])
    for chunk, left in ((4, -1), (2, 1), (3, 0)):
        session = asr.stream(chunk, left)
        partials = [session.accept(p) for p in pieces]
        assert all(isinstance(p, str) for p in partials)
        ids = session.finish_ids(ctc_weight=0.3, reverse_weight=0.5)
        enc, logp = session.encoded()
        want_enc, want_logp = model.streaming_ctc_log_probs(feats, chunk, left)
        np.testing.assert_allclose(enc, want_enc.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logp, want_logp.numpy(), rtol=1e-4, atol=1e-4)
        nbest = ctc_prefix_beam_search(want_logp.numpy(), 10)
        hyps = [list(h) for h, _ in nbest]
        assert ids == hyps[model.rescore(want_enc, hyps, [s for _, s in nbest], 0.3, 0.5)], (chunk, left)
        assert asr.generate_ids([audio], decoding_chunk_size=chunk, num_decoding_left_chunks=left, ctc_weight=0.3,
                                reverse_weight=0.5)[0] == ids
        with pytest.raises(ValueError, match="finished"):
            session.accept(pieces[0])
