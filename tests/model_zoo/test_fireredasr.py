"""FireRedASR-AED's row on the runtime: a tiny FireRedAsrAed (model_zoo.reference.fireredasr_aed, the PyTorch
reference) with seeded random weights saved as the release directory lays it out (model.pth.tar with its `args`
Namespace and model_state_dict, a binary Kaldi cmvn.ark, dict.txt), converted by `python -m model_zoo convert`;
then lite.fireredasr.FireRedASR against the reference: the Kaldi fbank against kaldi-native-fbank, the encoder
graph's states and cross keys within 1e-4, beam-search transcripts token for token (beam 1 and 3, smoothing, length
and eos penalties, utterances of several lengths); the CLI; corrupt audio and a corrupt checkpoint named."""
from __future__ import annotations

import argparse
import struct

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

ARGS = dict(idim=80, odim=40, d_model=32, n_head=4, d_inner=128, n_layers_enc=2, n_layers_dec=2, kernel_size=5,
            pe_maxlen=500, subsampling=4, sos_id=3, eos_id=4, pad_id=2, blank_id=0, residual_dropout=0.1,
            dropout_rate=0.1)
TOKENS = ["<blank>", "<unk>", "<pad>", "<sos>", "<eos>"] + [chr(0x4e00 + i) for i in range(20)] + \
    ["\u2581hello", "\u2581world", "ing", "s", "\u2581a", "\u2581cat", "ed", "\u2581the", "\u2581dog", "er", "\u2581on",
     "\u2581mat", "\u2581sat", "\u2581ran", "!"]


def write_kaldi_double_matrix(path, m: np.ndarray, key: str | None = None) -> None:
    with open(path, "wb") as f:
        if key:
            f.write(key.encode() + b" ")
        f.write(b"\0BDM " + b"\x04" + struct.pack("<i", m.shape[0]) + b"\x04" + struct.pack("<i", m.shape[1]))
        f.write(np.ascontiguousarray(m, "<f8").tobytes())


def speech(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    tone = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) for f in rng.uniform(120, 2000, 3))
    return (0.1 * tone + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def firered(tmp_path_factory):
    from model_zoo.reference.fireredasr_aed import FireRedAsrAed
    root = tmp_path_factory.mktemp("firered")
    release = root / "release"
    release.mkdir()
    torch.manual_seed(0)
    model = FireRedAsrAed(**ARGS).eval()
    with torch.no_grad():   # the decoder's cross-attention and MLPs loud, its embedding quiet: the audio decides
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (1.0 if "cross_attn" in name or "mlp" in name else 0.2))
        model.decoder.tgt_word_emb.weight.mul_(0.2)
    torch.save({"args": argparse.Namespace(**ARGS), "model_state_dict": model.state_dict()},
               release / "model.pth.tar")
    rng = np.random.default_rng(0)   # statistics of 1000 frames around a log-energy of 10
    means = rng.uniform(8, 12, 80)
    stats = np.zeros((2, 81))
    stats[0, :80], stats[0, 80] = means * 1000, 1000
    stats[1, :80] = (means ** 2 + rng.uniform(1, 4, 80)) * 1000
    write_kaldi_double_matrix(release / "cmvn.ark", stats, key="global")
    (release / "dict.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)), encoding="utf-8")
    assert model_zoo(["convert", "FireRedASR-AED-L", "--checkpoint", str(release), "--output",
                      str(root / "lite")]) == 0
    return model, stats, root


@pytest.fixture(scope="module")
def asr(firered):
    from lite.fireredasr import FireRedASR
    return FireRedASR.from_pretrained(str(firered[2] / "lite"))


def test_kaldi_fbank_and_cmvn_match_kaldi(tmp_path):
    knf = pytest.importorskip("kaldi_native_fbank")
    from lite.audio import cmvn_from_stats, kaldi_fbank, read_kaldi_matrix
    for seconds, seed in ((0.5, 1), (1.234, 2)):
        x = speech(seconds, seed) * 32768.0
        opts = knf.FbankOptions()
        opts.frame_opts.dither = 0.0
        opts.mel_opts.num_bins = 80
        opts.frame_opts.snip_edges = True
        fbank = knf.OnlineFbank(opts)
        fbank.accept_waveform(16000, x.tolist())
        want = np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])
        got = kaldi_fbank(x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)
    assert kaldi_fbank(np.zeros(300)).shape == (0, 80)   # shorter than one frame
    stats = np.array([[2.0, 4.0, 2.0], [4.0, 12.0, 0.0]])
    write_kaldi_double_matrix(tmp_path / "a.ark", stats)
    (tmp_path / "b.ark").write_text(" [\n 2 4 2\n 4 12 0 ]\n")
    for name in ("a.ark", "b.ark"):
        np.testing.assert_array_equal(read_kaldi_matrix(str(tmp_path / name)), stats)
    means, istd = cmvn_from_stats(stats)
    np.testing.assert_allclose(means, [1, 2]), np.testing.assert_allclose(istd, [1, 1 / np.sqrt(2)], rtol=1e-6)
    (tmp_path / "c.ark").write_bytes(b"\0BDM \x04\x02\x00\x00\x00\x04\x03\x00\x00\x00" + b"\0" * 10)
    with pytest.raises(ValueError, match="truncated"):
        read_kaldi_matrix(str(tmp_path / "c.ark"))


def test_fireredasr_encoder_equals_reference(firered, asr):
    model = firered[0]
    for seconds, seed in ((0.6, 3), (1.5, 4)):
        feats = asr.features(speech(seconds, seed))
        outs = asr.encode(feats)
        with torch.no_grad():
            states = model.encoder(torch.from_numpy(feats)[None])
            cross_k = model.decoder.layer_stack[1].cross_attn.w_ks(states)
        np.testing.assert_allclose(outs["encoder_states"], states.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(outs["cross_k.1"], cross_k.numpy(), rtol=1e-4, atol=1e-4)


def test_fireredasr_transcripts_equal_reference(firered, asr):
    model = firered[0]
    audios = [speech(0.4, 5), speech(0.9, 6), speech(1.6, 7)]
    settings = (dict(beam_size=1), dict(beam_size=3), dict(beam_size=3, softmax_smoothing=1.25, length_penalty=0.6),
                dict(beam_size=2, eos_penalty=0.8, decode_max_len=6))
    lengths = []
    for kwargs in settings:
        ref_kwargs = dict(kwargs)
        ref_kwargs["max_len"] = ref_kwargs.pop("decode_max_len", 0)
        got = asr.generate_ids(audios, **kwargs)
        for audio, ids in zip(audios, got):
            want = model.transcribe(torch.from_numpy(asr.features(audio)), **ref_kwargs)
            assert ids == want, kwargs
            lengths.append(len(ids))
    assert max(lengths) > 3 and len({tuple(g) for g in got}) > 1   # the random model says something
    text = asr.transcribe(audios[:1])[0]
    assert text == asr.detokenize(asr.generate_ids(audios[:1])[0])


def test_fireredasr_cli_and_errors(firered, asr, tmp_path, capsys):
    import wave
    root = firered[2]
    path = tmp_path / "speech.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((speech(0.8, 8) * 32767).astype("<i2").tobytes())
    assert model_zoo(["run", "FireRedASR-AED-L", "--model", str(root / "lite"), "--audio", str(path),
                      "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.strip() == asr.transcribe([str(path)], decode_max_len=12)[0]
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF not a wave")
    with pytest.raises(ValueError, match="broken.wav"):
        asr.transcribe([str(bad)])
    with pytest.raises(ValueError, match="shorter than one"):
        asr.transcribe([np.zeros(200, np.float32)])
    from converter.ir import ConverterError
    from model_zoo.families.fireredasr import open_fireredasr
    (tmp_path / "model.pth.tar").write_bytes((root / "release" / "model.pth.tar").read_bytes()[:500])
    with pytest.raises(ConverterError, match="not a FireRedASR-AED checkpoint"):
        open_fireredasr(str(tmp_path))
