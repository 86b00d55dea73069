"""Object detection on the runtime: image preprocessing (letterbox), the detectors' post-processing (confidence
filter and class-aware NMS, YOLOv10's NMS-free top-k) and `YoloDetector`, the pipeline over a directory that
`python -m model_zoo convert YOLOv8 ...` wrote."""
from .postprocess import Detection, nms, one_to_one_detections, suppressed_detections
from .preprocess import letterbox, load_rgb, resize_bilinear, scale_boxes
from .yolo import YoloDetector

__all__ = ["Detection", "YoloDetector", "letterbox", "load_rgb", "nms", "one_to_one_detections", "resize_bilinear",
           "scale_boxes", "suppressed_detections"]
