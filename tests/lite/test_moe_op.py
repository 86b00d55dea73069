"""The MoE operator (format 1.13) against its NumPy definition (converter.ops.moe): routing by top_k of softmax with
and without renormalisation, SiLU and GELU gating, tokens that share experts and experts no token takes, weights
stored float32 or compressed, and clear errors for inconsistent inputs."""
from __future__ import annotations

import numpy as np
import pytest

from converter.ir import Graph, Node, Tensor
from converter.ops import moe
from converter.quantization import decode, quantize
from converter.writer import write_ms
from parity import load

F32 = np.dtype(np.float32)


def moe_file(path, experts: list[np.ndarray], stored: list, tokens: int, hidden: int, num: int, attrs: dict) -> str:
    g = Graph(name="moe")
    g.tensors["x"] = Tensor("x", F32, [tokens, hidden])
    g.tensors["logits"] = Tensor("logits", F32, [tokens, num])
    names = []
    for i, (w, s) in enumerate(zip(experts, stored)):
        name = f"w{i}"
        g.tensors[name] = Tensor(name, F32, list(w.shape), w)
        g.tensors[name].stored = s
        names.append(name)
    g.tensors["y"] = Tensor("y", F32, [tokens, hidden])
    g.nodes.append(Node("moe", "MoE", ["x", "logits"] + names, ["y"], attrs))
    g.inputs, g.outputs = ["x", "logits"], ["y"]
    write_ms(g, str(path))
    return str(path)


def expert_weights(rng, num, hidden, inter):
    return [rng.standard_normal((hidden, 2 * inter)).astype(np.float32) * 0.3 for _ in range(num)] + \
           [rng.standard_normal((inter, hidden)).astype(np.float32) * 0.3 for _ in range(num)]


@pytest.mark.parametrize("top_k,normalize,act", [(1, False, "silu"), (2, False, "silu"), (3, True, "silu"),
                                                 (2, True, "gelu_tanh"), (6, False, "gelu")])
@pytest.mark.parametrize("tokens", [1, 5, 13])
def test_moe_matches_its_definition(tmp_path, top_k, normalize, act, tokens):
    rng = np.random.default_rng(tokens * 10 + top_k)
    num, hidden, inter = 6, 24, 20
    weights = expert_weights(rng, num, hidden, inter)
    attrs = {"top_k": top_k, "normalize_top_k": normalize, "activation": act}
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    logits = rng.standard_normal((tokens, num)).astype(np.float32) * 3
    got = load(moe_file(tmp_path / "m.ms", weights, [None] * len(weights), tokens, hidden, num, attrs)).predict(
        {"x": x, "logits": logits})[0].get_data_to_numpy()
    want = moe(x, logits, weights, top_k=top_k, normalize_top_k=normalize, activation=act)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("dynamic_quant", [False, True])
@pytest.mark.parametrize("bits,group", [(8, 0), (4, 8)])
def test_compressed_experts(tmp_path, bits, group, dynamic_quant):
    """Experts stored as int8 / int4 codes: read as stored, the float32 definition on the decoded weights within
    float32 rounding; with Context.cpu.dynamic_quant the chosen experts' products run on int8 activations and the
    output moves off it only by that rounding."""
    import lite
    if dynamic_quant and "avx512_vnni" not in open("/proc/cpuinfo").read():
        pytest.skip("dynamic quantisation needs VNNI")
    rng = np.random.default_rng(4)
    num, hidden, inter, tokens = 4, 64, 32, 5
    weights = expert_weights(rng, num, hidden, inter)
    stored = [quantize(w, bits, 0 if group else 1, group, True) for w in weights]
    values = [decode(s, w.shape) for s, w in zip(stored, weights)]
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    logits = rng.standard_normal((tokens, num)).astype(np.float32) * 3
    attrs = {"top_k": 2, "normalize_top_k": True, "activation": "silu"}
    ctx = lite.Context()
    ctx.cpu.dynamic_quant = dynamic_quant
    model = lite.Model()
    model.build_from_file(moe_file(tmp_path / "m.ms", values, stored, tokens, hidden, num, attrs),
                          lite.ModelType.MINDIR_LITE, ctx)
    assert model.dynamic_quant == dynamic_quant
    got = model.predict({"x": x, "logits": logits})[0].get_data_to_numpy()
    want = moe(x, logits, values, top_k=2, normalize_top_k=True)
    error = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < error < 2e-2 if dynamic_quant else error < 2e-4


def test_inconsistent_moe_is_refused_clearly(tmp_path):
    rng = np.random.default_rng(4)
    weights = expert_weights(rng, 3, 8, 4)
    path = moe_file(tmp_path / "k.ms", weights, [None] * 6, 2, 8, 3, {"top_k": 4})
    with pytest.raises(ValueError, match="top_k 4 must be in"):
        load(path)
    bad = list(weights)
    bad[4] = rng.standard_normal((5, 8)).astype(np.float32)   # expert 1's down weight: [5, 8], not [4, 8]
    path = moe_file(tmp_path / "s.ms", bad, [None] * 6, 2, 8, 3, {"top_k": 1})
    with pytest.raises(ValueError, match="expert 1's down weight"):
        load(path)
