"""The linear-attention operators (format 1.14), CausalConv1D and GatedDeltaRule, against their NumPy definitions
(converter.ops) and transformers' Qwen3.5 reference functions: several sequences in one step, the state carried
across steps in place (a prompt split into chunks gives what it gives in one piece), slot -1 (from zeros, nothing
kept), grouped value heads, and clear errors for inconsistent steps."""
from __future__ import annotations

import numpy as np
import pytest

from converter.ir import Graph, Node, Tensor
from converter.ops import causal_conv1d, gated_delta_rule
from converter.writer import write_ms
from parity import load

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)


def conv_file(path, weight, activation="silu"):
    C, K = weight.shape
    g = Graph(name="conv")
    for name, dtype, shape in (("x", F32, [-1, C]), ("state", F32, [-1, C, K - 1]), ("slots", I64, [-1]),
                               ("lens", I64, [-1])):
        g.tensors[name] = Tensor(name, dtype, shape)
    g.tensors["w"] = Tensor("w", F32, [C, K], weight)
    g.tensors["y"] = Tensor("y", F32, None)
    g.nodes.append(Node("conv", "CausalConv1D", ["x", "w", "state", "slots", "lens"], ["y"], {"activation": activation}))
    g.inputs, g.outputs = ["x", "state", "slots", "lens"], ["y"]
    write_ms(g, str(path))
    return load(str(path))


def delta_file(path, width, hv, dk, dv):
    g = Graph(name="delta")
    for name, dtype, shape in (("qkv", F32, [-1, width]), ("g", F32, [-1, hv]), ("beta", F32, [-1, hv]),
                               ("state", F32, [-1, hv, dk, dv]), ("slots", I64, [-1]), ("lens", I64, [-1])):
        g.tensors[name] = Tensor(name, dtype, shape)
    g.tensors["o"] = Tensor("o", F32, None)
    g.nodes.append(Node("delta", "GatedDeltaRule", ["qkv", "g", "beta", "state", "slots", "lens"], ["o"],
                        {"qk_l2norm": True}))
    g.inputs, g.outputs = ["qkv", "g", "beta", "state", "slots", "lens"], ["o"]
    write_ms(g, str(path))
    return load(str(path))


def run(model, feeds):
    return model.predict(feeds)[0].get_data_to_numpy()


@pytest.mark.parametrize("activation", [None, "silu"])
def test_causal_conv_matches_definition_and_carries_its_window(tmp_path, activation):
    rng = np.random.default_rng(0)
    C, K = 12, 4
    w = rng.standard_normal((C, K)).astype(np.float32)
    model = conv_file(tmp_path / "c.ms", w, activation)
    lens = np.array([5, 1, 2, 0], np.int64)   # a chunk, a decode, a chunk shorter than the window, an empty one
    slots = np.array([2, 0, -1, 1], np.int64)
    x = rng.standard_normal((int(lens.sum()), C)).astype(np.float32)
    state = rng.standard_normal((3, C, K - 1)).astype(np.float32)
    want_state = state.copy()
    want = causal_conv1d(x, w, want_state, slots, lens, activation=activation)
    got = run(model, {"x": x, "state": state, "slots": slots, "lens": lens})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state, want_state, rtol=0, atol=0)   # updated in place; slot 1 (no tokens) unchanged

    # one sequence in three steps equals it in one (the state is the window between them)
    seq = rng.standard_normal((9, C)).astype(np.float32)
    whole = run(model, {"x": seq, "state": np.zeros((1, C, K - 1), np.float32), "slots": np.array([-1]),
                        "lens": np.array([9])})
    state = np.zeros((1, C, K - 1), np.float32)
    parts = [run(model, {"x": seq[a:b], "state": state, "slots": np.array([0]), "lens": np.array([b - a])})
             for a, b in ((0, 2), (2, 3), (3, 9))]
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-6, atol=1e-6)


def test_causal_conv_matches_transformers():
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_fn
    rng = np.random.default_rng(1)
    C, K, T = 16, 4, 7
    w = rng.standard_normal((C, K)).astype(np.float32)
    x = rng.standard_normal((T, C)).astype(np.float32)
    want = causal_conv1d_fn(torch.from_numpy(x.T[None].copy()), torch.from_numpy(w), None, activation="silu")[0].T
    got = causal_conv1d(x, w, np.zeros((1, C, K - 1), np.float32), np.array([-1]), np.array([T]), activation="silu")
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def delta_inputs(rng, tokens, hk, hv, dk, dv):
    qkv = rng.standard_normal((tokens, 2 * hk * dk + hv * dv)).astype(np.float32)
    g = -np.abs(rng.standard_normal((tokens, hv))).astype(np.float32)
    beta = rng.uniform(0, 1, (tokens, hv)).astype(np.float32)
    return qkv, g, beta


@pytest.mark.parametrize("hk,hv,dk,dv", [(2, 2, 8, 8), (2, 4, 8, 12), (1, 3, 16, 4)])
def test_gated_delta_rule_matches_definition(tmp_path, hk, hv, dk, dv):
    rng = np.random.default_rng(hv * 10 + dk)
    lens = np.array([6, 1, 0, 3], np.int64)
    slots = np.array([1, 3, 0, -1], np.int64)
    qkv, g, beta = delta_inputs(rng, int(lens.sum()), hk, hv, dk, dv)
    state = rng.standard_normal((4, hv, dk, dv)).astype(np.float32) * 0.3
    want_state = state.copy()
    want = gated_delta_rule(qkv, g, beta, want_state, slots, lens)
    model = delta_file(tmp_path / "d.ms", qkv.shape[1], hv, dk, dv)
    got = run(model, {"qkv": qkv, "g": g, "beta": beta, "state": state, "slots": slots, "lens": lens})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, want_state, rtol=1e-4, atol=1e-5)


def test_gated_delta_rule_matches_transformers_chunked_and_recurrent(tmp_path):
    """transformers' chunked form (its prompts) and recurrent form (its decode steps) against ours: a 70-token
    prompt in chunks of 20, 1, 49 then 3 single-token steps, with grouped value heads."""
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import (torch_chunk_gated_delta_rule,
                                                              torch_recurrent_gated_delta_rule)
    rng = np.random.default_rng(5)
    hk, hv, dk, dv, T = 2, 4, 16, 8, 73
    qkv, g, beta = delta_inputs(rng, T, hk, hv, dk, dv)
    q = torch.from_numpy(qkv[:, :hk * dk].reshape(1, T, hk, dk).copy())
    k = torch.from_numpy(qkv[:, hk * dk:2 * hk * dk].reshape(1, T, hk, dk).copy())
    v = torch.from_numpy(qkv[:, 2 * hk * dk:].reshape(1, T, hv, dv).copy())
    gt, bt = torch.from_numpy(g[None].copy()), torch.from_numpy(beta[None].copy())
    prompt, state = torch_chunk_gated_delta_rule(q[:, :70], k[:, :70], v[:, :70], gt[:, :70], bt[:, :70],
                                                 output_final_state=True, use_qk_l2norm_in_kernel=True)
    outs = [prompt]
    for t in range(70, T):
        o, state = torch_recurrent_gated_delta_rule(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], gt[:, t:t + 1],
                                                    bt[:, t:t + 1], initial_state=state, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
        outs.append(o)
    want = torch.cat(outs, dim=1)[0].reshape(T, hv * dv).numpy()
    model = delta_file(tmp_path / "d.ms", qkv.shape[1], hv, dk, dv)
    ours = np.zeros((1, hv, dk, dv), np.float32)
    got = []
    for a, b in ((0, 20), (20, 21), (21, 70), (70, 71), (71, 72), (72, 73)):
        got.append(run(model, {"qkv": qkv[a:b], "g": g[a:b], "beta": beta[a:b], "state": ours,
                               "slots": np.array([0]), "lens": np.array([b - a])}))
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    np.testing.assert_allclose(ours[0], state[0].numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("slots,lens,pattern", [
    ([0, 0], [1, 1], "named by two sequences"),
    ([5, 0], [1, 1], "outside"),
    ([0, 1], [1, 2], "add up to 3 tokens, the input holds 2"),
    ([0, -2], [1, 1], "outside"),
])
def test_inconsistent_steps_are_refused(tmp_path, slots, lens, pattern):
    hk, hv, dk, dv = 1, 2, 4, 4
    model = delta_file(tmp_path / "d.ms", 2 * hk * dk + hv * dv, hv, dk, dv)
    qkv, g, beta = delta_inputs(np.random.default_rng(0), 2, hk, hv, dk, dv)
    state = np.zeros((2, hv, dk, dv), np.float32)
    with pytest.raises(ValueError, match=pattern):
        run(model, {"qkv": qkv, "g": g, "beta": beta, "state": state, "slots": np.array(slots, np.int64),
                    "lens": np.array(lens, np.int64)})
    assert not state.any()   # nothing written by a refused step
