"""CosyVoice 2's flow-matching model on the runtime: a tiny CausalMaskedDiffWithXvec (model_zoo.reference.
cosyvoice_flow, the PyTorch reference) with seeded random weights for every tensor, its state_dict as arrays through
model_zoo.multimodal.cosyvoice_flow_graph to .ms files, then: the encoder graph's mu / spks and one estimator call
(a padded mask included) within 1e-4 of the reference at two lengths; lite.cosyvoice_flow.CosyVoiceFlow.mel (the
Euler loop with classifier-free guidance in NumPy) within 1e-4 of the reference's inference with and without a
prompt; the noise table equals the original's global-seed draw; the released flow.pt's tensor names and shapes; the
real-size graphs build with kernels for every node; int8 weights stay close; bad input is refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

TINY = dict(input_size=24, output_size=80, spk_embed_dim=12, output_type="mel", vocab_size=40, input_frame_rate=25,
            only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
            encoder=dict(output_size=24, attention_heads=4, linear_units=40, num_blocks=2, num_up_blocks=1,
                         input_size=24, dropout_rate=0.1, positional_dropout_rate=0.1, attention_dropout_rate=0.1,
                         normalize_before=True, input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
                         selfattention_layer_type="rel_selfattn", use_cnn_module=False, macaron_style=False,
                         use_dynamic_chunk=True),
            decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80,
                         cfm_params=dict(sigma_min=1e-06, solver="euler", t_scheduler="cosine", training_cfg_rate=0.2,
                                         inference_cfg_rate=0.7, reg_loss_type="l1"),
                         estimator=dict(in_channels=320, out_channels=80, channels=[32], dropout=0.0,
                                        attention_head_dim=8, n_blocks=2, num_mid_blocks=2, num_heads=2, act_fn="gelu",
                                        static_chunk_size=50, num_decoding_left_chunks=2)))
REAL = dict(input_size=512, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561, input_frame_rate=25,
            only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
            encoder=dict(output_size=512, attention_heads=8, linear_units=2048, num_blocks=6, dropout_rate=0.1,
                         positional_dropout_rate=0.1, attention_dropout_rate=0.1, normalize_before=True,
                         input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
                         selfattention_layer_type="rel_selfattn", input_size=512, use_cnn_module=False,
                         macaron_style=False, use_dynamic_chunk=True),
            decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80,
                         cfm_params=dict(sigma_min=1e-06, solver="euler", t_scheduler="cosine", training_cfg_rate=0.2,
                                         inference_cfg_rate=0.7, reg_loss_type="l1"),
                         estimator=dict(in_channels=320, out_channels=80, channels=[256], dropout=0.0,
                                        attention_head_dim=64, n_blocks=4, num_mid_blocks=12, num_heads=8,
                                        act_fn="gelu", static_chunk_size=50, num_decoding_left_chunks=2)))


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> float:
    """The largest difference relative to the reference's largest magnitude; asserted below `rel`."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < rel, err
    return err


def tiny_model(seed: int):
    from model_zoo.reference.cosyvoice_flow import CausalMaskedDiffWithXvec
    torch.manual_seed(seed)
    model = CausalMaskedDiffWithXvec(TINY).eval()
    with torch.no_grad():   # every tensor drawn: norms around 1, biases / position biases around 0, matrices ~ 1/fan-in
        for name, p in model.named_parameters():
            norm = p.ndim == 1 and any(k in name for k in ("norm", "out.1", "block.2"))
            if norm and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1 or "pos_bias" in name:
                p.copy_(0.2 * torch.randn_like(p))
            elif name == "input_embedding.weight":
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
    return model


def write_graphs(model, root, weight_format: str = "float32") -> tuple[str, str]:
    from converter.runtime_check import check_runtime_kernels
    from converter.writer import write_ms
    from model_zoo.multimodal.cosyvoice_flow_graph import (build_cosyvoice_flow_encoder_graph,
                                                           build_cosyvoice_flow_estimator_graph)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    paths = []
    for name, build in (("encoder", build_cosyvoice_flow_encoder_graph),
                        ("estimator", build_cosyvoice_flow_estimator_graph)):
        graph = build(TINY, weights, weight_format=weight_format)
        check_runtime_kernels(graph)
        paths.append(write_ms(graph, str(root / f"flow_{name}_{weight_format}.ms")).path)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    model = tiny_model(seed=0)
    encoder, estimator = write_graphs(model, tmp_path_factory.mktemp("cosyvoice_flow"))
    return model, CosyVoiceFlow(encoder, estimator, flow_noise_table(), TINY)


def test_flow_noise_table_equals_the_global_seed_draw():
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    before = torch.random.get_rng_state()
    table = flow_noise_table()
    assert torch.equal(torch.random.get_rng_state(), before)   # drawn from a private generator
    with torch.random.fork_rng():
        torch.manual_seed(0)
        want = torch.randn([1, 80, 50 * 300]).numpy()
    assert table.dtype == np.float32 and table.shape == (1, 80, 15000)
    assert np.array_equal(table, want)
    table[0, 0, 0] += 1   # a copy each call
    assert np.array_equal(flow_noise_table(), want)


def test_reference_has_the_released_tensor_names():
    """The real config's state_dict (shapes only, nothing allocated) holds flow.pt's names and shapes, and
    nothing else."""
    from model_zoo.reference.cosyvoice_flow import CausalMaskedDiffWithXvec
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in CausalMaskedDiffWithXvec(REAL).state_dict().items()}
    e = "decoder.estimator."
    want = {"input_embedding.weight": (6561, 512), "spk_embed_affine_layer.weight": (80, 192),
            "encoder.embed.out.0.weight": (512, 512), "encoder.embed.out.1.bias": (512,),
            "encoder.pre_lookahead_layer.conv1.weight": (512, 512, 4),
            "encoder.pre_lookahead_layer.conv2.weight": (512, 512, 3),
            "encoder.encoders.5.self_attn.linear_pos.weight": (512, 512),
            "encoder.encoders.0.self_attn.pos_bias_u": (8, 64),
            "encoder.encoders.0.feed_forward.w_1.weight": (2048, 512),
            "encoder.encoders.0.norm_mha.weight": (512,), "encoder.encoders.0.norm_ff.bias": (512,),
            "encoder.up_layer.conv.weight": (512, 512, 5), "encoder.up_embed.out.0.weight": (512, 512),
            "encoder.up_encoders.3.self_attn.linear_out.bias": (512,), "encoder.after_norm.weight": (512,),
            "encoder_proj.weight": (80, 512)}
    want.update({e + k: v for k, v in {
        "time_mlp.linear_1.weight": (1024, 320), "time_mlp.linear_2.weight": (1024, 1024),
        "down_blocks.0.0.mlp.1.weight": (256, 1024), "down_blocks.0.0.block1.block.0.weight": (256, 320, 3),
        "down_blocks.0.0.block1.block.2.weight": (256,), "down_blocks.0.0.res_conv.weight": (256, 320, 1),
        "down_blocks.0.1.3.attn1.to_q.weight": (512, 256), "down_blocks.0.1.0.attn1.to_out.0.weight": (256, 512),
        "down_blocks.0.1.0.ff.net.0.proj.weight": (1024, 256), "down_blocks.0.1.0.ff.net.2.weight": (256, 1024),
        "down_blocks.0.2.weight": (256, 256, 3), "mid_blocks.11.1.3.norm3.weight": (256,),
        "up_blocks.0.0.block1.block.0.weight": (256, 512, 3), "up_blocks.0.2.bias": (256,),
        "final_block.block.0.weight": (256, 256, 3), "final_proj.weight": (80, 256, 1)}.items()})
    for name, shape in want.items():
        assert shapes.get(name) == shape, name
    assert not any(k.startswith(("encoder.global_cmvn", "decoder.estimator.time_embeddings")) or "to_k.bias" in k
                   or "linear_pos.bias" in k for k in shapes)
    # per layer: a Conformer layer 19 tensors; a ResNet block 12, a transformer block 13; the down block's conv 2
    parts = ("encoder.encoders.", "encoder.up_encoders.", e + "mid_blocks.", e + "down_blocks.", e + "up_blocks.")
    counts = [sum(k.startswith(part) for k in shapes) for part in parts]
    assert counts == [6 * 19, 4 * 19, 12 * (12 + 4 * 13), 12 + 4 * 13 + 2, 12 + 4 * 13 + 2]
    encoder = 4 + 4 + 10 * 19 + 2 + 4 + 2   # embed, look-ahead, layers, up_layer, up_embed, after_norm
    assert len(shapes) == 1 + 2 + encoder + 2 + 4 + sum(counts[2:]) + 4 + 2   # ..., time_mlp, U-Net, final


def test_encoder_graph_equals_reference(flow):
    model, runtime = flow
    rng = np.random.default_rng(1)
    for n in (5, 23):
        tokens = rng.integers(0, TINY["vocab_size"], n)
        xvec = rng.standard_normal(TINY["spk_embed_dim"]).astype(np.float32) * 3
        mu, spks = runtime.encode(tokens, xvec)
        with torch.no_grad():
            want_mu = model.encode(torch.from_numpy(tokens)[None])[0].numpy()
            want_spks = model.speaker(torch.from_numpy(xvec)[None])[0].numpy()
        assert mu.shape == (80, 2 * n)
        close(mu, want_mu)
        close(spks, want_spks)


def test_estimator_graph_equals_reference(flow):
    model, runtime = flow
    rng = np.random.default_rng(2)
    for frames in (8, 37):
        x, mu, cond = (rng.standard_normal((2, 80, frames)).astype(np.float32) for _ in range(3))
        mask = np.ones((2, 1, frames), np.float32)
        mask[1, :, frames - 3:] = 0   # the second row padded: its last frames are no keys and come out zero
        t = np.array([0.2, 0.65], np.float32)
        spks = rng.standard_normal((2, 80)).astype(np.float32)
        got = runtime.velocity(x, mask, mu, t, spks, cond)
        with torch.no_grad():
            want = model.decoder.estimator(*map(torch.from_numpy, (x, mask, mu, t, spks, cond))).numpy()
        close(got, want)
        assert np.all(got[1, :, frames - 3:] == 0) and np.abs(want).max() > 0.5


@pytest.mark.parametrize("prompt_tokens", [0, 4])
def test_mel_equals_reference_inference(flow, prompt_tokens):
    """The whole loop (10 Euler steps, 20 estimator rows) against the reference's inference: within 1e-4 of the
    largest magnitude (about 1e-6 is what it gets)."""
    model, runtime = flow
    rng = np.random.default_rng(3 + prompt_tokens)
    tokens = rng.integers(0, TINY["vocab_size"], 9)
    prompt = rng.integers(0, TINY["vocab_size"], prompt_tokens)
    prompt_feat = rng.standard_normal((2 * prompt_tokens, 80)).astype(np.float32)
    xvec = rng.standard_normal(TINY["spk_embed_dim"]).astype(np.float32)
    got = runtime.mel(tokens, prompt, prompt_feat, xvec)
    with torch.no_grad():
        want = model.inference(torch.from_numpy(tokens)[None], torch.tensor([tokens.size]),
                               torch.from_numpy(prompt)[None], torch.tensor([prompt.size]),
                               torch.from_numpy(prompt_feat)[None], torch.tensor([prompt_feat.shape[0]]),
                               torch.from_numpy(xvec)[None])[0].numpy()
    assert got.shape == (80, 18)
    close(got, want)
    fewer = runtime.mel(tokens, prompt, prompt_feat, xvec, n_timesteps=3)
    assert np.abs(fewer - got).max() > 1e-3   # the step count is honoured


def test_int8_weights_stay_close(flow, tmp_path):
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    model, runtime = flow
    quantised = CosyVoiceFlow(*write_graphs(model, tmp_path, "int8"), flow_noise_table(), TINY)
    rng = np.random.default_rng(4)
    tokens, xvec = rng.integers(0, TINY["vocab_size"], 7), rng.standard_normal(12).astype(np.float32)
    mu, _ = quantised.encode(tokens, xvec)
    close(mu, runtime.encode(tokens, xvec)[0], rel=5e-2)
    x, m, c = (rng.standard_normal((2, 80, 14)).astype(np.float32) for _ in range(3))
    args = (x, np.ones((2, 1, 14), np.float32), m, np.array([0.3, 0.3], np.float32),
            rng.standard_normal((2, 80)).astype(np.float32), c)
    close(quantised.velocity(*args), runtime.velocity(*args), rel=5e-2)


def test_real_size_graphs_build():
    """The released sizes (random-free: zero tensors of flow.pt's shapes): both graphs build, every node has a CPU
    kernel, and the interfaces are the documented ones."""
    from converter.runtime_check import check_runtime_kernels
    from model_zoo.multimodal.cosyvoice_flow_graph import (build_cosyvoice_flow_encoder_graph,
                                                           build_cosyvoice_flow_estimator_graph)
    from model_zoo.reference.cosyvoice_flow import CausalMaskedDiffWithXvec
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in CausalMaskedDiffWithXvec(REAL).state_dict().items()}
    weights = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    encoder = build_cosyvoice_flow_encoder_graph(REAL, weights)
    estimator = build_cosyvoice_flow_estimator_graph(REAL, weights, weight_format="int8")
    for graph in (encoder, estimator):
        check_runtime_kernels(graph)
    assert encoder.inputs == ["tokens", "embedding"] and encoder.outputs == ["mu", "spks"]
    assert estimator.inputs == ["x", "mask", "mu", "t", "spks", "cond"] and estimator.outputs == ["dphi"]
    attention = sum(n.op_type == "Attention" for n in estimator.nodes)
    assert attention == 4 * (1 + 12 + 1) and sum(n.op_type == "Attention" for n in encoder.nodes) == 6 + 4


def test_bad_input_is_refused(flow):
    from converter.ir import ConverterError
    from model_zoo.multimodal.cosyvoice_flow_graph import build_cosyvoice_flow_encoder_graph
    _, runtime = flow
    ok = dict(tokens=[1, 2, 3], prompt_tokens=[4, 5], prompt_feat=np.zeros((4, 80), np.float32),
              embedding=np.ones(12, np.float32))
    assert runtime.mel(**ok, n_timesteps=1).shape == (80, 6)
    bad = {"outside the speech-token vocabulary": dict(tokens=[1, 40]),
           "prompt_tokens hold id -1": dict(prompt_tokens=[4, -1]),
           "tokens is empty": dict(tokens=[]),
           "must be integer token ids": dict(tokens=[1.5, 2.0]),
           "3 frames for 2 prompt tokens": dict(prompt_feat=np.zeros((3, 80), np.float32)),
           r"prompt_feat must be \[frames, 80\]": dict(prompt_feat=np.zeros((4, 79), np.float32)),
           r"embedding must be \[12\]": dict(embedding=np.ones(192, np.float32)),
           "must be finite": dict(embedding=np.full(12, np.nan, np.float32)),
           "sequence of token ids": dict(tokens=[[1, 2], [3, 4]])}
    for message, change in bad.items():
        with pytest.raises(ValueError, match=message):
            runtime.mel(**{**ok, **change})
    with pytest.raises(ValueError, match="n_timesteps"):
        runtime.mel(**ok, n_timesteps=0)
    with pytest.raises(ValueError, match="more than the noise table"):
        runtime.mel(**{**ok, "tokens": np.ones(7500, np.int64)})
    with pytest.raises(ValueError, match="noise table must be"):
        type(runtime)("unused.ms", "unused.ms", np.zeros((2, 80, 10), np.float32), TINY)
    with pytest.raises(ConverterError, match="not a CosyVoice 2 flow checkpoint"):
        build_cosyvoice_flow_encoder_graph(TINY, {"llm.x": np.zeros(1, np.float32)})
    with pytest.raises(NotImplementedError, match="one level"):
        build_cosyvoice_flow_encoder_graph({**TINY, "decoder": {"estimator": {"channels": [256, 256]}}}, {})
