"""`YoloDetector`: ultralytics YOLOv8 / YOLOv10 detection on the runtime, over a directory that `python -m model_zoo
convert YOLOv8 --checkpoint yolov8n.pt --output DIR` wrote (yolo[_<weight format>].ms and config.json: the model
yaml, the class names, the input size, the head and whether it is end-to-end). Images are letterboxed to the model's size, run as one batch,
and the head's output is post-processed as ultralytics' predictors do it (YOLOv8: confidence filter and class-aware
NMS; YOLOv10: top-k of the one-to-one head), boxes mapped back to each original image."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .postprocess import Detection, one_to_one_detections, suppressed_detections
from .preprocess import letterbox, load_rgb, scale_boxes


class YoloDetector:
    def __init__(self, model_dir: str, weight_format: str | None = None, threads: int = 1,
                 precision_mode: str | None = None):
        from .. import Context, Model, ModelType
        config_path = os.path.join(model_dir, "config.json")
        if not os.path.isfile(config_path):
            raise FileNotFoundError(f"'{model_dir}' has no config.json (convert the checkpoint with python -m "
                                    "model_zoo convert YOLOv8 ...)")
        with open(config_path) as f:
            self.config = json.load(f)
        if weight_format is None:
            manifest = os.path.join(model_dir, "model_zoo.json")
            weight_format = "float32"
            if os.path.isfile(manifest):
                with open(manifest) as f:
                    weight_format = json.load(f).get("weight_format", "float32")
        path = os.path.join(model_dir, f"yolo{'' if weight_format == 'float32' else '_' + weight_format}.ms")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"'{model_dir}' has no {os.path.basename(path)}")
        self.height, self.width = (int(v) for v in self.config["imgsz"])
        self.end2end = bool(self.config.get("end2end", self.config.get("head") == "v10Detect"))
        self.names = list(self.config.get("names") or [])
        ctx = Context()
        ctx.cpu.thread_num = threads
        if precision_mode:
            ctx.cpu.precision_mode = precision_mode
        self.model = Model()
        self.model.build_from_file(path, ModelType.MINDIR_LITE, ctx)

    def preprocess(self, images: Sequence) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """[batch, 3, height, width] float32 in [0, 1] and each image's (height, width)."""
        batch, shapes = [], []
        for image in images:
            rgb = load_rgb(image)
            shapes.append(rgb.shape[:2])
            boxed, _, _ = letterbox(rgb, self.height, self.width)
            batch.append(boxed.transpose(2, 0, 1))
        return np.ascontiguousarray(np.stack(batch), dtype=np.float32) / np.float32(255.0), shapes

    def raw(self, pixels: np.ndarray) -> np.ndarray:
        """The graph's output for preprocessed pixels (see model_zoo.detection.yolo_graph)."""
        return self.model.predict({"images": pixels})[0].get_data_to_numpy()

    def __call__(self, images: Sequence, conf: float = 0.25, iou: float = 0.7, max_det: int = 300
                 ) -> list[list[Detection]]:
        """Per image its detections, best first. `iou` is the NMS threshold (YOLOv8; YOLOv10 needs none)."""
        if not 0.0 <= conf <= 1.0 or not 0.0 <= iou <= 1.0 or max_det < 1:
            raise ValueError(f"conf and iou lie in [0, 1] and max_det >= 1 (got {conf}, {iou}, {max_det})")
        if len(images) == 0:
            return []
        pixels, shapes = self.preprocess(images)
        out = self.raw(pixels)
        rows = (one_to_one_detections(out, conf, max_det) if self.end2end
                else suppressed_detections(out, conf, iou, max_det))
        result = []
        for r, shape in zip(rows, shapes):
            boxes = scale_boxes(r[:, :4], (self.height, self.width), shape)
            result.append([Detection(tuple(float(v) for v in box), float(s), int(c), self._label(int(c)))
                           for box, s, c in zip(boxes, r[:, 4], r[:, 5])])
        return result

    def _label(self, class_id: int) -> str:
        return self.names[class_id] if class_id < len(self.names) else str(class_id)
