"""Qwen3-ASR's rows on the runtime: a tiny Qwen3ASRForConditionalGeneration with seeded random weights, its tokenizer
(audio placeholder tokens, a non-special <asr_text>) and chat template, converted by `python -m model_zoo convert`;
lite.qwen3_asr.Qwen3ASR against transformers' Qwen3ASRProcessor + generate: log-mel features within 1e-4 of the
feature extractor, the audio graph equal to get_audio_features (clips of one, several and partial chunks, one
shorter than the minimum length; several attention windows), greedy tokens equal with a forced language and with
language detection, a 44.1 kHz WAV file resampled, a corrupt file named."""
from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>", "<|endoftext|>"]
WORDS = ("<unk> <pad> system user assistant language English Chinese None hello world the cat sat on a mat "
         "context words").split()
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'audio' %}"
            "<|audio_start|><|audio_pad|><|audio_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% endif %}")


@pytest.fixture(scope="module")
def asr(tmp_path_factory):
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import (PreTrainedTokenizerFast, Qwen3ASRConfig, Qwen3ASRFeatureExtractor,
                              Qwen3ASRForConditionalGeneration)
    root = tmp_path_factory.mktemp("qwen3_asr")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tok.add_tokens([AddedToken("<asr_text>", special=False)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"})
    tokenizer.chat_template = TEMPLATE
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL + ["<asr_text>"]}
    torch.manual_seed(0)
    config = Qwen3ASRConfig(
        audio_config=dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32, d_model=16,
                          output_dim=32, downsample_hidden_size=8, n_window=50, n_window_infer=200),
        text_config=dict(vocab_size=len(WORDS) + len(SPECIAL) + 1, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=512),
        audio_token_id=ids["<|audio_pad|>"], eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]],
        pad_token_id=ids["<|im_end|>"])
    model = Qwen3ASRForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.generation_config.eos_token_id = [ids["<|endoftext|>"], ids["<|im_end|>"]]
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    Qwen3ASRFeatureExtractor().save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", "Qwen3-ASR-0.6B", "--checkpoint", str(root / "ckpt"), "--output",
                      str(root / "lite")]) == 0
    return model, tokenizer, ids, root


def clip(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def write_wav(path, samples: np.ndarray, rate: int) -> None:
    """A mono 16-bit PCM WAV file."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def reference_processor(tokenizer):
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor
    return Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tokenizer,
                             chat_template=TEMPLATE)


def test_features_and_audio_graph_equal_transformers(asr):
    from lite.qwen3_asr import Qwen3ASR
    model, tokenizer, _, root = asr
    pipeline = Qwen3ASR.from_pretrained(str(root / "lite"), num_blocks=64)
    processor = reference_processor(tokenizer)
    for seconds, seed in ((3.2, 1), (0.3, 2), (1.0, 3), (5.55, 4)):
        audio = clip(seconds, seed)
        ref = processor.feature_extractor(audio, sampling_rate=16000, padding=True, return_attention_mask=True,
                                          return_tensors="pt")
        features, valid = pipeline.features(audio)
        assert valid == int(ref["attention_mask"].sum())
        np.testing.assert_allclose(features, ref["input_features"][0].numpy(), atol=1e-4)
        with torch.no_grad():
            want = model.model.get_audio_features(ref["input_features"], ref["attention_mask"]).pooler_output
        got = pipeline.audio_rows(audio)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_transcribe_equals_transformers(asr, tmp_path):
    from lite.qwen3_asr import Qwen3ASR
    model, tokenizer, ids, root = asr
    pipeline = Qwen3ASR.from_pretrained(str(root / "lite"), num_blocks=64)
    processor = reference_processor(tokenizer)
    audios = [clip(2.5, 5), clip(0.8, 6), clip(4.1, 7)]
    eos = {ids["<|endoftext|>"], ids["<|im_end|>"]}
    for language in ("English", None):
        got_ids = pipeline.generate_ids(audios, language=language, max_new_tokens=12)
        got = pipeline.transcribe(audios, language=language, max_new_tokens=12)
        for audio, tokens, result in zip(audios, got_ids, got):
            inputs = processor.apply_transcription_request(audio=[audio], language=language)
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
            assert tokens == out[0, inputs["input_ids"].shape[1]:].tolist()
            text = processor.decode([t for t in tokens if t not in eos], skip_special_tokens=True)
            parsed = processor.parse_output(text)
            forced = language is not None and "<asr_text>" not in text
            assert result == {"language": language if forced else parsed["language"], "text": parsed["transcription"]}

    # a 44.1 kHz WAV file goes through the resampler; the CLI prints the same result
    path = tmp_path / "speech.wav"
    samples = clip(1.5, 8)
    from lite.audio import resample
    high = resample(samples, 16000, 44100)
    write_wav(path, high, 44100)
    from_file = pipeline.generate_ids([str(path)], language="English", max_new_tokens=8)[0]
    assert from_file == pipeline.generate_ids([(high, 44100)], language="English", max_new_tokens=8)[0]


@pytest.mark.parametrize("text", ["language English<asr_text>hello world", "language None<asr_text>", "hello world",
                                  "  Chinese\nmore<asr_text> the cat ", ""])
def test_reply_parsing_follows_transformers(asr, text):
    from lite.qwen3_asr import parse_reply
    want = reference_processor(asr[1]).parse_output(text)
    assert parse_reply(text) == {"language": want["language"], "text": want["transcription"]}


def test_cli_and_bad_audio(asr, tmp_path, capsys):
    from lite.qwen3_asr import Qwen3ASR
    root = asr[3]
    path = tmp_path / "speech.wav"
    write_wav(path, clip(1.2, 9), 16000)
    assert model_zoo(["run", "Qwen3-ASR-0.6B", "--model", str(root / "lite"), "--audio", str(path), "--language",
                      "English", "--max-new-tokens", "6"]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = Qwen3ASR.from_pretrained(str(root / "lite"), num_blocks=16).transcribe([str(path)], language="English",
                                                                                 max_new_tokens=6)[0]
    assert printed == want
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(ValueError, match="broken.wav"):
        Qwen3ASR.from_pretrained(str(root / "lite"), num_blocks=16).transcribe([str(bad)])
    with pytest.raises(ValueError, match="NaN"):
        Qwen3ASR.from_pretrained(str(root / "lite"), num_blocks=16).transcribe([np.full(16000, np.nan, np.float32)])


def test_server_transcribes_with_the_openai_client(asr, tmp_path):
    """/v1/audio/transcriptions through the official openai client: the pipeline's result (json, text and
    verbose_json); a text-only model's server and a broken upload get 400s."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("multipart")
    import urllib.error
    import urllib.request

    from lite.qwen3_asr import Qwen3ASR
    from lite.serve import create_app, start_in_thread
    root = asr[3]
    path = tmp_path / "speech.wav"
    write_wav(path, clip(2.2, 10), 16000)
    pipeline = Qwen3ASR.from_pretrained(str(root / "lite"), num_blocks=64)
    want = pipeline.transcribe([str(path)], language="en", max_new_tokens=12)[0]
    url, srv, thread = start_in_thread(create_app(pipeline.text_engine, "tiny-asr", max_model_len=12, asr=pipeline))
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        with open(path, "rb") as f:
            got = client.audio.transcriptions.create(model="tiny-asr", file=f, language="en")
        assert got.text == want["text"]
        with open(path, "rb") as f:
            verbose = client.audio.transcriptions.create(model="tiny-asr", file=f, language="en",
                                                         response_format="verbose_json")
        assert verbose.language == want["language"] and verbose.text == want["text"]
        with open(path, "rb") as f:
            text = client.audio.transcriptions.create(model="tiny-asr", file=f, language="en", response_format="text")
        assert text.strip() == want["text"]
        with pytest.raises(openai.BadRequestError, match="cannot transcribe"):
            client.audio.transcriptions.create(model="tiny-asr", file=("broken.wav", b"RIFF....WAVEjunk"))
        request = urllib.request.Request(f"{url}/v1/audio/transcriptions", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(request, timeout=30)
        assert bad.value.code == 400
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
