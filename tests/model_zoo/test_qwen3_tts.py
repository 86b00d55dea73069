"""Qwen3-TTS CustomVoice / VoiceDesign / Base (x-vector cloning) on the runtime: a tiny Qwen3TTSForConditionalGeneration (qwen-tts, the
reference: talker, text projection, code predictor with its input projection) and a tiny 12 Hz codec decoder with
seeded random weights, saved as the released directory lays them out (config.json, model.safetensors, the Qwen
tokenizer, speech_tokenizer/), converted on first use by lite.qwen3_tts.Qwen3TTS; against the reference: the prompt
rows (streaming and non-streaming, a language, auto with a dialect speaker, an instruction) equal to what the
project's generate hands its talker, greedy codes equal to the project's own generate and to a loop over its talker /
code-predictor modules (repetition penalty, suppressed special ids, two frames before eos), the x-vector of a
reference voice, the waveform within 1e-4 of its codec decoder; bad speaker / language named."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.model_zoo.qwen_tts_reference import tokenizer_12hz, tts_model

SPECIAL = {"<|im_start|>": 100, "<|im_end|>": 101, "<tts_pad>": 102, "<tts_bos>": 103, "<tts_eos>": 104}
WORDS = ["<unk>", "\n", "assistant", "user", "hello", "world", "the", "cat", "sat", "on", "a", "mat", "speak",
         "softly", "and", "slowly"]
GROUPS, CODES = 4, 76
TALKER = dict(vocab_size=1100, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
              rope_scaling={"mrope_section": [2, 1, 1], "interleaved": True, "type": "default"},
              num_code_groups=GROUPS, text_hidden_size=24, text_vocab_size=110, codec_eos_token_id=80,
              codec_think_id=81, codec_nothink_id=82, codec_think_bos_id=83, codec_think_eos_id=84, codec_pad_id=85,
              codec_bos_id=86, pad_token_id=None, spk_id={"vivian": 95, "eric": 96},
              spk_is_dialect={"vivian": False, "eric": "sichuan_dialect"},
              codec_language_id={"english": 90, "chinese": 91, "sichuan_dialect": 92},
              code_predictor_config=dict(vocab_size=CODES, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                         num_code_groups=GROUPS, pad_token_id=None))
CODEC = dict(codebook_size=CODES, hidden_size=32, latent_dim=48, num_attention_heads=4, num_key_value_heads=4,
             intermediate_size=64, num_hidden_layers=2, num_quantizers=GROUPS, upsample_rates=[2, 3],
             upsampling_ratios=[2], decoder_dim=32, sliding_window=5, codebook_dim=16, max_position_embeddings=512)


def text_tokenizer():
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(WORDS)}
    vocab.update(SPECIAL)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("\n"), "isolated"),
                                                 pre_tokenizers.Split(Regex(" "), "removed")])   # "\n" a token
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    return tok, PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>")


SPEAKER_ENCODER = dict(mel_dim=128, enc_dim=32, enc_channels=[16, 16, 16, 16, 48], enc_kernel_sizes=[5, 3, 3, 3, 1],
                       enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=8, enc_res2net_scale=4,
                       enc_se_channels=8, sample_rate=24000)


@pytest.fixture(scope="module", params=["custom_voice", "voice_design", "base"])
def tts(request, tmp_path_factory):
    from safetensors.torch import save_file
    modeling, configuration = tts_model()
    codec_modeling, codec_configuration = tokenizer_12hz()
    root = tmp_path_factory.mktemp(f"qwen3_tts_{request.param}")
    talker = dict(TALKER)
    if request.param != "custom_voice":
        talker.update(spk_id={}, spk_is_dialect={})
    extra = dict(speaker_encoder_config=SPEAKER_ENCODER) if request.param == "base" else {}
    config = configuration.Qwen3TTSConfig(talker_config=talker, tts_model_type=request.param, tts_model_size="1b7",
                                          **extra,
                                          tokenizer_type="qwen3_tts_tokenizer_12hz", im_start_token_id=100,
                                          im_end_token_id=101, tts_pad_token_id=102, tts_bos_token_id=103,
                                          tts_eos_token_id=104)
    torch.manual_seed(7)
    model = modeling.Qwen3TTSForConditionalGeneration(config).eval()
    codec = codec_modeling.Qwen3TTSTokenizerV2Decoder._from_config(
        codec_configuration.Qwen3TTSTokenizerV2DecoderConfig(**CODEC)).eval()
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(codec.named_parameters()):
            if name.endswith("cluster_usage"):
                p.uniform_(0.5, 2.0)
            else:
                p.add_(torch.randn_like(p) * (0.05 if name.startswith(("pre_", "upsample", "decoder", "quantizer"))
                                               else 0.3))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(config.to_dict()))
    _, fast = text_tokenizer()
    fast.save_pretrained(str(root))
    (root / "speech_tokenizer").mkdir()
    save_file({"decoder." + k: v.contiguous() for k, v in codec.state_dict().items()},
              str(root / "speech_tokenizer" / "model.safetensors"))
    (root / "speech_tokenizer" / "config.json").write_text(json.dumps(
        {"model_type": "qwen3_tts_tokenizer_12hz", "decoder_config": CODEC, "decode_upsample_rate": 12}))
    from lite.qwen3_tts import Qwen3TTS
    return model, codec, Qwen3TTS.from_pretrained(str(root)), request.param


def voice(seed: int) -> np.ndarray:
    """A second of a reference "voice" at 24 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(24000) / 24000
    return (0.3 * np.sin(2 * np.pi * rng.uniform(100, 300) * t * (1 + 0.1 * t)) +
            0.02 * rng.standard_normal(t.size)).astype(np.float32)


def reference_prompt(model, text, language, speaker, instruct, non_streaming, embedding=None):
    """What the project's generate hands its talker (captured, the talker not run); `embedding`: a Base model's
    reference x-vector (its x_vector_only_mode)."""
    tok, _ = text_tokenizer()
    captured = {}

    def capture(**kwargs):
        captured.update(kwargs)
        raise StopIteration
    model.talker.generate = capture
    ids = torch.tensor([tok.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n").ids])
    instruct_ids = None if instruct is None else [torch.tensor([tok.encode(
        f"<|im_start|>user\n{instruct}<|im_end|>\n").ids])]
    clone = None if embedding is None else {"ref_spk_embedding": [embedding], "x_vector_only_mode": [True],
                                            "icl_mode": [False], "ref_code": None}
    try:
        with torch.no_grad(), pytest.raises(StopIteration):
            model.generate(input_ids=[ids], instruct_ids=instruct_ids, languages=[language], speakers=[speaker],
                           non_streaming_mode=non_streaming, voice_clone_prompt=clone)
    finally:
        del model.talker.generate   # the class's own again
    return captured


def reference_generate(model, text, language, speaker, instruct, non_streaming, embedding, frames: int):
    """The project's own generate, greedy (talker and code predictor), up to `frames` frames."""
    tok, _ = text_tokenizer()
    ids = torch.tensor([tok.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n").ids])
    instruct_ids = None if instruct is None else [torch.tensor([tok.encode(
        f"<|im_start|>user\n{instruct}<|im_end|>\n").ids])]
    clone = None if embedding is None else {"ref_spk_embedding": [embedding], "x_vector_only_mode": [True],
                                            "icl_mode": [False], "ref_code": None}
    with torch.no_grad():
        codes, _ = model.generate(input_ids=[ids], instruct_ids=instruct_ids, languages=[language],
                                  speakers=[speaker], non_streaming_mode=non_streaming, voice_clone_prompt=clone,
                                  max_new_tokens=frames, do_sample=False, subtalker_dosample=False)
    return codes[0].tolist()


def reference_codes(model, captured, frames: int) -> list[list[int]]:
    """Greedy frames with the reference's modules: the talker over the whole sequence, codec_head with the generation
    config's processors, the code predictor over its growing input."""
    talker, predictor = model.talker, model.talker.code_predictor
    seq, trailing, pad = captured["inputs_embeds"], captured["trailing_text_hidden"], captured["tts_pad_embed"]
    eos, out, previous = captured["eos_token_id"], [], []
    with torch.no_grad():
        for step in range(frames):
            hidden = talker.model(inputs_embeds=seq).last_hidden_state[:, -1:]
            logits = talker.codec_head(hidden)[0, 0]
            if previous:
                seen = torch.tensor(sorted(set(previous)))
                s = logits[seen]
                logits[seen] = torch.where(s < 0, s * 1.05, s / 1.05)
            logits[captured["suppress_tokens"]] = -float("inf")
            if step < 2:
                logits[eos] = -float("inf")
            c0 = int(logits.argmax())
            if c0 == eos:
                break
            previous.append(c0)
            rows = [hidden, talker.get_input_embeddings()(torch.tensor([[c0]]))]
            codes = [c0]
            for j in range(GROUPS - 1):
                h = predictor.model(inputs_embeds=predictor.small_to_mtp_projection(torch.cat(rows, 1)))
                code = int(predictor.lm_head[j](h.last_hidden_state[:, -1]).argmax())
                codes.append(code)
                rows.append(predictor.get_input_embeddings()[j](torch.tensor([[code]])))
            out.append(codes)
            row = sum(r for r in rows[1:]) + (trailing[:, step:step + 1] if step < trailing.shape[1] else pad)
            seq = torch.cat([seq, row], 1)
    return out


CASES = {"custom_voice": [("hello world the cat sat", "english", "vivian", None, False),
                          ("the cat sat on a mat", "auto", "eric", "speak softly", True)],
         "voice_design": [("hello world the cat sat", "english", None, "speak softly and slowly", True),
                          ("the cat sat on a mat hello", "chinese", None, "speak slowly", False)],
         "base": [("hello world the cat sat", "english", None, None, True),
                  ("the cat sat on a mat hello", "auto", None, None, False)]}


def reference_embedding(model, kind):
    """The Base model's x-vector of the reference voice by the project's extract_speaker_embedding (None else)."""
    if kind != "base":
        return None
    with torch.no_grad():
        return model.extract_speaker_embedding(voice(3), 24000)


def test_qwen3_tts_speaker_embedding_equals_reference(tts):
    """Base: the ECAPA-TDNN graph on lite.audio's log mel magnitudes against extract_speaker_embedding."""
    model, _, lite, kind = tts
    if kind != "base":
        with pytest.raises(ValueError, match="no speaker encoder"):
            lite.speaker_embedding(voice(3))
        return
    want = reference_embedding(model, kind).numpy()
    np.testing.assert_allclose(lite.speaker_embedding(voice(3)), want, rtol=1e-4, atol=1e-4)


def test_qwen3_tts_prompt_equals_reference(tts):
    model, _, lite, kind = tts
    tok, _ = text_tokenizer()
    assert tok.encode("<|im_start|>assistant\nhello world<|im_end|>\n").ids == [100, 2, 1, 4, 5, 101, 1]
    embedding = reference_embedding(model, kind)
    for text, language, speaker, instruct, non_streaming in CASES[kind]:
        want = reference_prompt(model, text, language, speaker, instruct, non_streaming, embedding)
        rows, trailing, pad = lite.prompt(text, language, speaker, instruct, non_streaming,
                                          None if embedding is None else embedding.numpy())
        np.testing.assert_allclose(rows, want["inputs_embeds"][0].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(trailing, want["trailing_text_hidden"][0].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(pad, want["tts_pad_embed"][0, 0].numpy(), rtol=1e-5, atol=1e-5)


def test_qwen3_tts_codes_and_waveform_equal_reference(tts):
    model, codec, lite, kind = tts
    lengths = []
    embedding = reference_embedding(model, kind)
    reference = dict(reference_audio=voice(3)) if kind == "base" else {}
    for text, language, speaker, instruct, non_streaming in CASES[kind]:
        captured = reference_prompt(model, text, language, speaker, instruct, non_streaming, embedding)
        want = reference_codes(model, captured, 12)
        got = lite.generate_codes(text, language, speaker, instruct, non_streaming, max_new_tokens=12,
                                  do_sample=False, subtalker_dosample=False, **reference)
        assert got.tolist() == want, (text, language, speaker)
        # (the project's generate completes a frame's codes when it feeds codebook 0 back, so its last talker step
        # gives none: 13 steps for 12 frames)
        assert got.tolist() == reference_generate(model, text, language, speaker, instruct, non_streaming,
                                                  embedding, 13)
        lengths.append(len(want))
        if len(want):
            with torch.no_grad():
                wave_want = codec.chunked_decode(torch.from_numpy(got.T)[None])[0, 0].numpy()
            wave = lite.decode(got)
            np.testing.assert_allclose(wave, wave_want, rtol=1e-4, atol=1e-4)
            assert wave.shape == (len(got) * 12,)
    assert max(lengths) > 2


def test_qwen3_tts_bad_requests(tts):
    _, _, lite, kind = tts
    with pytest.raises(ValueError, match="language"):
        lite.prompt("hello", "klingon", None, "speak softly")
    if kind == "custom_voice":
        with pytest.raises(ValueError, match="speaker"):
            lite.prompt("hello", "english", "nobody")
    elif kind == "voice_design":
        with pytest.raises(ValueError, match="instruction"):
            lite.prompt("hello", "english")
    else:
        with pytest.raises(ValueError, match="reference_audio"):
            lite.prompt("hello", "english")
        with pytest.raises(NotImplementedError, match="in-context"):
            lite.generate_codes("hello", reference_audio=voice(3), reference_text="hi there")


def test_qwen3_tts_convert_and_cli_speak(tts, tmp_path):
    """`model_zoo convert` writes the three graphs and the tensors the pipeline reads itself (the converted directory
    speaks without the checkpoint); `model_zoo run --output x.wav` writes what Qwen3TTS.speak gives (sampled, the
    same seed)."""
    import wave

    from lite.audio import load_audio, write_wav
    from lite.qwen3_tts import Qwen3TTS
    from model_zoo.cli import main as model_zoo
    model, _, lite, kind = tts
    name = {"custom_voice": "Qwen3-TTS-12Hz-1.7B-CustomVoice", "voice_design": "Qwen3-TTS-12Hz-1.7B-VoiceDesign",
            "base": "Qwen3-TTS-12Hz-1.7B-Base"}[kind]
    source = lite.model_dir
    assert model_zoo(["convert", name, "--checkpoint", source, "--output", str(tmp_path / "tts")]) == 0
    converted = Qwen3TTS.from_pretrained(str(tmp_path / "tts"))
    write_wav(str(tmp_path / "voice.wav"), voice(3), 24000)
    options = {"custom_voice": dict(speaker="vivian"), "voice_design": dict(instruct="speak softly"),
               "base": dict(reference_audio=str(tmp_path / "voice.wav"))}[kind]
    codes = converted.generate_codes("hello world the cat sat", "english", max_new_tokens=8, do_sample=False,
                                     subtalker_dosample=False, **options)
    assert codes.tolist() == lite.generate_codes("hello world the cat sat", "english", max_new_tokens=8,
                                                 do_sample=False, subtalker_dosample=False, **options).tolist()
    out = tmp_path / "speech.wav"
    extra = {"custom_voice": ["--speaker", "vivian"], "voice_design": ["--instruct", "speak softly"],
             "base": ["--audio", str(tmp_path / "voice.wav")]}[kind]
    assert model_zoo(["run", name, "--model", str(tmp_path / "tts"), "--prompt", "hello world the cat sat",
                      "--language", "english", "--output", str(out), "--seed", "3"] + extra) == 0
    wave_want, rate = converted.speak("hello world the cat sat", language="english", seed=3, **options)
    with wave.open(str(out)) as w:
        assert w.getframerate() == rate == 24000 and w.getnchannels() == 1
    got = load_audio(str(out), 24000)
    np.testing.assert_allclose(got, np.clip(wave_want, -1, 1), atol=2 / 32768)


def test_qwen3_tts_speech_endpoint_with_the_openai_client(tts):
    """/v1/audio/speech through the official openai client: the WAV bytes of Qwen3TTS.speak (the same seed), raw PCM
    too; an empty input, a wrong speed and a transcription request to a speaking model are refused."""
    openai = pytest.importorskip("openai")
    import io

    from lite.audio import wav_bytes
    from lite.serve import start_in_thread
    from lite.speech_server import create_speech_app
    _, _, lite, kind = tts
    options = dict(voice="vivian") if kind == "custom_voice" else dict(voice="alloy", instructions="speak softly")
    reference = None
    if kind == "base":
        import base64
        reference = wav_bytes(voice(3), 24000)
        options = dict(voice="alloy", extra_body={"reference_audio": base64.b64encode(reference).decode()})
    url, srv, thread = start_in_thread(create_speech_app(lite, "tiny-tts"))
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        extra = {"language": "english", "seed": 5, **options.pop("extra_body", {})}
        got = client.audio.speech.create(model="tiny-tts", input="hello world the cat sat", response_format="wav",
                                         extra_body=extra, **options)
        wave, rate = lite.speak("hello world the cat sat", language="english", seed=5,
                                speaker=options["voice"] if kind == "custom_voice" else None,
                                instruct=options.get("instructions"), reference_audio=reference)
        assert got.content == wav_bytes(wave, rate)
        pcm = client.audio.speech.create(model="tiny-tts", input="hello world the cat sat", response_format="pcm",
                                         extra_body=extra, **options)
        assert pcm.content == wav_bytes(wave, rate)[44:]
        with pytest.raises(openai.BadRequestError, match="input"):
            client.audio.speech.create(model="tiny-tts", input=" ", extra_body=extra, **options)
        with pytest.raises(openai.BadRequestError, match="speed"):
            client.audio.speech.create(model="tiny-tts", input="hello", speed=2.0, extra_body=extra, **options)
        with pytest.raises(openai.BadRequestError, match="does not transcribe"):
            client.audio.transcriptions.create(model="tiny-tts", file=("a.wav", io.BytesIO(wav_bytes(wave, rate))))
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
