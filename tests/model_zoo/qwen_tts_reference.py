"""Qwen3-TTS's own code (the qwen-tts package, installed without its dependencies: it pins transformers 4.57) as the
tests' reference, adapted to the transformers 5 this project tests against: its package __init__ files (which import
the gradio demo, librosa and sox) are bypassed, and the few transformers internals its 12 Hz tokenizer uses that
changed in 5.x are bridged (check_model_inputs called as a factory, the "default" RoPE initialiser, the mask
helpers' input_embeds / cache_position / past_key_values arguments). Only what the tests import is loaded."""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types

import pytest


def _bridge(modeling) -> None:
    """The transformers 4.57 internals a qwen_tts module calls, as transformers 5 has them."""
    import torch
    if getattr(modeling, "_lite_bridged", False):
        return
    if "default" not in modeling.ROPE_INIT_FUNCTIONS:
        def default_rope(config, device=None):
            dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            return 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), 1.0
        modeling.ROPE_INIT_FUNCTIONS = dict(modeling.ROPE_INIT_FUNCTIONS, default=default_rope)

    def renamed(fn):
        def call(**kw):
            kw["inputs_embeds"] = kw.pop("input_embeds", kw.get("inputs_embeds"))
            kw.pop("cache_position", None)
            kw["cache"] = kw.pop("past_key_values", None)
            return fn(**kw)
        return call
    for name in ("create_causal_mask", "create_sliding_window_causal_mask"):
        if hasattr(modeling, name):
            setattr(modeling, name, renamed(getattr(modeling, name)))
    modeling._lite_bridged = True


def _import(names):
    """The modules, imported with transformers' check_model_inputs callable as the decorator factory 4.57 had."""
    import transformers.utils.generic as generic
    original = generic.check_model_inputs
    generic.check_model_inputs = lambda func=None, **_: (lambda f: original(f)) if func is None else original(func)
    try:
        return [importlib.import_module(n) for n in names]
    finally:
        generic.check_model_inputs = original


def tokenizer_12hz():
    """(the 12 Hz tokenizer's modeling module, its configuration module), or skip when qwen-tts is missing."""
    names = ("qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2",
             "qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2")
    if all(n in sys.modules for n in names) and getattr(sys.modules[names[0]], "_lite_bridged", False):
        return sys.modules[names[0]], sys.modules[names[1]]
    spec = importlib.util.find_spec("qwen_tts") if "qwen_tts" not in sys.modules else None
    if "qwen_tts" in sys.modules and hasattr(sys.modules["qwen_tts"], "__path__"):
        spec = types.SimpleNamespace(submodule_search_locations=sys.modules["qwen_tts"].__path__)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-tts (Qwen3-TTS's reference code) is not installed")
    root = list(spec.submodule_search_locations)[0]
    for name, path in (("qwen_tts", root), ("qwen_tts.core", root + "/core")):
        if name not in sys.modules or not hasattr(sys.modules[name], "__path__"):
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package
    modeling, configuration = _import(names)
    _bridge(modeling)
    return modeling, configuration


def tts_model():
    """(the Qwen3-TTS model's modeling module, its configuration module): its package's inference helpers import
    librosa and soundfile at module level (for reading audio), which the tests do not use; they are stood in for by
    modules holding librosa's Slaney mel filters (what the speaker encoder's features use, from transformers) and
    nothing else, as is the 25 Hz tokenizer the 12 Hz models do not load."""
    names = ("qwen_tts.core.models.modeling_qwen3_tts", "qwen_tts.core.models.configuration_qwen3_tts")
    if all(n in sys.modules for n in names):
        return sys.modules[names[0]], sys.modules[names[1]]
    tokenizer, tokenizer_config = tokenizer_12hz()
    for name in ("librosa", "librosa.filters", "soundfile"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["librosa"].filters = sys.modules["librosa.filters"]
    if not hasattr(sys.modules["librosa.filters"], "mel"):   # librosa's Slaney filters, as transformers builds them
        def mel(sr, n_fft, n_mels=128, fmin=0.0, fmax=None, **_):
            from transformers.audio_utils import mel_filter_bank
            return mel_filter_bank(n_fft // 2 + 1, n_mels, fmin, fmax if fmax is not None else sr / 2, sr,
                                   norm="slaney", mel_scale="slaney").T.astype("float32")
        sys.modules["librosa.filters"].mel = mel
    core = sys.modules["qwen_tts.core"]
    core.Qwen3TTSTokenizerV2Config = tokenizer_config.Qwen3TTSTokenizerV2Config
    core.Qwen3TTSTokenizerV2Model = tokenizer.Qwen3TTSTokenizerV2Model
    core.Qwen3TTSTokenizerV1Config = core.Qwen3TTSTokenizerV1Model = type("Unavailable", (), {})
    root = sys.modules["qwen_tts"].__path__[0]
    for name, sub in (("qwen_tts.inference", "/inference"), ("qwen_tts.core.models", "/core/models")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [root + sub]
            sys.modules[name] = package
    modeling, configuration = _import(names)
    _bridge(modeling)
    # transformers 5's generate hands the KV cache over as `cache`; these forwards take it as past_key_values (without
    # the rename each step would see no past at all)
    for cls in (modeling.Qwen3TTSTalkerForConditionalGeneration,
                modeling.Qwen3TTSTalkerCodePredictorModelForConditionalGeneration):
        if not getattr(cls, "_lite_cache_bridged", False):
            def bridged(original):
                @functools.wraps(original)   # (generate checks its kwargs against the signature)
                def forward(self, *args, **kwargs):
                    if "cache" in kwargs:
                        kwargs["past_key_values"] = kwargs.pop("cache")
                    return original(self, *args, **kwargs)
                return forward
            cls.forward = bridged(cls.forward)
            cls._lite_cache_bridged = True
    return modeling, configuration
