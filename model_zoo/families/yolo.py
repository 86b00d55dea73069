"""Ultralytics YOLO detectors (no transformers implementation; the checkpoints are ultralytics .pt pickles built from
the model yaml): a CSP backbone (Conv / C2f / SPPF, plus SCDown, C2fCIB and PSA in YOLOv10), a PAN neck and an
anchor-free head over strides 8/16/32 whose DFL box decoding is part of the graph. YOLOv8's Detect head is
followed by a confidence filter and NMS; YOLOv10's v10Detect head has a one-to-one branch, so inference is NMS-free
(top-k of the scores).

On the runtime: `convert_yolo` reads the .pt without ultralytics (model_zoo.detection.ultralytics_checkpoint: an
unpickler that builds no unknown class), builds one fused graph for a fixed input size
(model_zoo.detection.yolo_graph) and writes it as yolo[_float16].ms with config.json (the yaml, class names, input
size, head); lite.detection.YoloDetector letterboxes images, runs them as a batch and post-processes the output.
model_zoo.reference.ultralytics_yolo is the PyTorch reference the tests use."""
import os

from model_zoo.registry import Entry

_TEST = "tests/model_zoo/test_yolo.py::test_detections_equal_reference"
_CONVERTER = {"fmk": "ultralytics .pt", "precisions": ["float32", "float16", "int8 (FULL_QUANT, --calibration)"]}

ENTRIES = [
    Entry(name="YOLOv10-X", category="retrieval_vision", family="yolo", hub_id="jameslahm/yolov10x",
          architecture=("ultralytics DetectionModel built from ultralytics/cfg/models/v10/yolov10x.yaml (v10Detect "
                        "head); THU-MIG/yolov10's checkpoints pickle ultralytics.nn.tasks.YOLOv10DetectionModel -> "
                        "model_zoo.detection.yolo_graph (lite.detection.YoloDetector)"),
          config=dict(_parameters="29.5M", nc=80, imgsz=640, scale="x", depth_multiple=1.00, width_multiple=1.25,
                      max_channels=512, strides=[8, 16, 32], head="v10Detect"),
          config_source=("ultralytics/ultralytics ultralytics/cfg/models/v10/yolov10x.yaml (nc 80, scale x = "
                         "[1.00, 1.25, 512], backbone Conv/C2f/SCDown/C2fCIB/SPPF/PSA, v10Detect on P3-P5); "
                         "29.5M parameters at 640 from the THU-MIG/yolov10 README table; hub id per that README "
                         "(YOLOv10.from_pretrained('jameslahm/yolov10x'))"),
          graphs=("backbone_and_head",), pipeline="detect", status="supported", test=_TEST + "[yolov10]",
          converter=_CONVERTER),
    Entry(name="YOLOv8", category="retrieval_vision", family="yolo", hub_id="Ultralytics/YOLOv8",
          architecture=("ultralytics DetectionModel built from ultralytics/cfg/models/v8/yolov8.yaml (Detect head) -> "
                        "model_zoo.detection.yolo_graph (lite.detection.YoloDetector)"),
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
          graphs=("backbone_and_head",), pipeline="detect", status="supported", test=_TEST + "[yolov8]",
          converter=_CONVERTER),
]


def _calibration_samples(images: str, height: int, width: int, folder: str, limit: int = 32) -> int:
    """The pictures of `images` (a directory) letterboxed as lite.detection does, saved as .npy inputs in `folder`."""
    import numpy as np

    from converter.ir import ConverterError
    from lite.detection.preprocess import letterbox, load_rgb
    names = sorted(f for f in os.listdir(images) if f.lower().endswith((".jpg", ".jpeg", ".png", ".bmp", ".webp")))
    if not names:
        raise ConverterError(f"{images}: no pictures (.jpg, .png, .bmp, .webp) to calibrate on")
    for i, name in enumerate(names[:limit]):
        boxed, _, _ = letterbox(load_rgb(os.path.join(images, name)), height, width)
        np.save(os.path.join(folder, f"{i:04d}.npy"),
                (boxed.transpose(2, 0, 1)[None] / np.float32(255.0)).astype(np.float32))
    return min(len(names), limit)


def convert_yolo(checkpoint: str, output: str, weight_format: str = "float32", height: int | None = None,
                 width: int | None = None, calibration_images: str | None = None) -> str:
    """yolo[_<format>].ms and config.json in `output` for images of height x width (default: the training size the
    checkpoint records, else 640; multiples of the largest stride); returns the graph's path. weight_format float32,
    float16 (weights stored as float16), or int8: FULL_QUANT (Convs in 8-bit integer arithmetic, their inputs'
    scales calibrated (MAX_MIN) on up to 32 pictures of `calibration_images`, letterboxed as the pipeline does)."""
    import tempfile

    from converter.ir import ConverterError
    from model_zoo.detection.ultralytics_checkpoint import read_ultralytics
    from model_zoo.detection.yolo_graph import build_yolo_graph
    from model_zoo.release_dir import write_release
    if weight_format not in ("float32", "float16", "int8"):
        raise ConverterError(f"YOLO converts with float32, float16 or int8 (calibrated) weights, not {weight_format}")
    if weight_format == "int8" and not calibration_images:
        raise ConverterError("int8 (FULL_QUANT) calibrates on pictures: give a directory of them (--calibration)")
    weights, info = read_ultralytics(checkpoint)
    size = int(info.get("imgsz", 640))
    height, width = height or size, width or size
    if height <= 0 or width <= 0:
        raise ConverterError(f"the input size must be positive, got {height}x{width}")
    head = info["yaml"]["head"][-1][2]

    def build():
        graph = build_yolo_graph(info, weights, height, width)
        config["end2end"] = graph.metadata["end2end"] == "true"   # which post-processing the output needs
        if weight_format == "float16":
            from converter.quantization import apply_fp16
            apply_fp16(graph)
        elif weight_format == "int8":
            from converter.quantization import QuantConfig, apply_integer_quant
            with tempfile.TemporaryDirectory() as folder:
                count = _calibration_samples(calibration_images, height, width, folder)
                cfg = QuantConfig(quant_type="FULL_QUANT", bit_num=8, calibrate_path={"images": folder},
                                  calibrate_size=count, input_type="NPY", source="model_zoo convert --calibration")
                apply_integer_quant(graph, cfg, {})
        return graph
    names = info.get("names") or [str(i) for i in range(int(info["yaml"]["nc"]))]
    config = {"model_type": "ultralytics_yolo", "head": head, "imgsz": [height, width], "names": names,
              "yaml": info["yaml"]}
    return write_release(output, config, [("yolo", build)], checkpoint if os.path.isdir(checkpoint) else
                         os.path.dirname(os.path.abspath(checkpoint)), (), weight_format)[0]
