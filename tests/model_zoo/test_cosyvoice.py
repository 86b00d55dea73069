"""CosyVoice 2 and 3 on the runtime: tiny release directories (tests/model_zoo/cosyvoice_release.py: cosyvoice<v>.yaml,
llm.pt / flow.pt / hift.pt with seeded random weights, CosyVoice-BlankEN/, the two ONNX front-end models) converted
by model_zoo.families.cosyvoice.convert_cosyvoice and run by lite.cosyvoice.CosyVoice2, against the PyTorch
references (model_zoo.reference.cosyvoice_*) and the front end as the original computes it (torch STFT for the flow's
mel, kaldi-native-fbank for CAM++'s fbank, ONNX Runtime for the two ONNX models): the LM's log-probabilities within
1e-4 and its greedy tokens equal (zero-shot, cross-lingual and instruct prompts), the prompt features, the whole
zero-shot pipeline's waveform, repetition-aware sampling against its definition, and refusals of bad input."""
from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch

from tests.model_zoo.cosyvoice_release import SPEECH_TOKENS, write_release


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def cosy(request, tmp_path_factory):
    from lite.cosyvoice import CosyVoice
    from model_zoo.cli import main as model_zoo
    root = tmp_path_factory.mktemp(f"cosyvoice{request.param}")
    release, out = str(root / "release"), str(root / "converted")
    refs = write_release(release, version=request.param)
    name = "CosyVoice2-0.5B" if request.param == 2 else "CosyVoice3-0.5B"
    assert model_zoo(["convert", name, "--checkpoint", release, "--output", out]) == 0
    return {"refs": refs, "release": release, "out": out, "tts": CosyVoice(out), "version": request.param}


def _ref_tokenizer(cosy):
    """The original's QwenTokenizer (CosyVoice 2) / CosyVoice3Tokenizer: CosyVoice-BlankEN with the version's
    special tokens added."""
    from transformers import AutoTokenizer

    from model_zoo.families.cosyvoice import SPECIAL_TOKENS, SPECIAL_TOKENS_V3
    tok = AutoTokenizer.from_pretrained(os.path.join(cosy["release"], "CosyVoice-BlankEN"))
    tok.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                            "additional_special_tokens": list(SPECIAL_TOKENS if cosy["version"] == 2 else
                                                              SPECIAL_TOKENS_V3)})
    return lambda text: tok([text], return_tensors="pt")["input_ids"][0].tolist()


def _speech(seconds: float, rate: int, seed: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) +
            0.02 * rng.standard_normal(t.size)).astype(np.float32)


def _wav(samples: np.ndarray, rate: int) -> bytes:
    from lite.audio import wav_bytes
    return wav_bytes(samples, rate)


def _matcha_mel(wave: np.ndarray, fmax: float) -> np.ndarray:
    """matcha.utils.audio.mel_spectrogram as the original's feat_extractor calls it (n_fft 1920, hop 480, 80 mels up
    to `fmax`: CosyVoice 2 8 kHz, 3 the Nyquist frequency; center False), in torch."""
    from lite.audio import mel_filters
    y = torch.from_numpy(wave)[None]
    pad = (1920 - 480) // 2
    y = torch.nn.functional.pad(y[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(y, 1920, hop_length=480, win_length=1920, window=torch.hann_window(1920), center=False,
                      return_complex=True)
    mag = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    mel = torch.from_numpy(mel_filters(24000, 1920, 80, 0.0, fmax)).T @ mag[0]
    return torch.log(torch.clamp(mel, min=1e-5)).T.numpy()


def _reference_prompt(release: str, version: int, wave24: np.ndarray, wave16: np.ndarray) -> dict:
    """frontend_zero_shot's prompt features: ONNX Runtime on the release's ONNX models."""
    import kaldi_native_fbank as knf
    import onnxruntime as ort

    from lite.audio import log_mel
    feat = _matcha_mel(wave24, 8000.0 if version == 2 else 12000.0)
    mel = log_mel(wave16, 128, 16000)
    st = ort.InferenceSession(os.path.join(release, f"speech_tokenizer_v{version}.onnx"),
                              providers=["CPUExecutionProvider"])
    tokens = st.run(None, {"feats": mel[None], "feats_length": np.array([mel.shape[1]], np.int32)})[0].reshape(-1)
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.mel_opts.num_bins = 80
    fb = knf.OnlineFbank(opts)
    fb.accept_waveform(16000, wave16.tolist())
    fb.input_finished()
    fbank = np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)]).astype(np.float32)
    fbank = fbank - fbank.mean(axis=0, keepdims=True)
    cp = ort.InferenceSession(os.path.join(release, "campplus.onnx"), providers=["CPUExecutionProvider"])
    embedding = cp.run(None, {"input": fbank[None]})[0].reshape(-1)
    n = min(len(feat) // 2, len(tokens))
    return {"feat": feat[:2 * n], "tokens": tokens[:n].astype(np.int64), "embedding": embedding}


def _greedy_reference_tokens(refs, text_ids, prompt_ids, prompt_tokens) -> list[int]:
    from model_zoo.reference.cosyvoice_llm import greedy_sampling
    llm = refs["llm"]
    llm.sampling = greedy_sampling
    return list(llm.inference(torch.tensor(text_ids), torch.tensor(prompt_ids, dtype=torch.long),
                              torch.as_tensor(prompt_tokens, dtype=torch.long)))


def test_tokenizer_ids_equal_the_originals(cosy):
    ref = _ref_tokenizer(cosy)
    texts = ["hello world .", "speak softly<|endofprompt|>", "[breath] the cat sat on a mat"]
    if cosy["version"] == 3:
        texts.append("You are a helpful assistant.<|endofsystem|> [HH][AH0][L][OW1] [n][ǐ][h][ǎo]")
    for text in texts:
        assert cosy["tts"].text_ids(text) == ref(text)
    if cosy["version"] == 3:
        assert ref("[ǜ]") == [300 + 279]   # the last of CosyVoice 3's 280 added tokens (the BPE has 300)
    assert cosy["tts"].text_ids("<|endofprompt|>") == [ref("<|endofprompt|>")[0]] and \
        ref("<|endofprompt|>")[0] >= 300   # an added id, after the base vocabulary


def test_llm_log_probabilities_within_1e4(cosy):
    tts, llm = cosy["tts"], cosy["refs"]["llm"]
    text, prompt, prompt_tokens = [1, 2, 9, 10], [3, 4, 5], [7, 1, 30, 2]
    after = [5, 6, 7]
    want = llm.step_logits(torch.tensor(text), torch.tensor(prompt), torch.tensor(prompt_tokens), after).numpy()
    rows, ids, positions = tts._prompt(prompt + text, np.asarray(prompt_tokens))
    tts.llm.ensure(64)
    got = [tts.llm.step(ids, 0, np.zeros(1, np.int64), {"embed_rows": positions, "embeds": rows})[0]]
    position = ids.shape[1]
    for t in after:
        got.append(tts.llm.step(np.array([[t]]), position, np.zeros(1, np.int64),
                                {"embed_rows": np.zeros((0, 1), np.int64), "embeds": np.zeros((0, 32), np.float32)})[0])
        position += 1
    got = np.stack(got).astype(np.float64)
    got = got - got.max(axis=1, keepdims=True)
    got = got - np.log(np.exp(got).sum(axis=1, keepdims=True))
    assert got.shape == (len(after) + 1, SPEECH_TOKENS + (3 if cosy["version"] == 2 else 200))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual", "instruct"])
def test_greedy_tokens_equal_reference(cosy, mode):
    tts, ref = cosy["tts"], _ref_tokenizer(cosy)
    text = "please read this line slowly and softly ."
    prompt_tokens = [3, 17, 17, 5, 22, 8, 1, 39]
    prompt = {"zero_shot": "hello world", "cross_lingual": "", "instruct": "speak happily<|endofprompt|>"}[mode]
    speech = prompt_tokens if mode == "zero_shot" else []
    want = _greedy_reference_tokens(cosy["refs"], ref(text), ref(prompt) if prompt else [], speech)
    got = tts.generate_tokens(tts.text_ids(text), tts.text_ids(prompt) if prompt else [], speech, greedy=True)
    assert got == want
    assert 2 * len(ref(text)) <= len(got) <= 20 * len(ref(text))   # the min / max token-text ratios


def test_prompt_features_equal_the_original_front_end(cosy):
    wave24 = _speech(1.3, 24000, 1)
    from lite.audio import resample
    wave16 = resample(wave24, 24000, 16000)
    got = cosy["tts"].prompt_features((wave24, 24000))
    want = _reference_prompt(cosy["release"], cosy["version"], wave24, wave16)
    assert got["feat"].shape == want["feat"].shape and got["feat"].shape[1] == 80
    np.testing.assert_allclose(got["feat"], want["feat"], atol=2e-4)
    assert got["tokens"].tolist() == want["tokens"].tolist() and len(got["tokens"]) == len(got["feat"]) // 2
    np.testing.assert_allclose(got["embedding"], want["embedding"], atol=2e-3)   # fbank: float32 vs knf's


def test_zero_shot_waveform_equals_reference_pipeline(cosy):
    """tokens (greedy) -> flow mel -> HiFT waveform, the reference modules fed the same prompt features and the
    vocoder the same random draws."""
    tts, refs, ref_tok = cosy["tts"], cosy["refs"], _ref_tokenizer(cosy)
    wave24 = _speech(1.0, 24000, 2)
    p = tts.prompt_features((wave24, 24000))
    text, prompt_text = "the cat sat on a mat .", "hello world"
    tokens = tts.generate_tokens(tts.text_ids(text), tts.text_ids(prompt_text), p["tokens"], greedy=True)
    assert tokens == _greedy_reference_tokens(refs, ref_tok(text), ref_tok(prompt_text), p["tokens"])
    mel = tts.flow.mel(np.asarray(tokens), p["tokens"], p["feat"], p["embedding"])
    with torch.no_grad():
        pt = p["tokens"]
        want_mel = refs["flow"].inference(torch.tensor([tokens]), torch.tensor([len(tokens)]), torch.tensor(pt[None]),
                                          torch.tensor([len(pt)]), torch.from_numpy(p["feat"][None]),
                                          torch.tensor([len(p["feat"])]), torch.from_numpy(p["embedding"][None]))
    want_mel = want_mel[0].numpy() if isinstance(want_mel, torch.Tensor) else want_mel[0][0].numpy()
    assert mel.shape == want_mel.shape == (80, 2 * len(tokens))
    np.testing.assert_allclose(mel, want_mel, atol=1e-4 * max(1.0, np.abs(want_mel).max()))
    wave = tts.token2wav(tokens, p["tokens"], p["feat"], p["embedding"], seed=7)
    phase, noise = tts.vocoder.draws(np.random.default_rng(7), mel.shape[1])   # the draws token2wav's rng makes
    with torch.no_grad():
        want = refs["hift"].inference(torch.from_numpy(mel[None]), phase=torch.from_numpy(phase),
                                      noise=torch.from_numpy(noise))
    want = (want[0] if isinstance(want, tuple) else want).numpy().reshape(-1)
    assert wave.shape == want.shape == (2 * len(tokens) * 480,)
    np.testing.assert_allclose(wave, want, atol=1e-4)
    assert np.abs(wave).max() <= 0.99 + 1e-6


def test_speak_modes_and_speed(cosy):
    tts = cosy["tts"]
    prompt = _wav(_speech(1.0, 16000, 3), 16000)
    zero, rate = tts.speak("hello world .", reference_audio=prompt, reference_text="the cat", seed=1)
    cross, _ = tts.speak("hello world .", reference_audio=prompt, seed=1)
    slow, _ = tts.zero_shot("hello world .", "the cat", prompt, greedy=True, speed=0.5)
    normal, _ = tts.zero_shot("hello world .", "the cat", prompt, greedy=True)
    assert rate == 24000 and zero.dtype == np.float32 and zero.size % 480 == 0 and cross.size % 480 == 0
    assert slow.size == 2 * normal.size   # half speed: twice the mel frames
    again, _ = tts.speak("hello world .", reference_audio=prompt, reference_text="the cat", seed=1)
    np.testing.assert_array_equal(again, zero)   # seeded sampling and vocoder noise are reproducible


def test_ras_sampling_follows_its_definition():
    from lite.cosyvoice import ras_choose
    probs = np.array([0.5, 0.25, 0.15, 0.06, 0.04])
    logp = np.log(probs)
    rng = np.random.default_rng(0)
    picks = np.array([ras_choose(logp, [], rng) for _ in range(4000)])
    # nucleus: 0.5 + 0.25 < 0.8, so the third id is taken too (it crosses top_p); never the last two
    assert set(np.unique(picks)) == {0, 1, 2}
    np.testing.assert_allclose(np.bincount(picks, minlength=5)[:3] / len(picks), probs[:3] / 0.9, atol=0.03)
    assert {ras_choose(logp, [], rng, top_k=1) for _ in range(50)} == {0}
    # a pick already in the last 10 tokens (once: 10 x 0.1) is redrawn from the whole distribution
    picks = np.array([ras_choose(logp, [0, 1, 2], rng) for _ in range(4000)])
    np.testing.assert_allclose(np.bincount(picks, minlength=5) / len(picks), probs, atol=0.03)
    picks = np.array([ras_choose(logp, [0] + [4] * 10, rng) for _ in range(2000)])   # 0 fell out of the window
    assert set(np.unique(picks)) <= {0, 1, 2, 4} and (picks == 4).sum() < 0.1 * len(picks)


def test_bad_input_is_refused_clearly(cosy, tmp_path):
    from converter.ir import ConverterError
    from model_zoo.families.cosyvoice import convert_cosyvoice
    tts = cosy["tts"]
    with pytest.raises(ValueError, match="reference audio"):
        tts.speak("hello")
    with pytest.raises(ValueError, match="no tokens"):
        tts.generate_tokens([], [], [])
    with pytest.raises(ValueError, match="speech tokens must be in"):
        tts.generate_tokens([1, 2], [], [SPEECH_TOKENS])
    with pytest.raises(ValueError):
        tts.zero_shot("hello", "world", b"RIFF not really a wave file")
    with pytest.raises(ValueError):
        tts.flow.mel(np.array([1, 2]), np.array([3]), np.zeros((5, 80), np.float32), np.zeros(192, np.float32))
    with pytest.raises(ConverterError, match="cosyvoice2.yaml or cosyvoice3.yaml"):
        convert_cosyvoice(str(tmp_path), str(tmp_path / "out"))
    from tests.model_zoo.cosyvoice_release import yaml_text
    (tmp_path / "cosyvoice3.yaml").write_text(yaml_text(2))   # CosyVoice 2's classes under 3's name
    with pytest.raises(ConverterError, match="not CosyVoice 3's CosyVoice3LM"):
        convert_cosyvoice(str(tmp_path), str(tmp_path / "out"))
    (tmp_path / "cosyvoice3.yaml").write_text("llm: [1, 2\n")
    with pytest.raises(ConverterError, match="not a readable YAML"):
        convert_cosyvoice(str(tmp_path), str(tmp_path / "out"))
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(cosy["release"], broken)
    with open(broken / "flow.pt", "r+b") as f:
        f.truncate(os.path.getsize(broken / "flow.pt") // 2)
    with pytest.raises(ConverterError, match="flow.pt"):
        convert_cosyvoice(str(broken), str(tmp_path / "out2"))
    assert not (tmp_path / "out2" / "flow_encoder.ms").exists()


def test_model_zoo_run_and_speech_endpoint(cosy, tmp_path):
    """`model_zoo run ... --audio --reference-text --output x.wav` writes what speak returns; /v1/audio/speech through
    the official openai client answers the same WAV bytes (reference_audio / reference_text in the body, the same
    seed); a request without a reference voice is refused."""
    openai = pytest.importorskip("openai")
    import base64

    from lite.audio import wav_bytes
    from lite.serve import start_in_thread
    from lite.speech_server import create_speech_app
    from model_zoo.cli import main as model_zoo
    tts = cosy["tts"]
    prompt = _wav(_speech(0.8, 16000, 4), 16000)
    (tmp_path / "prompt.wav").write_bytes(prompt)
    name = "CosyVoice2-0.5B" if cosy["version"] == 2 else "CosyVoice3-0.5B"
    wave, rate = tts.speak("the cat sat .", reference_audio=prompt, reference_text="hello world", seed=0)
    assert model_zoo(["run", name, "--model", cosy["out"], "--prompt", "the cat sat .", "--audio",
                      str(tmp_path / "prompt.wav"), "--reference-text", "hello world", "--output",
                      str(tmp_path / "out.wav")]) == 0
    assert (tmp_path / "out.wav").read_bytes() == wav_bytes(wave, rate)
    url, srv, thread = start_in_thread(create_speech_app(tts, "tiny-cosyvoice"))
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        extra = {"seed": 0, "reference_audio": base64.b64encode(prompt).decode(), "reference_text": "hello world"}
        got = client.audio.speech.create(model="tiny-cosyvoice", input="the cat sat .", voice="alloy",
                                         response_format="wav", extra_body=extra)
        assert got.content == wav_bytes(wave, rate)
        with pytest.raises(openai.BadRequestError, match="reference audio"):
            client.audio.speech.create(model="tiny-cosyvoice", input="the cat sat .", voice="alloy")
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
