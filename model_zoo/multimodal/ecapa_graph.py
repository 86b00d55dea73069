"""The ECAPA-TDNN speaker encoder (Qwen3-TTS's speaker_encoder.*: a reference voice's x-vector) built from a
checkpoint's tensors in the converter's IR.

Input mels [1, T, mel_dim] (log mel frames); channels first on [1, C, 1, T]. Every convolution pads "same" by
reflection (a Pad node, then the Conv); a TDNN block is conv + ReLU. blocks.0 a TDNN; blocks.1.. SE-Res2Net blocks
(tdnn1; Res2Net: the channels in `scale` parts, part 0 kept, part 1 through its TDNN, part i through its TDNN after
adding the previous output; tdnn2; squeeze-excitation: the time mean through conv1 + ReLU and conv2 + sigmoid scaling
the channels; plus the input); mfa a TDNN over the SE blocks' outputs side by side; attentive statistics pooling (the
input with its time mean and standard deviation as attention input, TDNN, tanh, conv, softmax over time, the weighted
mean and standard deviation side by side); fc a 1x1 conv. Output embedding [enc_dim]."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder
from ..language.text_model_view import PrefixView


class _Ecapa(GraphBuilder):
    def i64(self, hint: str, v) -> str:
        return self.const(hint, np.array(v, np.int64))

    def conv(self, x: str, prefix: str, hint: str, dilation: int = 1, relu: bool = False) -> str:
        """Conv1d with "same" reflection padding on [1, C, 1, T]."""
        w = self.weight(prefix + ".weight")
        out_c, _, k = w.shape
        pad = (k - 1) * dilation // 2
        if pad:
            x = self.node("Pad", [x, self.i64(f"{hint}_pads", [0, 0, 0, pad, 0, 0, 0, pad])], {"mode": 1},   # reflect
                          hint=f"{hint}_padded")
        y = self.node("Conv", [x, self.const(f"{hint}_w", w[:, :, None, :]),
                               self.const(f"{hint}_b", self.weight(prefix + ".bias", (out_c,)))],
                      {"kernel_shape": [1, k], "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, dilation],
                       "group": 1}, hint=hint)
        return self.node("Relu", [y], hint=f"{hint}_relu") if relu else y

    def time_mean(self, x: str, hint: str) -> str:
        return self.node("ReduceMean", [x, self.i64(f"{hint}_axis", [3])], {"keepdims": 1}, hint=hint)

    def stats(self, x: str, weights: str | None, hint: str) -> tuple[str, str]:
        """(mean, std) over time of [1, C, 1, T], uniform or by `weights` (same shape, summing to 1 over time); std
        clamped below at 1e-12 before the root, as the reference."""
        if weights is None:
            mean = self.time_mean(x, f"{hint}_mean")
            var = self.time_mean(self.node("Mul", [d := self.node("Sub", [x, mean], hint=f"{hint}_dev"), d],
                                           hint=f"{hint}_sq"), f"{hint}_var")
        else:
            mean = self.node("ReduceSum", [self.node("Mul", [x, weights], hint=f"{hint}_wx"), self.i64(
                f"{hint}_axis", [3])], {"keepdims": 1}, hint=f"{hint}_mean")
            d = self.node("Sub", [x, mean], hint=f"{hint}_dev")
            var = self.node("ReduceSum", [self.node("Mul", [self.node("Mul", [d, d], hint=f"{hint}_sq"), weights],
                                                    hint=f"{hint}_wsq"), self.i64(f"{hint}_vaxis", [3])],
                            {"keepdims": 1}, hint=f"{hint}_var")
        var = self.node("Max", [var, self.const(f"{hint}_eps", np.array(1e-12, np.float32))], hint=f"{hint}_clamped")
        return mean, self.node("Sqrt", [var], hint=f"{hint}_std")


def build_ecapa_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                      group_size: int = 32) -> Graph:
    """`config`: Qwen3-TTS's config.json (speaker_encoder_config inside)."""
    cfg = dict(config.get("speaker_encoder_config") or {})
    if "speaker_encoder.fc.weight" not in weights:
        raise ConverterError("not a checkpoint with an ECAPA-TDNN speaker encoder: no speaker_encoder.fc.weight")
    channels = list(cfg.get("enc_channels", [512, 512, 512, 512, 1536]))
    dilations = list(cfg.get("enc_dilations", [1, 2, 3, 4, 1]))
    scale, mel = int(cfg.get("enc_res2net_scale", 8)), int(cfg.get("mel_dim", 128))
    b = _Ecapa("ecapa_speaker_encoder", PrefixView(weights, "speaker_encoder."), weight_format, group_size)
    x = b.input("mels", [1, -1, mel], F32)
    x = b.node("Unsqueeze", [b.node("Transpose", [x], {"perm": [0, 2, 1]}, hint="channels_first"),
                             b.i64("height", [2])], hint="columns")                                    # [1, mel, 1, T]
    x = b.conv(x, "blocks.0.conv", "block0", dilations[0], relu=True)
    outputs = []
    for i in range(1, len(channels) - 1):
        p = f"blocks.{i}."
        h = b.conv(x, p + "tdnn1.conv", f"b{i}_tdnn1", relu=True)
        part = channels[i] // scale
        parts = [b.node("Slice", [h, b.i64(f"b{i}_s{j}_from", [j * part]), b.i64(f"b{i}_s{j}_to", [(j + 1) * part]),
                                  b.i64(f"b{i}_s{j}_axis", [1])], hint=f"b{i}_part{j}") for j in range(scale)]
        outs = [parts[0]]
        for j in range(1, scale):
            src = parts[j] if j == 1 else b.node("Add", [parts[j], outs[-1]], hint=f"b{i}_sum{j}")
            outs.append(b.conv(src, f"{p}res2net_block.blocks.{j - 1}.conv", f"b{i}_res{j}", dilations[i], relu=True))
        h = b.conv(b.node("Concat", outs, {"axis": 1}, hint=f"b{i}_res2net"), p + "tdnn2.conv", f"b{i}_tdnn2",
                   relu=True)
        s = b.conv(b.time_mean(h, f"b{i}_se_mean"), p + "se_block.conv1", f"b{i}_se1", relu=True)
        s = b.node("Sigmoid", [b.conv(s, p + "se_block.conv2", f"b{i}_se2")], hint=f"b{i}_se_gate")
        x = b.node("Add", [b.node("Mul", [h, s], hint=f"b{i}_se"), x], hint=f"b{i}_out")
        outputs.append(x)
    x = b.conv(b.node("Concat", outputs, {"axis": 1}, hint="mfa_in"), "mfa.conv", "mfa", dilations[-1], relu=True)
    # attentive statistics pooling
    mean, std = b.stats(x, None, "global")
    length = b.node("Shape", [x], hint="x_shape", dtype=np.dtype(np.int64))
    att = b.node("Concat", [x, b.node("Expand", [mean, length], hint="mean_t"),
                            b.node("Expand", [std, length], hint="std_t")], {"axis": 1}, hint="asp_in")
    att = b.node("Tanh", [b.conv(att, "asp.tdnn.conv", "asp_tdnn", relu=True)], hint="asp_tanh")
    att = b.node("Softmax", [b.conv(att, "asp.conv", "asp_conv")], {"axis": 3}, hint="asp_weights")
    mean, std = b.stats(x, att, "pooled")
    y = b.conv(b.node("Concat", [mean, std], {"axis": 1}, hint="pooled_stats"), "fc", "fc")
    b.g.outputs.append(b.rename(b.node("Reshape", [y, b.i64("embedding_flat", [-1])], hint="embedding_rows"),
                                "embedding"))
    b.g.metadata.update({"producer": "model_zoo.multimodal.ecapa_graph", "architecture": "ECAPA-TDNN speaker encoder",
                         "head": "speaker_encoder", "weight_format": weight_format})
    return b.g
