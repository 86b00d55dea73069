"""Detector post-processing on the graph's decoded boxes: YOLOv8-style (the best class per anchor above a confidence,
class-aware greedy NMS, the best max_det) and YOLOv10-style one-to-one heads (the best max_det anchors, then the
best max_det (anchor, class) pairs: no NMS). Both follow ultralytics' predictors' rules and defaults."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Detection:
    box: tuple[float, float, float, float]   # x1, y1, x2, y2 in the original image's pixels
    score: float
    class_id: int
    label: str

    def as_dict(self) -> dict:
        return {"box": [round(float(v), 2) for v in self.box], "score": round(float(self.score), 5),
                "class_id": self.class_id, "label": self.label}


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, max_keep: int | None = None) -> np.ndarray:
    """Indices kept by greedy NMS, best score first: a box goes when its IoU with a kept one exceeds `iou`
    (torchvision.ops.nms' rule; ties in score keep the earlier box first), at most `max_keep` (the same first ones: a
    box's fate depends only on boxes kept before it). The runtime's C++ loop (the NonMaxSuppression operator's)."""
    from .._lite import greedy_nms
    boxes = np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4)
    return greedy_nms(boxes, np.ascontiguousarray(scores, dtype=np.float32).reshape(-1), float(iou),
                      len(boxes) if max_keep is None else int(max_keep))


def suppressed_detections(prediction: np.ndarray, conf: float = 0.25, iou: float = 0.7, max_det: int = 300,
                          max_nms: int = 30000, max_wh: float = 7680.0) -> list[np.ndarray]:
    """[batch, 4 + classes, anchors] (centre-x, centre-y, width, height, probabilities) -> per image rows
    (x1, y1, x2, y2, score, class), best first."""
    out = []
    for p in np.asarray(prediction, dtype=np.float32).transpose(0, 2, 1):
        scores = p[:, 4:]
        cls = scores.argmax(1)
        best = scores[np.arange(len(p)), cls]
        keep = best > conf
        xy, half = p[keep, :2], p[keep, 2:4] / 2
        boxes, best, cls = np.concatenate([xy - half, xy + half], 1), best[keep], cls[keep]
        order = np.argsort(-best, kind="stable")[:max_nms]
        boxes, best, cls = boxes[order], best[order], cls[order]
        kept = nms(boxes + cls[:, None].astype(np.float32) * max_wh, best, iou, max_det)
        out.append(np.concatenate([boxes[kept], best[kept, None], cls[kept, None].astype(np.float32)], 1))
    return out


def one_to_one_detections(prediction: np.ndarray, conf: float = 0.25, max_det: int = 300) -> list[np.ndarray]:
    """[batch, anchors, 4 + classes] (x1, y1, x2, y2, probabilities) -> per image rows (x1, y1, x2, y2, score,
    class) above `conf`, best first."""
    out = []
    for p in np.asarray(prediction, dtype=np.float32):
        nc = p.shape[1] - 4
        k = min(max_det, len(p))
        best = p[:, 4:].max(1)
        anchors = np.argsort(-best, kind="stable")[:k]
        boxes, scores = p[anchors, :4], p[anchors, 4:]
        flat = scores.reshape(-1)
        pick = np.argsort(-flat, kind="stable")[:k]
        rows = np.concatenate([boxes[pick // nc], flat[pick, None], (pick % nc)[:, None].astype(np.float32)], 1)
        out.append(rows[rows[:, 4] > conf])
    return out
