"""An ultralytics YOLOv8 / YOLOv10 detector as one graph in the converter's IR, built from the checkpoint's tensors
and its model yaml (model_zoo.detection.yolo_layers), already fused: every Conv + BatchNorm folded into one Conv
with its bias and SiLU in the Conv's epilogue; C2f's chunk as one Slice (the Concat takes the split tensor whole);
SPPF's three 5x5 max pools; nearest 2x upsampling; PSA's attention as two batched MatMuls (its key and value head
sizes differ); the head's box and class branches, the DFL expectation and the anchor decoding in the graph, so the
output is what ultralytics' ONNX export gives before any post-processing:

- YOLOv8 (Detect): "output0" [batch, 4 + classes, anchors]: centre-x, centre-y, width, height in input pixels,
  then the class probabilities (confidence filter and NMS follow: lite.detection).
- YOLOv10 (v10Detect, a head with one-to-one branches): "output0" [batch, anchors, 4 + classes] from those
  branches: x1, y1, x2, y2, then the probabilities (a top-k follows, no NMS). The graph's metadata "end2end" says
  which form it has.

The input "images" is [batch, 3, height, width] float32 RGB in [0, 1] at the size given when building (multiples of
the largest stride): the anchors are constants of that size."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from ..graph_builder import F32, GraphBuilder
from .yolo_layers import HEADS, LayerRow, layer_rows

DEFAULT_BN_EPS = 1e-3   # ultralytics' initialize_weights sets every BatchNorm2d's eps to 1e-3


class _Value:
    def __init__(self, name: str, channels: int, h: int, w: int):
        self.name, self.channels, self.h, self.w = name, channels, h, w


class YoloGraph:
    def __init__(self, config: Mapping, weights: Mapping[str, np.ndarray], height: int, width: int):
        self.b = GraphBuilder("yolo", weights)
        self.eps: Mapping[str, float] = config.get("bn_eps") or {}
        self.height, self.width = height, width

    # -- building blocks -------------------------------------------------------------------------------------
    def folded(self, prefix: str, c2: int, c1_per_group: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(weight, bias) of an ultralytics Conv (Conv2d without bias, then BatchNorm) with the BatchNorm folded in;
        a fused checkpoint's Conv (bias, no BatchNorm) as it is."""
        b = self.b
        w = b.weight(prefix + ".conv.weight", (c2, c1_per_group, k, k)).astype(np.float64)
        bias = (b.weight(prefix + ".conv.bias", (c2,)).astype(np.float64) if prefix + ".conv.bias" in b.w
                else np.zeros(c2))
        if prefix + ".bn.weight" in b.w:
            gamma, beta = b.weight(prefix + ".bn.weight", (c2,)), b.weight(prefix + ".bn.bias", (c2,))
            mean, var = b.weight(prefix + ".bn.running_mean", (c2,)), b.weight(prefix + ".bn.running_var", (c2,))
            eps = self.eps.get(prefix + ".bn", DEFAULT_BN_EPS)
            scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
            w, bias = w * scale[:, None, None, None], (bias - mean) * scale + beta
        return w, bias

    def conv_node(self, x: _Value, w: np.ndarray, bias: np.ndarray, s: int, g: int, pad: int, act: bool,
                  hint: str) -> _Value:
        b, c2, k = self.b, w.shape[0], w.shape[2]
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [pad] * 4, "dilations": [1, 1], "group": g}
        if act:
            attrs["activation"] = "silu"
        out = b.node("Conv", [x.name, b.const(f"{hint}_w", w.astype(np.float32)),
                              b.const(f"{hint}_b", bias.astype(np.float32))], attrs, hint=hint)
        return _Value(out, c2, (x.h + 2 * pad - k) // s + 1, (x.w + 2 * pad - k) // s + 1)

    def conv(self, x: _Value, prefix: str, c2: int, k: int, s: int = 1, g: int = 1, act: bool = True) -> _Value:
        """ultralytics Conv (Conv2d, BatchNorm, SiLU) as one Conv with its bias and activation."""
        if x.channels % g:
            raise ConverterError(f"{prefix}: {x.channels} input channels do not split into {g} groups")
        w, bias = self.folded(prefix, c2, x.channels // g, k)
        return self.conv_node(x, w, bias, s, g, k // 2, act, prefix.replace(".", "_"))

    def plain_conv(self, x: _Value, prefix: str, c2: int, hint: str) -> _Value:
        """nn.Conv2d 1x1 with bias (the heads' last layer)."""
        b = self.b
        w = b.const(f"{hint}_w", b.weight(prefix + ".weight", (c2, x.channels, 1, 1)))
        out = b.node("Conv", [x.name, w, b.const(f"{hint}_b", b.weight(prefix + ".bias", (c2,)))],
                     {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0] * 4, "dilations": [1, 1], "group": 1},
                     hint=hint)
        return _Value(out, c2, x.h, x.w)

    def add(self, a: _Value, c: _Value, hint: str) -> _Value:
        return _Value(self.b.node("Add", [a.name, c.name], hint=hint), a.channels, a.h, a.w)

    def concat(self, parts: list[_Value], hint: str) -> _Value:
        if len({(p.h, p.w) for p in parts}) != 1:
            raise ConverterError(f"{hint}: concatenated maps differ in size {[(p.h, p.w) for p in parts]} (an image "
                                 f"size that is not a multiple of the largest stride?)")
        out = self.b.node("Concat", [p.name for p in parts], {"axis": 1}, hint=hint)
        return _Value(out, sum(p.channels for p in parts), parts[0].h, parts[0].w)

    def cut(self, x: str, start: int, stop: int, axis: int, hint: str) -> str:
        """x[start:stop] along `axis` (one Slice)."""
        b = self.b
        return b.node("Slice", [x, b.const(f"{hint}_s", np.array([start], np.int64)),
                                b.const(f"{hint}_e", np.array([stop], np.int64)),
                                b.const(f"{hint}_a", np.array([axis], np.int64))], hint=hint)

    def channels(self, x: _Value, start: int, stop: int, hint: str) -> _Value:
        return _Value(self.cut(x.name, start, stop, 1, hint), stop - start, x.h, x.w)

    # -- ultralytics modules ---------------------------------------------------------------------------------
    def c2f(self, x: _Value, p: str, c2: int, n: int, shortcut: bool, cib: bool = False, lk: bool = False,
            e: float = 0.5) -> _Value:
        c = int(c2 * e)
        y = self.conv(x, p + ".cv1", 2 * c, 1)
        parts, last = [y], self.channels(y, c, 2 * c, f"{p}_half".replace(".", "_"))
        for j in range(n):
            last = (self.cib(last, f"{p}.m.{j}", c, shortcut, lk) if cib
                    else self.bottleneck(last, f"{p}.m.{j}", c, shortcut))
            parts.append(last)
        return self.conv(self.concat(parts, f"{p}_cat".replace(".", "_")), p + ".cv2", c2, 1)

    def bottleneck(self, x: _Value, p: str, c2: int, shortcut: bool) -> _Value:
        y = self.conv(self.conv(x, p + ".cv1", c2, 3), p + ".cv2", c2, 3)
        return self.add(x, y, f"{p}_res".replace(".", "_")) if shortcut and x.channels == c2 else y

    def cib(self, x: _Value, p: str, c2: int, shortcut: bool, lk: bool) -> _Value:
        c1, c_ = x.channels, c2   # e = 1.0 inside C2fCIB
        y = self.conv(x, p + ".cv1.0", c1, 3, g=c1)
        y = self.conv(y, p + ".cv1.1", 2 * c_, 1)
        y = self.rep_vgg_dw(y, p + ".cv1.2") if lk else self.conv(y, p + ".cv1.2", 2 * c_, 3, g=2 * c_)
        y = self.conv(y, p + ".cv1.3", c2, 1)
        y = self.conv(y, p + ".cv1.4", c2, 3, g=c2)
        return self.add(x, y, f"{p}_res".replace(".", "_")) if shortcut and c1 == c2 else y

    def rep_vgg_dw(self, x: _Value, p: str) -> _Value:
        """SiLU(dw7x7(x) + dw3x3(x)): both linear, so one 7x7 depthwise Conv with the 3x3's taps added to its centre
        and the biases summed."""
        c = x.channels
        w, bias = self.folded(p + ".conv", c, 1, 7)
        w3, bias3 = self.folded(p + ".conv1", c, 1, 3)
        w[:, :, 2:5, 2:5] += w3
        return self.conv_node(x, w, bias + bias3, 1, c, 3, True, p.replace(".", "_"))

    def sppf(self, x: _Value, p: str, c2: int, k: int = 5) -> _Value:
        y = self.conv(x, p + ".cv1", x.channels // 2, 1)
        parts = [y]
        for i in range(3):
            parts.append(_Value(self.b.node("MaxPool", [parts[-1].name], {
                "kernel_shape": [k, k], "strides": [1, 1], "pads": [k // 2] * 4, "dilations": [1, 1],
                "ceil_mode": False}, hint=f"{p}_pool{i}".replace(".", "_")), y.channels, y.h, y.w))
        return self.conv(self.concat(parts, f"{p}_cat".replace(".", "_")), p + ".cv2", c2, 1)

    def scdown(self, x: _Value, p: str, c2: int, k: int, s: int) -> _Value:
        return self.conv(self.conv(x, p + ".cv1", c2, 1), p + ".cv2", c2, k, s, g=c2, act=False)

    def upsample(self, x: _Value, hint: str, scale: int = 2) -> _Value:
        b = self.b
        out = b.node("Resize", [x.name, "", b.const(f"{hint}_scales", np.array([1, 1, scale, scale], F32))],
                     {"mode": 0, "coordinate_transform": 4, "nearest_mode": 2}, hint=hint)   # torch's nearest
        return _Value(out, x.channels, x.h * scale, x.w * scale)

    def psa(self, x: _Value, p: str, e: float = 0.5) -> _Value:
        b, c = self.b, int(x.channels * e)
        heads = c // 64
        if heads < 1:
            raise ConverterError(f"{p}: PSA over {c} channels has no attention head (ultralytics gives one per 64)")
        y = self.conv(x, p + ".cv1", 2 * c, 1)
        a_half, v_in = self.channels(y, 0, c, f"{p}_a".replace(".", "_")), self.channels(y, c, 2 * c,
                                                                                        f"{p}_b".replace(".", "_"))
        v_in = self.add(v_in, self.attention(v_in, p + ".attn", heads), f"{p}_attn_res".replace(".", "_"))
        f = self.conv(self.conv(v_in, p + ".ffn.0", 2 * c, 1), p + ".ffn.1", c, 1, act=False)
        v_in = self.add(v_in, f, f"{p}_ffn_res".replace(".", "_"))
        return self.conv(self.concat([a_half, v_in], f"{p}_cat".replace(".", "_")), p + ".cv2", x.channels, 1)

    def attention(self, x: _Value, p: str, heads: int, attn_ratio: float = 0.5) -> _Value:
        b, hint = self.b, p.replace(".", "_")
        dim, n = x.channels, x.h * x.w
        head_dim = dim // heads
        key_dim = int(head_dim * attn_ratio)
        qkv = self.conv(x, p + ".qkv", dim + 2 * key_dim * heads, 1, act=False)
        rows = b.node("Reshape", [qkv.name, b.const(f"{hint}_rows", np.array([0, heads, 2 * key_dim + head_dim, n],
                                                                              np.int64))], hint=hint + "_heads")

        q = self.cut(rows, 0, key_dim, 2, hint + "_q")
        k = self.cut(rows, key_dim, 2 * key_dim, 2, hint + "_k")
        v = self.cut(rows, 2 * key_dim, 2 * key_dim + head_dim, 2, hint + "_v")
        qt = b.node("Transpose", [q], {"perm": [0, 1, 3, 2]}, hint=hint + "_qt")               # [B, h, N, kd]
        scores = b.node("MatMul", [qt, k], hint=hint + "_scores")                               # [B, h, N, N]
        scores = b.node("Mul", [scores, b.const(f"{hint}_scale", np.array(key_dim ** -0.5, F32))],
                        hint=hint + "_scaled")
        probs = b.node("Softmax", [scores], {"axis": -1, "coerce_2d": False}, hint=hint + "_probs")
        pt = b.node("Transpose", [probs], {"perm": [0, 1, 3, 2]}, hint=hint + "_pt")
        mixed = b.node("MatMul", [v, pt], hint=hint + "_mixed")                                  # [B, h, hd, N]
        shape = b.const(f"{hint}_map", np.array([0, dim, x.h, x.w], np.int64))
        mixed = _Value(b.node("Reshape", [mixed, shape], hint=hint + "_map"), dim, x.h, x.w)
        v_map = _Value(b.node("Reshape", [v, shape], hint=hint + "_v_map"), dim, x.h, x.w)
        pe = self.conv(v_map, p + ".pe", dim, 3, g=dim, act=False)
        return self.conv(self.add(mixed, pe, hint + "_pe_res"), p + ".proj", dim, 1, act=False)

    def detect(self, feats: list[_Value], p: str, nc: int) -> tuple[str, bool]:
        """The head's decoded output and whether it is end-to-end (one-to-one branches, corners, no NMS). The
        branches' form is read from the weights: reg_max from the box branch's width (no DFL when 1), the class
        branch depthwise-separable (v10Detect, and Detect since YOLO11) or plain 3x3 Convs (YOLOv8's legacy
        head)."""
        b = self.b
        end2end = f"{p}.one2one_cv2.0.0.conv.weight" in b.w
        box_prefix, cls_prefix = (f"{p}.one2one_cv2", f"{p}.one2one_cv3") if end2end else (f"{p}.cv2", f"{p}.cv3")
        reg_max = b.w_shape(f"{box_prefix}.0.2.weight")[0] // 4
        separable = f"{cls_prefix}.0.0.0.conv.weight" in b.w
        c2, c3 = max(16, feats[0].channels // 4, reg_max * 4), max(feats[0].channels, min(nc, 100))
        boxes, classes, anchors, strides = [], [], [], []
        for i, f in enumerate(feats):
            if self.height % f.h or self.width % f.w or self.height // f.h != self.width // f.w:
                raise ConverterError(f"level {i}: a {f.h}x{f.w} map of a {self.height}x{self.width} image has no "
                                     "integer stride (use a multiple of the largest stride)")
            stride = self.height // f.h
            bp, cp = f"{box_prefix}.{i}", f"{cls_prefix}.{i}"
            box = self.conv(self.conv(f, bp + ".0", c2, 3), bp + ".1", c2, 3)
            box = self.plain_conv(box, bp + ".2", 4 * reg_max, f"{bp}_out".replace(".", "_"))
            if separable:
                cls = self.conv(self.conv(f, cp + ".0.0", f.channels, 3, g=f.channels), cp + ".0.1", c3, 1)
                cls = self.conv(self.conv(cls, cp + ".1.0", c3, 3, g=c3), cp + ".1.1", c3, 1)
            else:
                cls = self.conv(self.conv(f, cp + ".0", c3, 3), cp + ".1", c3, 3)
            cls = self.plain_conv(cls, cp + ".2", nc, f"{cp}_out".replace(".", "_"))
            flat = lambda v, c, tag: b.node("Reshape", [v.name, b.const(f"{tag}_shape", np.array([0, c, -1], np.int64))],
                                            hint=tag)
            boxes.append(flat(box, 4 * reg_max, f"box{i}_rows"))
            classes.append(flat(cls, nc, f"cls{i}_rows"))
            sy, sx = np.meshgrid(np.arange(f.h, dtype=np.float32) + 0.5, np.arange(f.w, dtype=np.float32) + 0.5,
                                 indexing="ij")
            anchors.append(np.stack([sx.ravel(), sy.ravel()]))
            strides.append(np.full(f.h * f.w, stride, np.float32))
        box = b.node("Concat", boxes, {"axis": 2}, hint="box_rows")                             # [B, 4 x 16, A]
        cls = b.node("Concat", classes, {"axis": 2}, hint="cls_rows")                           # [B, nc, A]
        dist = box                                                                              # [B, 4, A]
        if reg_max > 1:   # DFL: the expectation over each side's distance bins
            bins = b.node("Reshape", [box, b.const("bins_shape", np.array([0, 4, reg_max, -1], np.int64))],
                          hint="bins")
            probs = b.node("Softmax", [bins], {"axis": 2, "coerce_2d": False}, hint="bin_probs")
            weights = b.weight(p + ".dfl.conv.weight", (1, reg_max, 1, 1)).reshape(1, 1, reg_max, 1)
            dist = b.node("ReduceSum", [b.node("Mul", [probs, b.const("dfl_bins", weights)], hint="weighted_bins"),
                                        b.const("bin_axis", np.array([2], np.int64))],
                          {"keepdims": False, "noop_with_empty_axes": False}, hint="distances")
        anchor = np.concatenate(anchors, 1)[None]                                               # [1, 2, A]
        stride = np.concatenate(strides)[None, None]                                            # [1, 1, A]

        lt, rb = self.cut(dist, 0, 2, 1, "left_top"), self.cut(dist, 2, 4, 1, "right_bottom")
        if end2end:   # corners: (anchor - lt, anchor + rb) x stride
            a_s = b.const("anchor_px", anchor * stride)
            s_c = b.const("stride_row", stride)
            x1y1 = b.node("Sub", [a_s, b.node("Mul", [lt, s_c], hint="lt_px")], hint="x1y1")
            x2y2 = b.node("Add", [a_s, b.node("Mul", [rb, s_c], hint="rb_px")], hint="x2y2")
            xy = [x1y1, x2y2]
        else:         # centre and size: (anchor + (rb - lt) / 2, lt + rb) x stride
            centre = b.node("Mul", [b.node("Sub", [rb, lt], hint="rb_minus_lt"), b.const("half_stride", stride / 2)],
                            hint="centre_offset")
            xy = [b.node("Add", [centre, b.const("anchor_px", anchor * stride)], hint="centre"),
                  b.node("Mul", [b.node("Add", [lt, rb], hint="lt_plus_rb"), b.const("stride_row", stride)],
                         hint="size")]
        scores = b.node("Sigmoid", [cls], hint="class_probs")
        out = b.node("Concat", xy + [scores], {"axis": 1}, hint="decoded")                     # [B, 4 + nc, A]
        if end2end:
            out = b.node("Transpose", [out], {"perm": [0, 2, 1]}, hint="decoded_rows")          # [B, A, 4 + nc]
        return out, end2end


def build_yolo_graph(config: Mapping, weights: Mapping[str, np.ndarray], height: int = 640, width: int = 640,
                     **_) -> Graph:
    """`config`: "yaml" (the model yaml), optional "bn_eps" (eps by BatchNorm module name) and "names"."""
    model_yaml = config["yaml"]
    try:
        rows: list[LayerRow] = layer_rows(model_yaml)
    except ValueError as e:
        raise ConverterError(str(e)) from None
    if rows[-1].module not in HEADS:
        raise NotImplementedError(f"the model's last layer is {rows[-1].module}, not a detection head (Detect / "
                                  "v10Detect): only detectors are supported")
    y = YoloGraph(config, weights, height, width)
    b = y.b
    x = _Value(b.input("images", [-1, 3, height, width], F32), 3, height, width)
    outputs: list[_Value] = []
    for r in rows:
        p = f"model.{r.index}"
        if r.source != -1:
            x = outputs[r.source] if isinstance(r.source, int) else [x if j == -1 else outputs[j] for j in r.source]
        m, a = r.module, r.args
        for rep in range(r.repeats):
            q = p if r.repeats == 1 else f"{p}.{rep}"
            if m == "Conv":
                x = y.conv(x, q, a[1], a[2] if len(a) > 2 else 1, a[3] if len(a) > 3 else 1)
            elif m in ("C2f", "C2fCIB"):
                x = y.c2f(x, q, a[1], a[2], bool(a[3]) if len(a) > 3 else False, cib=m == "C2fCIB",
                          lk=bool(a[4]) if m == "C2fCIB" and len(a) > 4 else False)
            elif m == "SPPF":
                x = y.sppf(x, q, a[1], a[2] if len(a) > 2 else 5)
            elif m == "SCDown":
                x = y.scdown(x, q, a[1], a[2], a[3])
            elif m == "PSA":
                x = y.psa(x, q)
            elif m == "nn.Upsample":
                if len(a) < 3 or a[2] != "nearest" or a[1] != 2:
                    raise NotImplementedError(f"layer {r.index}: nn.Upsample{tuple(a)} (only scale 2, nearest)")
                x = y.upsample(x, f"up{r.index}")
            elif m == "Concat":
                if a and a[0] != 1:
                    raise NotImplementedError(f"layer {r.index}: Concat over dimension {a[0]}")
                x = y.concat(x, f"cat{r.index}")
            elif m in HEADS:
                out, end2end = y.detect(x, p, int(a[0]))
        outputs.append(x)
    b.rename(out, "output0")
    b.g.outputs.append("output0")
    b.g.metadata.update({"producer": "model_zoo.detection.yolo_graph", "architecture": rows[-1].module,
                         "image_size": f"{height}x{width}", "end2end": str(end2end).lower()})
    return b.g
