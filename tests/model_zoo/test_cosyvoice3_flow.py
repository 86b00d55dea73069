"""CosyVoice 3's flow-matching model on the runtime: a tiny CausalMaskedDiffWithDiT (model_zoo.reference.
cosyvoice3_flow, the PyTorch reference) with seeded random weights for every tensor, its state_dict as arrays through
model_zoo.multimodal.cosyvoice3_flow_graph to .ms files, run by lite.cosyvoice_flow.CosyVoiceFlow unchanged: the
encoder graph's mu / spks and one estimator call (a padded mask included) within 1e-4 of the reference at two
lengths; CosyVoiceFlow.mel (the Euler loop with classifier-free guidance) within 1e-4 of the reference's inference
with and without a prompt; the released flow.pt's tensor names and shapes; the real-size graphs build with kernels
for every node; int8 weights stay close; bad input and foreign checkpoints are refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch

CFM = dict(sigma_min=1e-06, solver="euler", t_scheduler="cosine", training_cfg_rate=0.2, inference_cfg_rate=0.7,
           reg_loss_type="l1")
TINY = dict(input_size=80, output_size=80, spk_embed_dim=12, output_type="mel", vocab_size=40, input_frame_rate=25,
            only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
            pre_lookahead_layer=dict(in_channels=80, channels=16, pre_lookahead_len=3),
            decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=CFM,
                         estimator=dict(dim=32, depth=2, heads=2, dim_head=16, ff_mult=2, mel_dim=80, mu_dim=80,
                                        spk_dim=80, out_channels=80, static_chunk_size=50,
                                        num_decoding_left_chunks=-1)))
REAL = dict(input_size=80, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561, input_frame_rate=25,
            only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
            pre_lookahead_layer=dict(in_channels=80, channels=1024, pre_lookahead_len=3),
            decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=CFM,
                         estimator=dict(dim=1024, depth=22, heads=16, dim_head=64, ff_mult=2, mel_dim=80, mu_dim=80,
                                        spk_dim=80, out_channels=80, static_chunk_size=50,
                                        num_decoding_left_chunks=-1)))


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> float:
    """The largest difference relative to the reference's largest magnitude; asserted below `rel`."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < rel, err
    return err


def tiny_model(seed: int):
    from model_zoo.reference.cosyvoice3_flow import CausalMaskedDiffWithDiT
    torch.manual_seed(seed)
    model = CausalMaskedDiffWithDiT(TINY).eval()
    with torch.no_grad():   # every tensor drawn: biases around 0, matrices ~ 1/fan-in, the adaLN projections larger
        for name, p in model.named_parameters():
            if name == "input_embedding.weight":
                p.copy_(torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                gain = 2.0 if ".linear." in name else 1.0   # shift / scale / gate clearly away from 0 and 1
                p.copy_(gain * torch.randn_like(p) / p[0].numel() ** 0.5)
    return model


def write_graphs(model, root, weight_format: str = "float32") -> tuple[str, str]:
    from converter.runtime_check import check_runtime_kernels
    from converter.writer import write_ms
    from model_zoo.multimodal.cosyvoice3_flow_graph import (build_cosyvoice3_flow_encoder_graph,
                                                            build_cosyvoice3_flow_estimator_graph)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    paths = []
    for name, build in (("encoder", build_cosyvoice3_flow_encoder_graph),
                        ("estimator", build_cosyvoice3_flow_estimator_graph)):
        graph = build(TINY, weights, weight_format=weight_format)
        check_runtime_kernels(graph)
        paths.append(write_ms(graph, str(root / f"flow3_{name}_{weight_format}.ms")).path)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    model = tiny_model(seed=0)
    encoder, estimator = write_graphs(model, tmp_path_factory.mktemp("cosyvoice3_flow"))
    return model, CosyVoiceFlow(encoder, estimator, flow_noise_table(), TINY)


def real_shapes() -> dict[str, tuple[int, ...]]:
    from model_zoo.reference.cosyvoice3_flow import CausalMaskedDiffWithDiT
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in CausalMaskedDiffWithDiT(REAL).state_dict().items()}


def test_reference_has_the_released_tensor_names():
    """The real config's state_dict (shapes only, nothing allocated) holds flow.pt's names and shapes, and nothing
    else; a state_dict loads back strictly."""
    shapes = real_shapes()
    e = "decoder.estimator."
    want = {"input_embedding.weight": (6561, 80), "spk_embed_affine_layer.weight": (80, 192),
            "spk_embed_affine_layer.bias": (80,), "pre_lookahead_layer.conv1.weight": (1024, 80, 4),
            "pre_lookahead_layer.conv1.bias": (1024,), "pre_lookahead_layer.conv2.weight": (80, 1024, 3),
            "pre_lookahead_layer.conv2.bias": (80,)}
    want.update({e + k: v for k, v in {
        "time_embed.time_mlp.0.weight": (1024, 256), "time_embed.time_mlp.2.weight": (1024, 1024),
        "input_embed.proj.weight": (1024, 320), "input_embed.proj.bias": (1024,),
        "input_embed.conv_pos_embed.conv1.0.weight": (1024, 64, 31),
        "input_embed.conv_pos_embed.conv2.0.bias": (1024,), "rotary_embed.inv_freq": (32,),
        "transformer_blocks.0.attn_norm.linear.weight": (6144, 1024),
        "transformer_blocks.0.attn_norm.linear.bias": (6144,), "transformer_blocks.21.attn.to_q.weight": (1024, 1024),
        "transformer_blocks.21.attn.to_k.bias": (1024,), "transformer_blocks.3.attn.to_v.weight": (1024, 1024),
        "transformer_blocks.3.attn.to_out.0.weight": (1024, 1024),
        "transformer_blocks.3.ff.ff.0.0.weight": (2048, 1024),
        "transformer_blocks.3.ff.ff.2.weight": (1024, 2048), "transformer_blocks.3.ff.ff.2.bias": (1024,),
        "norm_out.linear.weight": (2048, 1024), "norm_out.linear.bias": (2048,), "proj_out.weight": (80, 1024),
        "proj_out.bias": (80,)}.items()})
    for name, shape in want.items():
        assert shapes.get(name) == shape, name
    per_block = sum(k.startswith(e + "transformer_blocks.0.") for k in shapes)
    assert per_block == 14 and sum(k.startswith(e + "transformer_blocks.") for k in shapes) == 22 * 14
    # embedding, affine 2, look-ahead 4; time 4, input_embed 2 + 4, inv_freq, blocks, norm_out 2, proj_out 2
    assert len(shapes) == 1 + 2 + 4 + 4 + 6 + 1 + 22 * 14 + 2 + 2
    model = tiny_model(seed=5)
    state = {k: v.clone() for k, v in tiny_model(seed=6).state_dict().items()}
    model.load_state_dict(state, strict=True)
    inv = state["decoder.estimator.rotary_embed.inv_freq"]
    assert torch.equal(inv, 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16))


def test_rotary_turns_the_first_head_only():
    """x-transformers' rotation: interleaved pairs, applied to the first dim_head channels of the heads side by
    side; the reference's attention output depends on position only through that head."""
    from model_zoo.reference.cosyvoice3_flow import apply_rotary, rotary_angles
    x = torch.randn(1, 5, 32)
    inv = 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16)
    y = apply_rotary(x, rotary_angles(inv, 5))
    assert torch.equal(y[..., 16:], x[..., 16:]) and torch.equal(y[:, 0], x[:, 0])
    angle = 3 * inv[1]   # frame 3, pair (2, 3)
    want = torch.stack([x[0, 3, 2] * angle.cos() - x[0, 3, 3] * angle.sin(),
                        x[0, 3, 3] * angle.cos() + x[0, 3, 2] * angle.sin()])
    assert torch.allclose(y[0, 3, 2:4], want, atol=1e-6)


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
        assert np.array_equal(mu[:, 0::2], mu[:, 1::2])   # each token's frame repeated
    # token i's frames see tokens i - 2 .. i + 3 (the look-ahead convolution, then the causal one): changing token
    # 10 changes the frames of tokens 7 .. 12 and no others
    changed = tokens.copy()
    changed[10] = (changed[10] + 1) % TINY["vocab_size"]
    moved = np.abs(runtime.encode(changed, xvec)[0] - mu).max(axis=0)[0::2] > 0
    assert np.array_equal(np.flatnonzero(moved), np.arange(7, 13))


def test_estimator_graph_equals_reference(flow):
    model, runtime = flow
    rng = np.random.default_rng(2)
    for frames in (8, 37):
        x, mu, cond = (rng.standard_normal((2, 80, frames)).astype(np.float32) for _ in range(3))
        mask = np.ones((2, 1, frames), np.float32)
        mask[1, :, frames - 3:] = 0   # the second row padded: its last frames are no keys
        t = np.array([0.2, 0.65], np.float32)
        spks = rng.standard_normal((2, 80)).astype(np.float32)
        got = runtime.velocity(x, mask, mu, t, spks, cond)
        with torch.no_grad():
            want = model.decoder.estimator(*map(torch.from_numpy, (x, mask, mu, t, spks, cond))).numpy()
        close(got, want)
        assert np.abs(want).max() > 0.5
        # the padding matters: unmasked, row 1's valid frames come out otherwise
        full = runtime.velocity(x, np.ones_like(mask), mu, t, spks, cond)
        assert np.abs(full[1, :, :frames - 3] - got[1, :, :frames - 3]).max() > 1e-3


@pytest.mark.parametrize("prompt_tokens", [0, 4])
def test_mel_equals_reference_inference(flow, prompt_tokens):
    """The whole loop (10 Euler steps, 20 estimator rows) against the reference's inference: within 1e-4 of the
    largest magnitude."""
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
    """The released sizes (read-only zero tensors of flow.pt's shapes, nothing allocated): both graphs build, every
    node has a CPU kernel, and the interfaces are CosyVoice 2's."""
    from converter.runtime_check import check_runtime_kernels
    from model_zoo.multimodal.cosyvoice3_flow_graph import (build_cosyvoice3_flow_encoder_graph,
                                                            build_cosyvoice3_flow_estimator_graph)
    weights = {k: np.broadcast_to(np.float32(0), s) for k, s in real_shapes().items()}
    encoder = build_cosyvoice3_flow_encoder_graph(REAL, weights)
    estimator = build_cosyvoice3_flow_estimator_graph(REAL, weights, weight_format="int8")
    for graph in (encoder, estimator):
        check_runtime_kernels(graph)
    assert encoder.inputs == ["tokens", "embedding"] and encoder.outputs == ["mu", "spks"]
    assert estimator.inputs == ["x", "mask", "mu", "t", "spks", "cond"] and estimator.outputs == ["dphi"]
    assert sum(n.op_type == "Attention" for n in estimator.nodes) == 22
    assert sum(n.op_type == "RotaryEmbedding" for n in estimator.nodes) == 2 * 22


def test_bad_input_is_refused(flow):
    from converter.ir import ConverterError
    from model_zoo.multimodal.cosyvoice3_flow_graph import (build_cosyvoice3_flow_encoder_graph,
                                                            build_cosyvoice3_flow_estimator_graph)
    from model_zoo.multimodal.cosyvoice_flow_graph import build_cosyvoice_flow_encoder_graph
    _, runtime = flow
    ok = dict(tokens=[1, 2, 3], prompt_tokens=[4, 5], prompt_feat=np.zeros((4, 80), np.float32),
              embedding=np.ones(12, np.float32))
    assert runtime.mel(**ok, n_timesteps=1).shape == (80, 6)
    bad = {"outside the speech-token vocabulary": dict(tokens=[1, 40]),
           "prompt_tokens hold id -1": dict(prompt_tokens=[4, -1]),
           "tokens is empty": dict(tokens=[]),
           "3 frames for 2 prompt tokens": dict(prompt_feat=np.zeros((3, 80), np.float32)),
           r"embedding must be \[12\]": dict(embedding=np.ones(192, np.float32)),
           "must be finite": dict(prompt_feat=np.full((4, 80), np.inf, np.float32))}
    for message, change in bad.items():
        with pytest.raises(ValueError, match=message):
            runtime.mel(**{**ok, **change})
    with pytest.raises(ValueError, match="more than the noise table"):
        runtime.mel(**{**ok, "tokens": np.ones(7500, np.int64)})
    cv2_like = {"input_embedding.weight": np.zeros((40, 80), np.float32),
                "encoder.embed.out.0.weight": np.zeros((512, 80), np.float32)}
    with pytest.raises(ConverterError, match="not a CosyVoice 3 flow checkpoint"):
        build_cosyvoice3_flow_encoder_graph(TINY, cv2_like)
    with pytest.raises(ConverterError, match="not a CosyVoice 3 flow checkpoint"):
        build_cosyvoice3_flow_estimator_graph(TINY, {"decoder.estimator.time_mlp.linear_1.weight": np.zeros(1)})
    with pytest.raises(ConverterError, match="not a CosyVoice 2 flow checkpoint"):
        build_cosyvoice_flow_encoder_graph({}, {"input_embedding.weight": np.zeros((40, 80), np.float32),
                                                "pre_lookahead_layer.conv1.weight": np.zeros(1)})
    estimator = TINY["decoder"]["estimator"]
    refused = {"long_skip_connection": (NotImplementedError, {**estimator, "long_skip_connection": True}),
               "mu_dim 64 differs": (ConverterError, {**estimator, "mu_dim": 64}),
               "convolution groups": (ConverterError, {**estimator, "dim": 40})}
    for message, (error, est) in refused.items():
        with pytest.raises(error, match=message):
            build_cosyvoice3_flow_estimator_graph({**TINY, "decoder": {**TINY["decoder"], "estimator": est}}, {})
    with pytest.raises(ConverterError, match="tensor 'pre_lookahead_layer.conv1.weight'.*shape"):
        weights = {k: v.numpy() for k, v in tiny_model(seed=1).state_dict().items()}
        wide = {**TINY, "pre_lookahead_layer": {**TINY["pre_lookahead_layer"], "channels": 24}}
        build_cosyvoice3_flow_encoder_graph(wide, weights)


@pytest.mark.slow
def test_real_size_graphs_equal_reference(tmp_path):
    """The released sizes with PyTorch's default random initialisation (1.3 GB of float32): encoder outputs and one
    estimator call (16 heads, the rotation on the first only) within 1e-4 of the reference."""
    from converter.writer import write_ms
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.multimodal.cosyvoice3_flow_graph import (build_cosyvoice3_flow_encoder_graph,
                                                            build_cosyvoice3_flow_estimator_graph)
    from model_zoo.reference.cosyvoice3_flow import CausalMaskedDiffWithDiT
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    torch.manual_seed(0)
    model = CausalMaskedDiffWithDiT(REAL).eval()
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    paths = [write_ms(build(REAL, weights), str(tmp_path / f"{name}.ms")).path
             for name, build in (("encoder", build_cosyvoice3_flow_encoder_graph),
                                 ("estimator", build_cosyvoice3_flow_estimator_graph))]
    runtime = CosyVoiceFlow(*paths, flow_noise_table(), REAL, threads=2)
    rng = np.random.default_rng(7)
    tokens, xvec = rng.integers(0, 6561, 20), rng.standard_normal(192).astype(np.float32)
    mu, spks = runtime.encode(tokens, xvec)
    x, cond = (rng.standard_normal((2, 80, 40)).astype(np.float32) for _ in range(2))
    args = (x, np.ones((2, 1, 40), np.float32), np.stack([mu, mu]), np.array([0.3, 0.3], np.float32),
            np.stack([spks, 0 * spks]), cond)
    got = runtime.velocity(*args)
    with torch.no_grad():
        close(mu, model.encode(torch.from_numpy(tokens)[None])[0].numpy())
        close(spks, model.speaker(torch.from_numpy(xvec)[None])[0].numpy())
        close(got, model.decoder.estimator(*map(torch.from_numpy, args)).numpy())
