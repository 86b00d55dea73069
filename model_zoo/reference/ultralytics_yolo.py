"""Ultralytics' YOLOv8 and YOLOv10 detectors in PyTorch, written from the public model yamls and the published
description of their modules, with the checkpoints' tensor names ("model.<layer>.<...>"): the reference the
runtime's graphs and lite.detection's post-processing are tested against. Inference only.

`YoloDetector(model_yaml)` builds the layers model_zoo.detection.yolo_layers lists (ultralytics' parse_model
rules). Modules: Conv (Conv2d without bias, BatchNorm eps 1e-3 as ultralytics' initialize_weights sets
it, SiLU), C2f, SPPF, nn.Upsample, Concat, Detect (YOLOv8) and YOLOv10's SCDown, C2fCIB (CIB, RepVGGDW), PSA and
v10Detect. `forward` returns what an export returns: YOLOv8 [batch, 4 + classes, anchors] (centre-x, centre-y,
width, height in input pixels, then class probabilities); YOLOv10 the one-to-one head's [batch, anchors,
4 + classes] as (x1, y1, x2, y2, probabilities), before its top-k (`v10_topk`). `non_max_suppression` and
`v10_topk` are the predictors' post-processing, written out with plain torch ops."""
from __future__ import annotations

import math

import torch
from torch import nn

from model_zoo.detection.yolo_layers import layer_rows

BN_EPS = 1e-3


class Conv(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1, act: bool = True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=0.03)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, e: float = 0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1, self.cv2 = Conv(c1, c_, 3, 1), Conv(c_, c2, 3, 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, g: int = 1, e: float = 0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1, self.cv2 = Conv(c1, 2 * self.c, 1, 1), Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, e=1.0) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 5):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_, 1, 1), Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Concat(nn.Module):
    def __init__(self, dimension: int = 1):
        super().__init__()
        self.d = dimension

    def forward(self, x):
        return torch.cat(x, self.d)


class SCDown(nn.Module):
    def __init__(self, c1: int, c2: int, k: int, s: int):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c2, 1, 1), Conv(c2, c2, k, s, g=c2, act=False)

    def forward(self, x):
        return self.cv2(self.cv1(x))


class RepVGGDW(nn.Module):
    def __init__(self, ed: int):
        super().__init__()
        self.conv, self.conv1 = Conv(ed, ed, 7, 1, 3, g=ed, act=False), Conv(ed, ed, 3, 1, 1, g=ed, act=False)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.conv(x) + self.conv1(x))


class CIB(nn.Module):
    def __init__(self, c1: int, c2: int, shortcut: bool = True, e: float = 0.5, lk: bool = False):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = nn.Sequential(Conv(c1, c1, 3, g=c1), Conv(c1, 2 * c_, 1),
                                 RepVGGDW(2 * c_) if lk else Conv(2 * c_, 2 * c_, 3, g=2 * c_),
                                 Conv(2 * c_, c2, 1), Conv(c2, c2, 3, g=c2))
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv1(x) if self.add else self.cv1(x)


class C2fCIB(C2f):
    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, lk: bool = False, g: int = 1,
                 e: float = 0.5):
        super().__init__(c1, c2, n, shortcut, g, e)
        self.m = nn.ModuleList(CIB(self.c, self.c, shortcut, e=1.0, lk=lk) for _ in range(n))


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int = 8, attn_ratio: float = 0.5):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim ** -0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, 1, g=dim, act=False)

    def forward(self, x):
        B, C, H, W = x.shape
        q, k, v = self.qkv(x).view(B, self.num_heads, 2 * self.key_dim + self.head_dim, H * W).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).view(B, C, H, W) + self.pe(v.reshape(B, C, H, W))
        return self.proj(x)


class PSA(nn.Module):
    def __init__(self, c1: int, c2: int, e: float = 0.5):
        super().__init__()
        if c1 != c2:
            raise ValueError(f"PSA keeps its width ({c1} in, {c2} out)")
        self.c = int(c1 * e)
        self.cv1, self.cv2 = Conv(c1, 2 * self.c, 1, 1), Conv(2 * self.c, c1, 1)
        self.attn = Attention(self.c, attn_ratio=0.5, num_heads=self.c // 64)
        self.ffn = nn.Sequential(Conv(self.c, self.c * 2, 1), Conv(self.c * 2, self.c, 1, act=False))

    def forward(self, x):
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        b = b + self.attn(b)
        b = b + self.ffn(b)
        return self.cv2(torch.cat((a, b), 1))


class DFL(nn.Module):
    """The expectation over reg_max distance bins: a fixed 1x1 Conv with weights 0 .. reg_max - 1."""

    def __init__(self, c1: int = 16):
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float32).view(1, c1, 1, 1)
        self.c1 = c1

    def forward(self, x):
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(shapes: list[tuple[int, int]], strides: list[int], offset: float = 0.5):
    points, stride_rows = [], []
    for (h, w), s in zip(shapes, strides):
        sy, sx = torch.meshgrid(torch.arange(h, dtype=torch.float32) + offset,
                                torch.arange(w, dtype=torch.float32) + offset, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_rows.append(torch.full((h * w, 1), float(s)))
    return torch.cat(points), torch.cat(stride_rows)


class Detect(nn.Module):
    """YOLOv8's anchor-free head: per level a box branch (cv2: 4 x reg_max distance bins) and a class branch (cv3)."""
    end2end = False

    def __init__(self, nc: int, ch: tuple[int, ...], strides: tuple[int, ...] = (8, 16, 32)):
        super().__init__()
        self.nc, self.nl, self.reg_max = nc, len(ch), 16
        self.strides = list(strides)
        c2, c3 = max(16, ch[0] // 4, self.reg_max * 4), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1))
                                 for x in ch)
        self.cv3 = nn.ModuleList(self._class_branch(x, c3, nc) for x in ch)
        self.dfl = DFL(self.reg_max)

    @staticmethod
    def _class_branch(x: int, c3: int, nc: int) -> nn.Module:
        return nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1))

    def decode(self, feats: list[torch.Tensor], box_branch, class_branch, xywh: bool) -> torch.Tensor:
        b = feats[0].shape[0]
        maps = [torch.cat((box_branch[i](f), class_branch[i](f)), 1) for i, f in enumerate(feats)]
        x = torch.cat([m.view(b, 4 * self.reg_max + self.nc, -1) for m in maps], 2)
        anchors, strides = make_anchors([tuple(f.shape[2:]) for f in feats], self.strides)
        anchors, strides = anchors.transpose(0, 1).unsqueeze(0), strides.transpose(0, 1)
        box, cls = x.split((4 * self.reg_max, self.nc), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        x1y1, x2y2 = anchors - lt, anchors + rb
        boxes = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) if xywh else torch.cat((x1y1, x2y2), 1)
        return torch.cat((boxes * strides, cls.sigmoid()), 1)

    def forward(self, feats):
        return self.decode(feats, self.cv2, self.cv3, xywh=True)


class V10Detect(Detect):
    """YOLOv10's head: the one-to-many branches of training plus one-to-one copies (one2one_cv2 / one2one_cv3)
    that inference uses; class branches with depthwise 3x3 Convs; boxes as corners."""
    end2end = True

    def __init__(self, nc: int, ch: tuple[int, ...], strides: tuple[int, ...] = (8, 16, 32)):
        super().__init__(nc, ch, strides)
        import copy
        self.one2one_cv2, self.one2one_cv3 = copy.deepcopy(self.cv2), copy.deepcopy(self.cv3)

    @staticmethod
    def _class_branch(x: int, c3: int, nc: int) -> nn.Module:
        return nn.Sequential(nn.Sequential(Conv(x, x, 3, g=x), Conv(x, c3, 1)),
                             nn.Sequential(Conv(c3, c3, 3, g=c3), Conv(c3, c3, 1)), nn.Conv2d(c3, nc, 1))

    def forward(self, feats):
        return self.decode(feats, self.one2one_cv2, self.one2one_cv3, xywh=False).transpose(1, 2)


MODULES = {"Conv": Conv, "C2f": C2f, "SPPF": SPPF, "Concat": Concat, "nn.Upsample": nn.Upsample, "SCDown": SCDown,
           "C2fCIB": C2fCIB, "PSA": PSA, "Detect": Detect, "v10Detect": V10Detect}


class YoloDetector(nn.Module):
    def __init__(self, model_yaml: dict, in_channels: int = 3, strides: tuple[int, ...] = (8, 16, 32)):
        super().__init__()
        rows = layer_rows(model_yaml, in_channels)
        layers = []
        for r in rows:
            args = [*r.args, strides] if r.module in ("Detect", "v10Detect") else r.args
            make = lambda: MODULES[r.module](*args)
            layers.append(nn.Sequential(*(make() for _ in range(r.repeats))) if r.repeats > 1 else make())
        self.sources = [r.source for r in rows]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        outputs = []
        for f, m in zip(self.sources, self.model):
            if f != -1:
                x = outputs[f] if isinstance(f, int) else [x if j == -1 else outputs[j] for j in f]
            x = m(x)
            outputs.append(x)
        return x


def xywh_to_xyxy(b: torch.Tensor) -> torch.Tensor:
    xy, half = b[..., :2], b[..., 2:] / 2
    return torch.cat((xy - half, xy + half), -1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    lt, rb = torch.max(a[:, None, :2], b[None, :, :2]), torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, iou: float) -> torch.Tensor:
    """Indices kept by greedy NMS, highest score first (torchvision.ops.nms' rule: drop IoU > iou)."""
    order, keep = scores.argsort(descending=True, stable=True), []
    ious = box_iou(boxes, boxes)
    removed = torch.zeros(len(boxes), dtype=torch.bool)
    for i in order.tolist():
        if removed[i]:
            continue
        keep.append(i)
        removed |= ious[i] > iou
    return torch.tensor(keep, dtype=torch.long)


def non_max_suppression(prediction: torch.Tensor, conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                        max_nms: int = 30000, max_wh: float = 7680.0) -> list[torch.Tensor]:
    """YOLOv8's post-processing of [batch, 4 + classes, anchors]: per image the rows (x1, y1, x2, y2, score, class)
    of the best class per anchor above `conf`, class-aware NMS (boxes offset by class x max_wh), `max_det` best."""
    out = []
    for p in prediction.transpose(1, 2):
        boxes, scores = xywh_to_xyxy(p[:, :4]), p[:, 4:]
        best, cls = scores.max(1)
        keep = best > conf
        boxes, best, cls = boxes[keep], best[keep], cls[keep]
        order = best.argsort(descending=True, stable=True)[:max_nms]
        boxes, best, cls = boxes[order], best[order], cls[order]
        kept = greedy_nms(boxes + cls[:, None].float() * max_wh, best, iou)[:max_det]
        out.append(torch.cat((boxes[kept], best[kept, None], cls[kept, None].float()), 1))
    return out


def v10_topk(prediction: torch.Tensor, max_det: int = 300, conf: float = 0.25) -> list[torch.Tensor]:
    """YOLOv10's post-processing of [batch, anchors, 4 + classes]: the max_det anchors of highest best-class score,
    then the max_det best (anchor, class) pairs among them, rows above `conf`."""
    nc = prediction.shape[-1] - 4
    boxes, scores = prediction.split([4, nc], dim=-1)
    k = min(max_det, prediction.shape[1])
    index = scores.amax(-1).topk(k, dim=-1).indices.unsqueeze(-1)
    boxes, scores = boxes.gather(1, index.repeat(1, 1, 4)), scores.gather(1, index.repeat(1, 1, nc))
    scores, index = scores.flatten(1).topk(k, dim=-1)
    rows = torch.arange(prediction.shape[0])[..., None]
    out = torch.cat([boxes[rows, index // nc], scores[..., None], (index % nc)[..., None].float()], dim=-1)
    return [o[o[:, 4] > conf] for o in out]


def randomize_(model: nn.Module, seed: int, scale: float = 0.3) -> nn.Module:
    """Seeded random weights and BatchNorm statistics (the DFL's fixed bins kept), for tiny-config tests."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".dfl." in name:
                continue
            fan_in = p[0].numel() if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=g) * (scale / math.sqrt(fan_in) if p.dim() > 1 else scale))
            if name.endswith("bn.weight"):
                p.add_(1.0)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return model.eval()
