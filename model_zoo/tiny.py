"""Small ONNX models built in code with seeded random weights: the demo's model and test fixtures."""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(rng: np.random.Generator, name: str, shape, scale: float = 0.1) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _bn(rng, prefix: str, c: int) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(v.astype(np.float32), f"{prefix}_{k}") for k, v in
            (("s", rng.random(c) + 0.5), ("b", rng.random(c) - 0.5), ("m", rng.random(c) - 0.5), ("v", rng.random(c) + 0.5))]


def small_cnn(seed: int = 0, batch: int | str = "N", classes: int = 10) -> onnx.ModelProto:
    """conv/bn/relu -> residual block -> maxpool -> global pool -> gemm -> softmax, dynamic batch."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (16, 3, 3, 3), 0.3), _init(rng, "b1", (16,)),
             _init(rng, "w2", (16, 16, 3, 3), 0.1), _init(rng, "w3", (16, 16, 1, 1), 0.2),
             _init(rng, "fc_w", (classes, 16), 0.3), _init(rng, "fc_b", (classes,))]
    inits += _bn(rng, "bn1", 16) + _bn(rng, "bn2", 16)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"], name="bn2"),
        helper.make_node("Relu", ["n2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "r1"], ["res"], name="residual"),
        helper.make_node("Relu", ["res"], ["r3"], name="relu3"),
        helper.make_node("MaxPool", ["r3"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("GlobalAveragePool", ["p"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 32, 32])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="model_zoo")


def mlp(seed: int = 0, dims: tuple[int, ...] = (64, 128, 128, 10)) -> onnx.ModelProto:
    """MatMul + Add + activation layers, dynamic batch."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    acts = ["Relu", "Tanh", "Sigmoid"]
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        inits += [_init(rng, f"w{i}", (a, b), 1 / np.sqrt(a)), _init(rng, f"b{i}", (b,))]
        nodes += [helper.make_node("MatMul", [cur, f"w{i}"], [f"mm{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"h{i}"], name=f"bias{i}")]
        cur = f"h{i}"
        if i < len(dims) - 2:
            nodes.append(helper.make_node(acts[i % len(acts)], [cur], [f"a{i}"], name=f"act{i}"))
            cur = f"a{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dims[0]])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, ["N", dims[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="model_zoo")


def conv_chain(seed: int):
    """A seeded random Conv between channel-blocked tensors, for the layout tests (tests/lite/test_blocked_conv_chains)
    and the ARM64 corpus: a 3x3 Conv that writes blocks, the Conv under test (kernel 1 / 3 / 5, stride, dilation,
    one-sided pads, groups from 1 to depthwise, output channels, then ReLU, a residual Add or nothing), a 1x1 Conv to
    the output. Returns (model, its input, what was drawn)."""
    rng = np.random.default_rng(seed)
    while True:
        C = int(rng.choice([8, 16, 24, 32, 64]))
        H, W = int(rng.integers(3, 20)), int(rng.integers(3, 20))
        k, s, d = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2])), int(rng.choice([1, 1, 2]))
        g = int(rng.choice([v for v in (1, 2, 4, 8, C) if C % v == 0]))
        M = int(rng.choice([C, 2 * C, 8, 16])) if g == 1 else C * int(rng.choice([1, 1, 2]))
        pads = [int(rng.integers(0, k)) for _ in range(4)] if k > 1 else [0, 0, 0, 0]
        oh = (H + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
        ow = (W + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
        if oh > 0 and ow > 0:
            break
    tail = str(rng.choice(["none", "Relu", "residual"]))
    inits = {"w0": rng.uniform(-0.5, 0.5, (C, C, 3, 3)), "b0": rng.uniform(-0.5, 0.5, C),
             "w1": rng.uniform(-0.5, 0.5, (M, C // g, k, k)), "b1": rng.uniform(-0.5, 0.5, M),
             "w2": rng.uniform(-0.5, 0.5, (8, M, 1, 1))}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1", "b1"], ["c"], pads=pads, kernel_shape=[k, k], strides=[s, s],
                              dilations=[d, d], group=g)]
    out = "c"
    if tail == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["cr"]))
        out = "cr"
    elif tail == "residual" and M == C and (oh, ow) == (H, W):
        nodes.append(helper.make_node("Add", ["c", "ar"], ["cs"]))
        out = "cs"
    nodes.append(helper.make_node("Conv", [out, "w2"], ["y"], kernel_shape=[1, 1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, rng.uniform(-1, 1, (1, C, H, W)).astype(np.float32), dict(C=C, H=H, W=W, k=k, s=s, d=d, g=g, M=M,
                                                                          pads=pads, tail=tail)


TINY_MODELS: dict[str, Callable[..., onnx.ModelProto]] = {"small_cnn": small_cnn, "mlp": mlp}


def build_tiny_onnx(name: str, path: str, **kwargs) -> str:
    onnx.save(TINY_MODELS[name](**kwargs), path)
    return path


def torch_encoder_block(d: int = 32, heads: int = 4, ff: int = 64, with_mask: bool = True, seed: int = 0):
    """A pre-norm transformer encoder block in PyTorch (hand-written attention, GELU MLP), eval mode.
    forward(x[, mask]) with an additive mask broadcast to (batch, heads, seq, seq)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc1, self.fc2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

        def attend(self, x, mask):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.reshape(b, s, heads, d // heads).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-2, -1) / (d // heads) ** 0.5
            att = torch.softmax(scores if mask is None else scores + mask, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class MaskedBlock(Block):
        def forward(self, x, mask):
            return self.attend(x, mask)

    class PlainBlock(Block):
        def forward(self, x):
            return self.attend(x, None)

    torch.manual_seed(seed)
    return (MaskedBlock() if with_mask else PlainBlock()).eval()
