"""Ultralytics YOLO detectors (no transformers implementation; the checkpoints are ultralytics .pt pickles built from
the model yaml): a CSP backbone (Conv / C2f / SPPF, plus SCDown, C2fCIB and PSA in YOLOv10), a PAN neck and an
anchor-free head over strides 8/16/32 whose DFL box decoding is part of the graph. YOLOv8's Detect head is
followed by a confidence filter and NMS; YOLOv10's v10Detect head has a one-to-one branch, so inference is NMS-free
(top-k of the scores)."""
from model_zoo.registry import Entry

_MISSING = ("runs today when exported to ONNX (converter_lite --fmk=ONNX), though no test in this repository "
            "covers a YOLO export yet; the checkpoint path (a graph builder from the ultralytics .pt / its state "
            "dict and the model yaml; it is not in issue 34's transformers frontend) is missing, and so is the "
            "detect pipeline's pre/post-processing (letterbox to 640, {post})")

ENTRIES = [
    Entry(name="YOLOv10-X", category="retrieval_vision", family="yolo", hub_id="jameslahm/yolov10x",
          architecture=("ultralytics DetectionModel built from ultralytics/cfg/models/v10/yolov10x.yaml (v10Detect "
                        "head); THU-MIG/yolov10's checkpoints pickle ultralytics.nn.tasks.YOLOv10DetectionModel"),
          config=dict(_parameters="29.5M", nc=80, imgsz=640, scale="x", depth_multiple=1.00, width_multiple=1.25,
                      max_channels=512, strides=[8, 16, 32], head="v10Detect"),
          config_source=("ultralytics/ultralytics ultralytics/cfg/models/v10/yolov10x.yaml (nc 80, scale x = "
                         "[1.00, 1.25, 512], backbone Conv/C2f/SCDown/C2fCIB/SPPF/PSA, v10Detect on P3-P5); "
                         "29.5M parameters at 640 from the THU-MIG/yolov10 README table; hub id per that README "
                         "(YOLOv10.from_pretrained('jameslahm/yolov10x'))"),
          graphs=("backbone_and_head",), pipeline="detect", status="planned",
          missing=_MISSING.format(post="top-k of the one-to-one head's boxes and scores, no NMS")),
    Entry(name="YOLOv8", category="retrieval_vision", family="yolo", hub_id="Ultralytics/YOLOv8",
          architecture="ultralytics DetectionModel built from ultralytics/cfg/models/v8/yolov8.yaml (Detect head)",
          config=dict(_parameters="3.2M-68.2M (n-x)", nc=80, imgsz=640, strides=[8, 16, 32], head="Detect",
                      scales={"n": dict(depth_multiple=0.33, width_multiple=0.25, max_channels=1024,
                                        parameters=3157200),
                              "s": dict(depth_multiple=0.33, width_multiple=0.50, max_channels=1024,
                                        parameters=11166560),
                              "m": dict(depth_multiple=0.67, width_multiple=0.75, max_channels=768,
                                        parameters=25902640),
                              "l": dict(depth_multiple=1.00, width_multiple=1.00, max_channels=512,
                                        parameters=43691520),
                              "x": dict(depth_multiple=1.00, width_multiple=1.25, max_channels=512,
                                        parameters=68229648)}),
          config_source=("ultralytics/ultralytics ultralytics/cfg/models/v8/yolov8.yaml: nc 80, the five scales "
                         "[depth, width, max_channels] and their parameter counts from the yaml's own summary "
                         "comments; the entry covers the family (yolov8n/s/m/l/x.pt), the name does not pick a "
                         "scale; 640 is ultralytics' default image size"),
          graphs=("backbone_and_head",), pipeline="detect", status="planned",
          missing=_MISSING.format(post="confidence filter and NMS over the decoded 4 + 80 outputs per anchor")),
]
