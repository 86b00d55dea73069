"""A decoder as ONNX Runtime GenAI's model builder writes it (models/genai_qwen2_tiny.onnx: packed-QKV
GroupQueryAttention with rotary and a KV cache, SkipSimplifiedLayerNormalization), converted and run step by step
as GenAI runs it: a prompt with an empty past, then decode steps fed their own present caches. Logits and caches
equal ONNX Runtime's at every step."""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort

import converter
import lite

MODEL = os.path.join(os.path.dirname(__file__), "models", "genai_qwen2_tiny.onnx")
LAYERS, KV_HEADS, HEAD, VOCAB = 2, 1, 16, 64


def feeds_for(ids: np.ndarray, total: int, past: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((ids.shape[0], total), np.int64)}
    feeds.update(past)
    return feeds


def test_prompt_then_decode_steps_match_onnxruntime(tmp_path):
    converter.Converter().convert("ONNX", MODEL, str(tmp_path / "m"))
    model = lite.Model()
    model.build_from_file(str(tmp_path / "m.ms"), lite.ModelType.MINDIR_LITE, lite.Context())
    session = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    rng = np.random.default_rng(0)
    batch, prompt = 2, 9
    empty = np.zeros((batch, KV_HEADS, 0, HEAD), np.float32)
    feeds = feeds_for(rng.integers(0, VOCAB, (batch, prompt)), prompt,
                      {f"past_key_values.{i}.{kind}": empty for i in range(LAYERS) for kind in ("key", "value")})
    for step in range(5):
        want = dict(zip(names, session.run(None, feeds)))
        got = {o.name: t.get_data_to_numpy() for o, t in zip(model.get_outputs(), model.predict(feeds))}
        for name in names:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=f"step {step}: {name}")
        total = feeds["attention_mask"].shape[1] + 1
        feeds = feeds_for(want["logits"][:, -1].argmax(-1)[:, None], total,
                          {f"past_key_values.{i}.{kind}": want[f"present.{i}.{kind}"]
                           for i in range(LAYERS) for kind in ("key", "value")})
    assert got["present.0.key"].shape == (batch, KV_HEADS, prompt + 4, HEAD)
