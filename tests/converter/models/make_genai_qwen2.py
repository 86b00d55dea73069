"""Writes genai_qwen2_tiny.onnx: what ONNX Runtime GenAI's model builder (onnxruntime-genai 0.18.0) makes of a tiny
Qwen2 checkpoint with seeded random weights (hidden 32, 2 heads / 1 KV head of 16, 2 layers, vocab 64), as one file.
The builder writes packed-QKV GroupQueryAttention with rotary and a KV cache, SkipSimplifiedLayerNormalization and
SimplifiedLayerNormalization; tests/converter/test_genai_model.py converts it. Needs onnxruntime-genai and torch:

    python tests/converter/models/make_genai_qwen2.py
"""
import os
import subprocess
import sys
import tempfile

import onnx
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))

with tempfile.TemporaryDirectory() as tmp:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=False)
    Qwen2ForCausalLM(config).eval().save_pretrained(os.path.join(tmp, "hf"))
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", os.path.join(tmp, "hf"),
                    "-o", os.path.join(tmp, "out"), "-p", "fp32", "-e", "cpu", "-c", os.path.join(tmp, "cache")],
                   check=True, stdout=subprocess.DEVNULL)
    model = onnx.load(os.path.join(tmp, "out", "model.onnx"))   # pulls in model.onnx.data
    onnx.save(model, os.path.join(HERE, "genai_qwen2_tiny.onnx"))
