"""Whisper on the runtime (encoder graph + lock-step decoder step on the paged KV cache): a tiny
WhisperForConditionalGeneration with seeded random weights, its tokenizer (Whisper's special tokens), generation
config (languages, tasks, suppressed tokens) and feature extractor, converted on first use by lite.whisper.Whisper;
against transformers: the log-mel features within 1e-4 of WhisperFeatureExtractor, the encoder's states and cross
keys within 1e-4, greedy tokens equal WhisperForConditionalGeneration.generate for a batch of audios of different
lengths (forced language, detected language, translate), an English-only checkpoint; bad audio named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

WORDS = "<pad> hello world the cat sat on a mat and dog ran".split()
LANGS = ["<|en|>", "<|de|>", "<|fr|>"]
SPECIAL = ["<|endoftext|>", "<|startoftranscript|>"] + LANGS + ["<|translate|>", "<|transcribe|>",
                                                                 "<|notimestamps|>"]


def whisper_tokenizer():
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<pad>",
                                        bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    return tokenizer, {t: tok.token_to_id(t) for t in SPECIAL}


def make_whisper(root, multilingual: bool = True, seed: int = 0):
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration
    tokenizer, ids = whisper_tokenizer()
    torch.manual_seed(seed)
    vocab = len(WORDS) + len(SPECIAL)
    config = WhisperConfig(vocab_size=vocab, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                           decoder_ffn_dim=48, max_source_positions=50, max_target_positions=40,
                           decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
                           bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name or "decoder" in name:
                p.add_(torch.randn_like(p) * 0.3)
    gen = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"],
        no_timestamps_token_id=ids["<|notimestamps|>"],
        suppress_tokens=[0, 5] + [ids[t] for t in SPECIAL[1:]],   # (a random model likes them)
        begin_suppress_tokens=[ids["<|endoftext|>"], 1], max_length=40, is_multilingual=multilingual,
        forced_decoder_ids=None)
    if multilingual:
        gen.lang_to_id = {t: ids[t] for t in LANGS}
        gen.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    model.generation_config = gen
    model.save_pretrained(str(root))
    tokenizer.save_pretrained(str(root))
    extractor = WhisperFeatureExtractor(feature_size=16, chunk_length=1, n_samples=16000, nb_max_frames=100)
    extractor.save_pretrained(str(root))
    return model, tokenizer, extractor, ids


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    from lite.whisper import Whisper
    root = tmp_path_factory.mktemp("whisper")
    model, tokenizer, extractor, ids = make_whisper(root)
    return model, tokenizer, extractor, ids, Whisper.from_pretrained(str(root), max_batch=2)


def speech(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * rng.uniform(100, 900) * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32)


def reference(model, extractor, audios, **kwargs):
    feats = extractor(audios, sampling_rate=16000, return_tensors="pt")["input_features"]
    with torch.no_grad():
        out = model.generate(feats, do_sample=False, **kwargs)
    return out, feats


def test_whisper_features_and_encoder_equal_transformers(whisper):
    model, _, extractor, _, asr = whisper
    for audio in (speech(0.4, 1), speech(1.3, 2)):   # padded to, and cut at, the 1 s window
        want = extractor(audio, sampling_rate=16000, return_tensors="np")["input_features"][0]
        got = asr.features(audio)
        np.testing.assert_allclose(got, want, atol=1e-4)
        outs = {o.name: t.get_data_to_numpy() for o, t in zip(asr.encoder.get_outputs(),
                                                              asr.encoder.predict({"input_features": got[None]}))}
        with torch.no_grad():
            states = model.model.encoder(torch.from_numpy(got[None])).last_hidden_state
            cross_k = model.model.decoder.layers[1].encoder_attn.k_proj(states)
        np.testing.assert_allclose(outs["encoder_states"], states.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(outs["cross_k.1"], cross_k.numpy(), rtol=1e-4, atol=1e-4)


def strip(tokens, eos):
    """Generated tokens without the trailing eos (generate returns the new tokens, eos-padded, the last eos cut)."""
    tokens = list(tokens)
    while tokens and tokens[-1] == eos:
        tokens.pop()
    return tokens


def test_whisper_greedy_tokens_equal_transformers(whisper):
    model, tokenizer, extractor, ids, asr = whisper
    audios = [speech(0.3, 3), speech(0.8, 4), speech(1.0, 5)]   # three audios: two lock-step batches of two and one
    eos = ids["<|endoftext|>"]
    for kwargs in (dict(language="en"), dict(language="de", task="translate"), dict()):
        out, _ = reference(model, extractor, audios, max_new_tokens=12, **kwargs)
        got = asr.generate_ids(audios, max_new_tokens=12, **kwargs)
        assert [strip(row, eos) for row in out.tolist()] == [strip(g, eos) for g in got], kwargs
        assert any(len(g) > 3 for g in got)
    texts = asr.transcribe(audios[:1], language="English", max_new_tokens=12)
    assert texts[0] == tokenizer.decode(asr.generate_ids(audios[:1], language="en", max_new_tokens=12)[0],
                                        skip_special_tokens=True).strip()


def test_whisper_english_only_and_errors(tmp_path):
    from lite.whisper import Whisper
    model, _, extractor, ids = make_whisper(tmp_path, multilingual=False, seed=1)
    asr = Whisper.from_pretrained(str(tmp_path))
    audio = speech(0.7, 6)
    out, _ = reference(model, extractor, [audio], max_new_tokens=10)
    eos = ids["<|endoftext|>"]
    assert strip(asr.generate_ids([audio], max_new_tokens=10)[0], eos) == strip(out.tolist()[0], eos)
    with pytest.raises(ValueError, match="English-only"):
        asr.generate_ids([audio], language="de")
    with pytest.raises(ValueError, match="finite"):
        asr.features(np.array([0.0, np.nan] * 400, np.float32))
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF not a wave")
    with pytest.raises(ValueError, match="broken.wav"):
        asr.transcribe([str(bad)])


def test_lock_step_cache_grows_keeping_its_contents(whisper):
    """LockStepDecoder.reserve / ensure: growing the room (more blocks per slot, more slots) keeps every slot's
    cached keys and values in place."""
    from lite.lock_step import LockStepDecoder
    asr = whisper[4]
    steps = LockStepDecoder(asr.decoder, 2, 16)
    rng = np.random.default_rng(0)
    for cache in steps.key_cache + steps.value_cache:
        cache[...] = rng.standard_normal(cache.shape)
    before = [c.reshape(2, steps.blocks_per_slot, *c.shape[1:]).copy() for c in steps.key_cache]
    steps.ensure(100, chunk=64)
    assert steps.blocks_per_slot * steps.block >= 128
    steps.reserve(3, 10)
    for old, new in zip(before, steps.key_cache):
        grid = new.reshape(3, steps.blocks_per_slot, *new.shape[1:])
        np.testing.assert_array_equal(grid[:2, :old.shape[1]], old)
        assert not grid[:2, old.shape[1]:].any() and not grid[2].any()
