"""Wan 2.2 Animate (diffusers `WanAnimateTransformer3DModel`) in the converter's IR: two graphs from one checkpoint.

Head "face_encoder": the face video's motion features, once per segment (diffusers recomputes them at every step;
they depend on the face frames alone). Input `face_pixel_values` [batch, 3, frames, size, size] in [-1, 1]; output
`motion_vec` [batch, 1 + frames', heads + 1, dim]: each frame through the motion encoder (StyleGAN-like convolutions
with their equalised-learning-rate scales folded into the weights, FIR blur before the strided ones padded as
diffusers pads them, leaky ReLU x sqrt 2, residual halves over sqrt 2; a 4 x 4 convolution to the style vector, the
motion MLP, then the motion directions: the features times the Q of the QR decomposition of motion_synthesis_weight,
computed at conversion), then the face encoder over time (causal convolutions with edge padding, the second and
third of stride 2, LayerNorms without affine, SiLU, a projection per head), the learned padding token appended per
frame and a zero frame prepended.

Head None ("dit"): the Wan 2.1 I2V DiT of model_zoo/generation/wan_graph.py with Animate's additions: the pose
latents' patch embedding added to every frame but the first (the reference image's), and after every
inject_face_latents_blocks-th block a face adapter: each latent frame's tokens attend (LayerNorm, per-head RMSNorm of
q / k) to that frame's motion tokens, the result added to the stream. Inputs beyond the I2V DiT's:
`pose_hidden_states` [batch, latent_channels, frames - 1, height, width] and `motion_vec` (the face encoder's
output, one row per latent frame)."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder

BLUR = (1, 3, 3, 1)   # MotionEncoderResBlock's FIR kernel (not in the config)
_EDGE = 2   # PadMode EDGE: replicate


def default_channels(size: int) -> dict:
    """diffusers' WAN_ANIMATE_MOTION_ENCODER_CHANNEL_SIZES (StyleGAN's), keyed by resolution."""
    table = {4: 512, 8: 512, 16: 512, 32: 512, 64: 256, 128: 128, 256: 64, 512: 32, 1024: 16}
    return {str(k): v for k, v in table.items() if k <= size}


class _FaceBuilder(GraphBuilder):
    def __init__(self, weights):
        super().__init__("wan_animate_face_encoder", weights)

    def i64(self, hint, values):
        return self.const(hint, np.array(values, np.int64))

    def leaky(self, x: str, hint: str) -> str:   # FusedLeakyReLU after its bias: leaky_relu(0.2) * sqrt(2)
        y = self.node("LeakyRelu", [x], {"alpha": 0.2}, hint=f"{hint}_leaky")
        return self.node("Mul", [y, self.const(f"{hint}_gain", np.array(math.sqrt(2), F32))], hint=hint)

    def motion_conv(self, x: str, prefix: str, c_in: int, c_out: int, k: int, hint: str, stride: int = 1,
                    padding: int = 0, blur: bool = False, activation: bool = True, bias: bool = True) -> str:
        """MotionConv2d: optional depthwise FIR blur (F.conv2d padding (ph, pw) on both sides of each axis), the
        scaled convolution, then the activation's bias and leaky ReLU (or the convolution's own bias)."""
        if blur:
            p = (len(BLUR) - stride) + (k - 1)
            ph, pw = (p + 1) // 2, p // 2
            kernel = np.outer(BLUR, BLUR).astype(F32)
            kernel = (kernel / kernel.sum()).astype(F32)
            x = self.node("Conv", [x, self.const(f"{hint}_fir", np.broadcast_to(kernel, (c_in, 1, *kernel.shape)).copy())],
                          {"kernel_shape": list(kernel.shape), "strides": [1, 1], "pads": [ph, pw, ph, pw],
                           "dilations": [1, 1], "group": c_in}, hint=f"{hint}_blur")
        scale = np.float32(1 / math.sqrt(c_in * k * k))
        w = (self.weight(prefix + ".weight", (c_out, c_in, k, k)) * scale).astype(F32)
        inputs = [x, self.const(f"{hint}_w", w)]
        if activation:
            inputs.append(self.const(f"{hint}_b", self.weight(prefix + ".act_fn.bias", (c_out,))))
        elif bias and prefix + ".bias" in self.w:
            inputs.append(self.const(f"{hint}_b", self.weight(prefix + ".bias", (c_out,))))
        y = self.node("Conv", inputs, {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [padding] * 4,
                                       "dilations": [1, 1], "group": 1}, hint=hint)
        return self.leaky(y, f"{hint}_act") if activation else y

    def causal_conv1d(self, x: str, prefix: str, c_in: int, c_out: int, k: int, stride: int, hint: str) -> str:
        """nn.Conv1d over time after F.pad((k - 1, 0), replicate), as a [B, C, 1, T] 2-D convolution."""
        x = self.node("Pad", [x, self.i64(f"{hint}_pads", [0, 0, 0, k - 1, 0, 0, 0, 0])], {"mode": _EDGE},
                      hint=f"{hint}_pad")
        w = self.weight(prefix + ".weight", (c_out, c_in, k))[:, :, None, :]
        return self.node("Conv", [x, self.const(f"{hint}_w", np.ascontiguousarray(w)),
                                  self.const(f"{hint}_b", self.weight(prefix + ".bias", (c_out,)))],
                         {"kernel_shape": [1, k], "strides": [1, stride], "pads": [0, 0, 0, 0], "dilations": [1, 1],
                          "group": 1}, hint=hint)

    def norm_silu(self, x: str, c: int, eps: float, hint: str) -> str:
        """[B, C, 1, T] -> LayerNorm over C (no affine) -> SiLU, back to [B, C, 1, T]."""
        rows = self.node("Transpose", [x], {"perm": [0, 2, 3, 1]}, hint=f"{hint}_rows")
        n = self.node("LayerNormalization", [rows, self.const(f"{hint}_one", np.ones(c, F32)),
                                             self.const(f"{hint}_zero", np.zeros(c, F32))],
                      {"axis": -1, "epsilon": eps}, hint=f"{hint}_ln")
        a = self.node("Mul", [n, self.node("Sigmoid", [n], hint=f"{hint}_sig")], hint=f"{hint}_silu")
        return self.node("Transpose", [a], {"perm": [0, 3, 1, 2]}, hint=hint)


def build_face_encoder_graph(config: Mapping, weights, latent_shape: Sequence[int] | None = None) -> Graph:
    """`latent_shape`: the DiT's (frames, height, width); the face video has 4 (frames - 2) + 1 frames (the segment
    the latent frames after the reference one decode to)."""
    if latent_shape is None:
        raise ConverterError("the face encoder is built for one segment: pass the DiT's latent_shape (frames, h, w)")
    size = int(config.get("motion_encoder_size", 512))
    style, motion_dim = int(config.get("motion_style_dim", 512)), int(config.get("motion_dim", 20))
    out_dim = int(config.get("motion_encoder_dim", 512))
    channels = config.get("motion_encoder_channel_sizes") or default_channels(size)
    hidden, heads = int(config.get("face_encoder_hidden_dim", 1024)), int(config.get("face_encoder_num_heads", 4))
    D = int(config["num_attention_heads"]) * int(config["attention_head_dim"])
    eps = float(config.get("eps", 1e-6))
    frames = 4 * (int(latent_shape[0]) - 2) + 1
    if frames < 1:
        raise ConverterError(f"latent_shape {list(latent_shape)}: Animate's latents hold the reference frame and at "
                             "least one more")
    log_size = int(math.log(size, 2))
    if 2 ** log_size != size or size < 8:
        raise ConverterError(f"motion_encoder_size {size} must be a power of two >= 8")
    b = _FaceBuilder(weights)
    x_in = b.input("face_pixel_values", [-1, 3, frames, size, size], F32)
    x = b.node("Transpose", [x_in], {"perm": [0, 2, 1, 3, 4]}, hint="frames_first")
    x = b.node("Reshape", [x, b.i64("face_images", [-1, 3, size, size])], hint="face_images")
    me = "motion_encoder."
    c = int(channels[str(size)])
    x = b.motion_conv(x, me + "conv_in", 3, c, 1, "conv_in")
    for j, i in enumerate(range(log_size, 2, -1)):
        c_out, p = int(channels[str(2 ** (i - 1))]), f"{me}res_blocks.{j}."
        h = b.motion_conv(x, p + "conv1", c, c, 3, f"rb{j}_c1", padding=1)
        h = b.motion_conv(h, p + "conv2", c, c_out, 3, f"rb{j}_c2", stride=2, blur=True)
        skip = b.motion_conv(x, p + "conv_skip", c, c_out, 1, f"rb{j}_skip", stride=2, blur=True, activation=False,
                             bias=False)
        x = b.node("Mul", [b.node("Add", [h, skip], hint=f"rb{j}_sum"),
                           b.const(f"rb{j}_half", np.array(1 / math.sqrt(2), F32))], hint=f"rb{j}_out")
        c = c_out
    x = b.motion_conv(x, me + "conv_out", c, style, 4, "conv_out", activation=False, bias=False)   # [N, style, 1, 1]
    x = b.node("Reshape", [x, b.i64("style_rows", [-1, style])], hint="style")
    j = 0
    while f"{me}motion_network.{j}.weight" in b.w:   # MotionLinear layers, no activation between them
        p = f"{me}motion_network.{j}."
        n_out, n_in = b.w_shape(p + "weight")
        w = (b.weight(p + "weight", (n_out, n_in)) * np.float32(1 / math.sqrt(n_in))).astype(F32)
        x = b.node("MatMul", [x, b.const(f"motion{j}_w", np.ascontiguousarray(w.T))], hint=f"motion{j}")
        if p + "bias" in b.w:
            x = b.node("Add", [x, b.const(f"motion{j}_b", b.weight(p + "bias", (n_out,)))], hint=f"motion{j}_b")
        j += 1
    # Linear Motion Decomposition: sum_k feat_k Q[:, k], Q from the QR of the synthesis weight (LAPACK's Householder
    # QR, as torch.linalg.qr computes it: the same signs)
    weight = b.weight(me + "motion_synthesis_weight", (out_dim, motion_dim)).astype(F32) + np.float32(1e-8)
    q = np.linalg.qr(weight)[0].astype(F32)
    x = b.node("MatMul", [x, b.const("motion_q", np.ascontiguousarray(q.T))], hint="motion_dirs")   # [B S, out_dim]
    # the face encoder over time: [B, S, out] -> [B, out, 1, S]
    x = b.node("Reshape", [x, b.i64("per_video", [-1, frames, out_dim])], hint="per_video")
    x = b.node("Unsqueeze", [b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="channels_first"),
                             b.i64("h_axis", [2])], hint="time_rows")
    fe = "face_encoder."
    x = b.causal_conv1d(x, fe + "conv1_local", out_dim, hidden * heads, 3, 1, "conv1")
    x = b.node("Reshape", [x, b.i64("by_head", [-1, hidden, 1, frames])], hint="by_head")   # [B heads, C, 1, S]
    x = b.norm_silu(x, hidden, eps, "n1")
    x = b.norm_silu(b.causal_conv1d(x, fe + "conv2", hidden, hidden, 3, 2, "conv2"), hidden, eps, "n2")
    x = b.norm_silu(b.causal_conv1d(x, fe + "conv3", hidden, hidden, 3, 2, "conv3"), hidden, eps, "n3")
    t_out = ((frames - 1) // 2) // 2 + 1
    x = b.node("Transpose", [b.node("Squeeze", [x, b.i64("h_axis2", [2])], hint="n3_flat")], {"perm": [0, 2, 1]},
               hint="time_major")   # [B heads, T', C]
    w, bias = b.weight(fe + "out_proj.weight", (D, hidden)), b.weight(fe + "out_proj.bias", (D,))
    x = b.node("Add", [b.node("MatMul", [x, b.const("out_proj_w", np.ascontiguousarray(w.T))], hint="out_proj"),
                       b.const("out_proj_b", bias)], hint="out_proj_b")
    x = b.node("Transpose", [b.node("Reshape", [x, b.i64("heads_split", [-1, heads, t_out, D])], hint="heads_split")],
               {"perm": [0, 2, 1, 3]}, hint="frame_heads")   # [B, T', heads, D]
    # the learned padding token as one more "head" of every frame, then a zero frame in front
    pad_tok = b.node("Expand", [b.const("pad_token", b.weight(fe + "padding_tokens", (1, 1, 1, D))),
                                b.node("Concat", [b.node("Slice", [b.node("Shape", [x], hint="x_shape", dtype=np.int64),
                                                                   b.i64("s0", [0]), b.i64("s2", [2]),
                                                                   b.i64("s_ax", [0])], hint="bt", dtype=np.int64),
                                                  b.i64("one_d", [1, D])], {"axis": 0}, hint="pad_shape",
                                       dtype=np.int64)], hint="pad_tokens")
    x = b.node("Concat", [x, pad_tok], {"axis": 2}, hint="with_pad")
    x = b.node("Pad", [x, b.i64("zero_frame", [0, 1, 0, 0, 0, 0, 0, 0])], {"mode": 0}, hint="zero_frame")
    b.g.outputs.append(b.rename(x, "motion_vec"))
    b.g.metadata.update({"producer": "model_zoo.generation.wan_animate_graph", "architecture":
                         "WanAnimateTransformer3DModel face encoder", "face_frames": str(frames),
                         "motion_frames": str(t_out + 1)})
    return b.g


def build_wan_animate_graph(config: Mapping, weights, weight_format: str = "float32", group_size: int = 32,
                            latent_shape: Sequence[int] | None = None, head: str | None = None, **_) -> Graph:
    """The registry's WanAnimateTransformer3DModel builder: head "face_encoder" the motion features, else the DiT."""
    if head == "face_encoder":
        return build_face_encoder_graph(config, weights, latent_shape)
    if head not in (None, "dit"):
        raise ValueError(f"WanAnimateTransformer3DModel head {head!r} (built: dit, face_encoder)")
    from .wan_graph import build_wan_dit_graph
    return build_wan_dit_graph(config, weights, weight_format, group_size, latent_shape)


def face_adapter(b, x: str, motion: str, j: int, grid: Sequence[int], face_heads: int) -> str:
    """Face adapter `j` (WanAnimateFaceBlockCrossAttention) on the token stream x [B, tokens, D]: each latent frame's
    tokens attend to that frame's motion tokens (motion [B, frames, face_heads, D]); the result is added to x."""
    p, D, H, hd = f"face_adapter.{j}.", b.D, b.heads, b.head_dim
    per_frame = int(grid[1]) * int(grid[2])

    def i64(hint, v):
        return b.const(hint, np.array(v, np.int64))

    def head_norm(t, name, rows, hint):   # RMSNorm over each head's dim, then [rows, D]
        t = b.node("Reshape", [t, i64(f"{hint}_heads", [-1, H, hd])], hint=f"{hint}_heads")
        t = b.node("RMSNormalization", [t, b.const(f"{hint}_w", b.weight(p + name + ".weight", (hd,)))],
                   {"axis": -1, "epsilon": b.eps}, hint=f"{hint}_n")
        return b.node("Reshape", [t, i64(f"{hint}_rows", [-1, rows, D])], hint=hint)

    hq = b.layer_norm(x, f"fa{j}_pre_q")
    hk = b.layer_norm(motion, f"fa{j}_pre_kv")
    q = head_norm(b.linear(hq, p + "to_q", f"fa{j}_q", D, D), "norm_q", per_frame, f"fa{j}_qf")   # [B F, hw, D]
    k = head_norm(b.linear(hk, p + "to_k", f"fa{j}_k", D, D), "norm_k", face_heads, f"fa{j}_kf")   # [B F, N, D]
    v = b.node("Reshape", [b.linear(hk, p + "to_v", f"fa{j}_v", D, D), i64(f"fa{j}_vf", [-1, face_heads, D])],
               hint=f"fa{j}_vf")
    a = b.node("Reshape", [b.attention(q, k, v, f"fa{j}_attn"), i64(f"fa{j}_tokens", [-1, grid[0] * per_frame, D])],
               hint=f"fa{j}_tokens")
    return b.linear(a, p + "to_out", f"fa{j}_out", D, D, residual=x)
