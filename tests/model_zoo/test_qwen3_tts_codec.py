"""Qwen3-TTS's 12 Hz speech-tokenizer decoder on the runtime: a tiny Qwen3TTSTokenizerV2Decoder (qwen-tts, the
reference: split residual quantizer, causal convolutions, a sliding-window pre-transformer with layer scale,
transposed-convolution upsampling with ConvNeXt blocks, SnakeBeta residual units) with seeded random weights, built
by model_zoo.multimodal.qwen3_tts_codec_graph from its tensors (under decoder.*, as speech_tokenizer/ holds them):
the waveform within 1e-4 of the reference for code sequences shorter and longer than the attention window, and a
grouped-query variant; a checkpoint without the decoder is refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model_zoo.qwen_tts_reference import tokenizer_12hz


def build(tmp_path, kv_heads: int, seed: int):
    from converter.writer import write_ms
    from lite import Context, Model, ModelType
    from model_zoo.multimodal.qwen3_tts_codec_graph import build_qwen3_tts_codec_decoder_graph
    modeling, configuration = tokenizer_12hz()
    config = dict(codebook_size=32, hidden_size=32, latent_dim=48, num_attention_heads=4, num_key_value_heads=kv_heads,
                  intermediate_size=64, num_hidden_layers=2, num_quantizers=4, upsample_rates=[2, 3],
                  upsampling_ratios=[2], decoder_dim=32, sliding_window=5, codebook_dim=16,
                  max_position_embeddings=256)
    torch.manual_seed(seed)
    model = modeling.Qwen3TTSTokenizerV2Decoder._from_config(
        configuration.Qwen3TTSTokenizerV2DecoderConfig(**config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("cluster_usage"):
                p.uniform_(0.5, 2.0)
            else:
                p.add_(torch.randn_like(p) * 0.05)
    weights = {"decoder." + k: v.numpy().copy() for k, v in model.state_dict().items()}
    graph = build_qwen3_tts_codec_decoder_graph({"decoder_config": config}, weights)
    path = write_ms(graph, str(tmp_path / f"codec_{kv_heads}.ms")).path
    runtime = Model()
    runtime.build_from_file(path, ModelType.MINDIR_LITE, Context())
    return model, runtime


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_codec_decoder_waveform_equals_reference(tmp_path, kv_heads):
    model, runtime = build(tmp_path, kv_heads, seed=kv_heads)
    rng = np.random.default_rng(kv_heads)
    for frames in (3, 11, 23):   # shorter and longer than the 5-frame window (x 2 layers)
        codes = rng.integers(0, 32, (4, frames))
        with torch.no_grad():
            want = model(torch.from_numpy(codes)[None])[0, 0].numpy()
        got = runtime.predict({"codes": codes.astype(np.int64)})[0].get_data_to_numpy()
        assert got.shape == want.shape == (frames * 12,)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert np.abs(want).max() > 0.05   # not a silent output


def test_codec_decoder_refuses_other_checkpoints():
    from converter.ir import ConverterError
    from model_zoo.multimodal.qwen3_tts_codec_graph import build_qwen3_tts_codec_decoder_graph
    with pytest.raises(ConverterError, match="pre_conv"):
        build_qwen3_tts_codec_decoder_graph({}, {"encoder.x": np.zeros(1, np.float32)})
