"""CosyVoice 2's and 3's flow-matching models on the runtime; a test runs for both versions (the `version` fixture: v2,
v3) unless marked for one. A tiny CausalMaskedDiffWithXvec (CosyVoice 2, model_zoo.reference.cosyvoice_flow) or
CausalMaskedDiffWithDiT (CosyVoice 3, model_zoo.reference.cosyvoice3_flow), the PyTorch references, with seeded random
weights for every tensor, its state_dict as arrays through model_zoo.multimodal.cosyvoice_flow_graph /
cosyvoice3_flow_graph to .ms files, run by lite.cosyvoice_flow.CosyVoiceFlow (the same for both): the encoder graph's
mu / spks and one estimator call (a padded mask included) within 1e-4 of the reference at two lengths;
CosyVoiceFlow.mel (the Euler loop with classifier-free guidance in NumPy) within 1e-4 of the reference's inference
with and without a prompt; int8 weights stay close; the real-size graphs build with kernels for every node; bad input
is refused by name. Per version: the released flow.pt's tensor names and shapes; foreign checkpoints and configs
refused. CosyVoice 2: the noise table equals the original's global-seed draw. CosyVoice 3: the rotation of the first
head, the encoder's locality and (slow) the real-size graphs against the reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.families.cosyvoice import RELEASE_FLOW_V2

CFM = dict(sigma_min=1e-06, solver="euler", t_scheduler="cosine", training_cfg_rate=0.2, inference_cfg_rate=0.7,
           reg_loss_type="l1")
TINY_V2 = dict(input_size=24, output_size=80, spk_embed_dim=12, output_type="mel", vocab_size=40, input_frame_rate=25,
               only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
               encoder=dict(output_size=24, attention_heads=4, linear_units=40, num_blocks=2, num_up_blocks=1,
                            input_size=24, dropout_rate=0.1, positional_dropout_rate=0.1, attention_dropout_rate=0.1,
                            normalize_before=True, input_layer="linear", pos_enc_layer_type="rel_pos_espnet",
                            selfattention_layer_type="rel_selfattn", use_cnn_module=False, macaron_style=False,
                            use_dynamic_chunk=True),
               decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=CFM,
                            estimator=dict(in_channels=320, out_channels=80, channels=[32], dropout=0.0,
                                           attention_head_dim=8, n_blocks=2, num_mid_blocks=2, num_heads=2,
                                           act_fn="gelu", static_chunk_size=50, num_decoding_left_chunks=2)))
TINY_V3 = dict(input_size=80, output_size=80, spk_embed_dim=12, output_type="mel", vocab_size=40, input_frame_rate=25,
               only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
               pre_lookahead_layer=dict(in_channels=80, channels=16, pre_lookahead_len=3),
               decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=CFM,
                            estimator=dict(dim=32, depth=2, heads=2, dim_head=16, ff_mult=2, mel_dim=80, mu_dim=80,
                                           spk_dim=80, out_channels=80, static_chunk_size=50,
                                           num_decoding_left_chunks=-1)))
REAL_V3 = dict(input_size=80, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561,
               input_frame_rate=25, only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
               pre_lookahead_layer=dict(in_channels=80, channels=1024, pre_lookahead_len=3),
               decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=CFM,
                            estimator=dict(dim=1024, depth=22, heads=16, dim_head=64, ff_mult=2, mel_dim=80,
                                           mu_dim=80, spk_dim=80, out_channels=80, static_chunk_size=50,
                                           num_decoding_left_chunks=-1)))
TINY = {2: TINY_V2, 3: TINY_V3}
REAL = {2: RELEASE_FLOW_V2, 3: REAL_V3}   # the released cosyvoice2.yaml's / cosyvoice3.yaml's flow


def only(version: int):
    """Marks a test of one version: the `version` fixture at that one alone."""
    return pytest.mark.parametrize("version", [version], ids=[f"v{version}"], indirect=True)


def flow_class(version: int) -> type:
    """The reference flow: CosyVoice 2's CausalMaskedDiffWithXvec or CosyVoice 3's CausalMaskedDiffWithDiT."""
    if version == 2:
        from model_zoo.reference.cosyvoice_flow import CausalMaskedDiffWithXvec
        return CausalMaskedDiffWithXvec
    from model_zoo.reference.cosyvoice3_flow import CausalMaskedDiffWithDiT
    return CausalMaskedDiffWithDiT


def builders(version: int) -> tuple:
    """The version's (encoder, estimator) graph builders."""
    from model_zoo.multimodal import cosyvoice3_flow_graph as v3
    from model_zoo.multimodal import cosyvoice_flow_graph as v2
    if version == 2:
        return v2.build_cosyvoice_flow_encoder_graph, v2.build_cosyvoice_flow_estimator_graph
    return v3.build_cosyvoice3_flow_encoder_graph, v3.build_cosyvoice3_flow_estimator_graph


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> float:
    """The largest difference relative to the reference's largest magnitude; asserted below `rel`."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < rel, err
    return err


def tiny_model(version: int, seed: int):
    torch.manual_seed(seed)
    model = flow_class(version)(TINY[version]).eval()
    # every tensor drawn: the token table ~ 1, norms around 1, biases / position biases around 0, matrices ~ 1/fan-in;
    # CosyVoice 3's adaLN projections (".linear.") larger, shift / scale / gate clearly away from 0 and 1
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = p.ndim == 1 and name.endswith("weight") and any(k in name for k in ("norm", "out.1", "block.2"))
            if name == "input_embedding.weight":
                p.copy_(torch.randn_like(p))
            elif norm:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1 or "pos_bias" in name:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                gain = 2.0 if ".linear." in name else 1.0
                p.copy_(gain * torch.randn_like(p) / p[0].numel() ** 0.5)
    return model


def write_graphs(version: int, model, root, weight_format: str = "float32") -> tuple[str, str]:
    from converter.runtime_check import check_runtime_kernels
    from converter.writer import write_ms
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    paths = []
    for name, build in zip(("encoder", "estimator"), builders(version)):
        graph = build(TINY[version], weights, weight_format=weight_format)
        check_runtime_kernels(graph)
        paths.append(write_ms(graph, str(root / f"flow{version}_{name}_{weight_format}.ms")).path)
    return paths[0], paths[1]


def real_shapes(version: int) -> dict[str, tuple[int, ...]]:
    """The released config's state_dict shapes (nothing allocated)."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in flow_class(version)(REAL[version]).state_dict().items()}


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def version(request) -> int:
    return request.param


@pytest.fixture(scope="module")
def flow(version, tmp_path_factory):
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    model = tiny_model(version, seed=0)
    encoder, estimator = write_graphs(version, model, tmp_path_factory.mktemp(f"cosyvoice{version}_flow"))
    return model, CosyVoiceFlow(encoder, estimator, flow_noise_table(), TINY[version])


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


@only(2)
def test_conformer_reference_has_the_released_tensor_names(version):
    """CosyVoice 2: the real config's state_dict (shapes only, nothing allocated) holds flow.pt's names and shapes,
    and nothing else."""
    shapes = real_shapes(version)
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


@only(3)
def test_dit_reference_has_the_released_tensor_names(version):
    """CosyVoice 3: the real config's state_dict (shapes only, nothing allocated) holds flow.pt's names and shapes,
    and nothing else; a state_dict loads back strictly."""
    shapes = real_shapes(version)
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
    model = tiny_model(version, seed=5)
    state = {k: v.clone() for k, v in tiny_model(version, seed=6).state_dict().items()}
    model.load_state_dict(state, strict=True)
    inv = state["decoder.estimator.rotary_embed.inv_freq"]
    assert torch.equal(inv, 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16))


def test_rotary_turns_the_first_head_only():
    """CosyVoice 3, x-transformers' rotation: interleaved pairs, applied to the first dim_head channels of the heads
    side by side; the reference's attention output depends on position only through that head."""
    from model_zoo.reference.cosyvoice3_flow import apply_rotary, rotary_angles
    x = torch.randn(1, 5, 32)
    inv = 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16)
    y = apply_rotary(x, rotary_angles(inv, 5))
    assert torch.equal(y[..., 16:], x[..., 16:]) and torch.equal(y[:, 0], x[:, 0])
    angle = 3 * inv[1]   # frame 3, pair (2, 3)
    want = torch.stack([x[0, 3, 2] * angle.cos() - x[0, 3, 3] * angle.sin(),
                        x[0, 3, 3] * angle.cos() + x[0, 3, 2] * angle.sin()])
    assert torch.allclose(y[0, 3, 2:4], want, atol=1e-6)


def test_encoder_graph_equals_reference(version, flow):
    model, runtime = flow
    rng = np.random.default_rng(1)
    for n in (5, 23):
        tokens = rng.integers(0, TINY[version]["vocab_size"], n)
        xvec = rng.standard_normal(TINY[version]["spk_embed_dim"]).astype(np.float32) * 3
        mu, spks = runtime.encode(tokens, xvec)
        with torch.no_grad():
            want_mu = model.encode(torch.from_numpy(tokens)[None])[0].numpy()
            want_spks = model.speaker(torch.from_numpy(xvec)[None])[0].numpy()
        assert mu.shape == (80, 2 * n)
        close(mu, want_mu)
        close(spks, want_spks)


@only(3)
def test_dit_encoder_frames_see_nearby_tokens_only(version, flow):
    """CosyVoice 3's encoder (no attention): each token's frame repeated; token i's frames see tokens i - 2 .. i + 3
    (the look-ahead convolution, then the causal one): changing token 10 changes the frames of tokens 7 .. 12 and no
    others. (The draws of test_encoder_graph_equals_reference.)"""
    _, runtime = flow
    rng = np.random.default_rng(1)
    for n in (5, 23):
        tokens = rng.integers(0, TINY[version]["vocab_size"], n)
        xvec = rng.standard_normal(TINY[version]["spk_embed_dim"]).astype(np.float32) * 3
        mu = runtime.encode(tokens, xvec)[0]
        assert np.array_equal(mu[:, 0::2], mu[:, 1::2])   # each token's frame repeated
    changed = tokens.copy()
    changed[10] = (changed[10] + 1) % TINY[version]["vocab_size"]
    moved = np.abs(runtime.encode(changed, xvec)[0] - mu).max(axis=0)[0::2] > 0
    assert np.array_equal(np.flatnonzero(moved), np.arange(7, 13))


def test_estimator_graph_equals_reference(version, flow):
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
        if version == 2:   # CosyVoice 2 masks the output: the padded frames come out zero (CosyVoice 3 does not)
            assert np.all(got[1, :, frames - 3:] == 0)
        # the padding matters: unmasked, row 1's valid frames come out otherwise
        full = runtime.velocity(x, np.ones_like(mask), mu, t, spks, cond)
        assert np.abs(full[1, :, :frames - 3] - got[1, :, :frames - 3]).max() > 1e-3


@pytest.mark.parametrize("prompt_tokens", [0, 4])
def test_mel_equals_reference_inference(version, flow, prompt_tokens):
    """The whole loop (10 Euler steps, 20 estimator rows) against the reference's inference: within 1e-4 of the
    largest magnitude (about 1e-6 is what CosyVoice 2 gets)."""
    model, runtime = flow
    rng = np.random.default_rng(3 + prompt_tokens)
    tokens = rng.integers(0, TINY[version]["vocab_size"], 9)
    prompt = rng.integers(0, TINY[version]["vocab_size"], prompt_tokens)
    prompt_feat = rng.standard_normal((2 * prompt_tokens, 80)).astype(np.float32)
    xvec = rng.standard_normal(TINY[version]["spk_embed_dim"]).astype(np.float32)
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


def test_int8_weights_stay_close(version, flow, tmp_path):
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    model, runtime = flow
    quantised = CosyVoiceFlow(*write_graphs(version, model, tmp_path, "int8"), flow_noise_table(), TINY[version])
    rng = np.random.default_rng(4)
    tokens, xvec = rng.integers(0, TINY[version]["vocab_size"], 7), rng.standard_normal(12).astype(np.float32)
    mu, _ = quantised.encode(tokens, xvec)
    close(mu, runtime.encode(tokens, xvec)[0], rel=5e-2)
    x, m, c = (rng.standard_normal((2, 80, 14)).astype(np.float32) for _ in range(3))
    args = (x, np.ones((2, 1, 14), np.float32), m, np.array([0.3, 0.3], np.float32),
            rng.standard_normal((2, 80)).astype(np.float32), c)
    close(quantised.velocity(*args), runtime.velocity(*args), rel=5e-2)


def test_real_size_graphs_build(version):
    """The released sizes (read-only zero tensors of flow.pt's shapes, nothing allocated): both graphs build, every
    node has a CPU kernel, and the interfaces are the documented ones (CosyVoice 3's are CosyVoice 2's)."""
    from converter.runtime_check import check_runtime_kernels
    build_encoder, build_estimator = builders(version)
    weights = {k: np.broadcast_to(np.float32(0), s) for k, s in real_shapes(version).items()}
    encoder = build_encoder(REAL[version], weights)
    estimator = build_estimator(REAL[version], weights, weight_format="int8")
    for graph in (encoder, estimator):
        check_runtime_kernels(graph)
    assert encoder.inputs == ["tokens", "embedding"] and encoder.outputs == ["mu", "spks"]
    assert estimator.inputs == ["x", "mask", "mu", "t", "spks", "cond"] and estimator.outputs == ["dphi"]
    # Attention nodes in the encoder and the estimator, RotaryEmbedding nodes: CosyVoice 2's Conformer layers
    # (6 + 4) and U-Net transformer blocks (4 in each of 14 stages); CosyVoice 3's 22 DiT blocks, q and k rotated
    want = {2: (6 + 4, 4 * (1 + 12 + 1), 0), 3: (0, 22, 2 * 22)}[version]
    nodes = ((encoder, "Attention"), (estimator, "Attention"), (estimator, "RotaryEmbedding"))
    assert tuple(sum(n.op_type == op for n in graph.nodes) for graph, op in nodes) == want


def test_bad_input_is_refused(version, flow):
    _, runtime = flow
    ok = dict(tokens=[1, 2, 3], prompt_tokens=[4, 5], prompt_feat=np.zeros((4, 80), np.float32),
              embedding=np.ones(12, np.float32))
    assert runtime.mel(**ok, n_timesteps=1).shape == (80, 6)
    bad = [("outside the speech-token vocabulary", dict(tokens=[1, 40])),
           ("prompt_tokens hold id -1", dict(prompt_tokens=[4, -1])),
           ("tokens is empty", dict(tokens=[])),
           ("must be integer token ids", dict(tokens=[1.5, 2.0])),
           ("3 frames for 2 prompt tokens", dict(prompt_feat=np.zeros((3, 80), np.float32))),
           (r"prompt_feat must be \[frames, 80\]", dict(prompt_feat=np.zeros((4, 79), np.float32))),
           (r"embedding must be \[12\]", dict(embedding=np.ones(192, np.float32))),
           ("must be finite", dict(embedding=np.full(12, np.nan, np.float32))),
           ("must be finite", dict(prompt_feat=np.full((4, 80), np.inf, np.float32))),
           ("sequence of token ids", dict(tokens=[[1, 2], [3, 4]]))]
    for message, change in bad:
        with pytest.raises(ValueError, match=message):
            runtime.mel(**{**ok, **change})
    with pytest.raises(ValueError, match="n_timesteps"):
        runtime.mel(**ok, n_timesteps=0)
    with pytest.raises(ValueError, match="more than the noise table"):
        runtime.mel(**{**ok, "tokens": np.ones(7500, np.int64)})
    with pytest.raises(ValueError, match="noise table must be"):
        type(runtime)("unused.ms", "unused.ms", np.zeros((2, 80, 10), np.float32), TINY[version])


@only(2)
def test_conformer_graphs_refuse_foreign_checkpoints_and_configs(version):
    from converter.ir import ConverterError
    from model_zoo.multimodal.cosyvoice_flow_graph import build_cosyvoice_flow_encoder_graph
    with pytest.raises(ConverterError, match="not a CosyVoice 2 flow checkpoint"):
        build_cosyvoice_flow_encoder_graph(TINY[version], {"llm.x": np.zeros(1, np.float32)})
    with pytest.raises(ConverterError, match="not a CosyVoice 2 flow checkpoint"):   # CosyVoice 3's flow.pt
        build_cosyvoice_flow_encoder_graph({}, {"input_embedding.weight": np.zeros((40, 80), np.float32),
                                                "pre_lookahead_layer.conv1.weight": np.zeros(1)})
    with pytest.raises(NotImplementedError, match="one level"):
        build_cosyvoice_flow_encoder_graph({**TINY[version], "decoder": {"estimator": {"channels": [256, 256]}}}, {})


@only(3)
def test_dit_graphs_refuse_foreign_checkpoints_and_configs(version):
    from converter.ir import ConverterError
    from model_zoo.multimodal.cosyvoice3_flow_graph import (build_cosyvoice3_flow_encoder_graph,
                                                            build_cosyvoice3_flow_estimator_graph)
    tiny = TINY[version]
    cv2_like = {"input_embedding.weight": np.zeros((40, 80), np.float32),
                "encoder.embed.out.0.weight": np.zeros((512, 80), np.float32)}
    with pytest.raises(ConverterError, match="not a CosyVoice 3 flow checkpoint"):
        build_cosyvoice3_flow_encoder_graph(tiny, cv2_like)
    with pytest.raises(ConverterError, match="not a CosyVoice 3 flow checkpoint"):
        build_cosyvoice3_flow_estimator_graph(tiny, {"decoder.estimator.time_mlp.linear_1.weight": np.zeros(1)})
    estimator = tiny["decoder"]["estimator"]
    refused = {"long_skip_connection": (NotImplementedError, {**estimator, "long_skip_connection": True}),
               "mu_dim 64 differs": (ConverterError, {**estimator, "mu_dim": 64}),
               "convolution groups": (ConverterError, {**estimator, "dim": 40})}
    for message, (error, est) in refused.items():
        with pytest.raises(error, match=message):
            build_cosyvoice3_flow_estimator_graph({**tiny, "decoder": {**tiny["decoder"], "estimator": est}}, {})
    with pytest.raises(ConverterError, match="tensor 'pre_lookahead_layer.conv1.weight'.*shape"):
        weights = {k: v.numpy() for k, v in tiny_model(version, seed=1).state_dict().items()}
        wide = {**tiny, "pre_lookahead_layer": {**tiny["pre_lookahead_layer"], "channels": 24}}
        build_cosyvoice3_flow_encoder_graph(wide, weights)


@pytest.mark.slow
@only(3)
def test_dit_real_size_graphs_equal_reference(version, tmp_path):
    """CosyVoice 3's released sizes with PyTorch's default random initialisation (1.3 GB of float32): encoder outputs
    and one estimator call (16 heads, the rotation on the first only) within 1e-4 of the reference."""
    from converter.writer import write_ms
    from lite.cosyvoice_flow import CosyVoiceFlow
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    torch.manual_seed(0)
    model = flow_class(version)(REAL[version]).eval()
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    paths = [write_ms(build(REAL[version], weights), str(tmp_path / f"{name}.ms")).path
             for name, build in zip(("encoder", "estimator"), builders(version))]
    runtime = CosyVoiceFlow(*paths, flow_noise_table(), REAL[version], threads=2)
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
