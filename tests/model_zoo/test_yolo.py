"""The YOLOv8 and YOLOv10 rows on the runtime: tiny detectors (model_zoo.reference.ultralytics_yolo, the PyTorch
reference, built from ultralytics' yamls at a small width) with seeded random weights, saved as ultralytics saves
them (a pickled half-precision model object whose classes live in ultralytics' modules, which are not installed
here), converted by `python -m model_zoo convert`; then the graph's decoded boxes and probabilities against the
reference (within 1e-4 relative), whole detections through lite.detection.YoloDetector against the reference
pipeline (letterbox by torch's bilinear resize, the reference's NMS / top-k, boxes mapped back), the
post-processing against brute force, float16 weights, the CLI, and bad input named."""
from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from converter.ir import ConverterError
from model_zoo.cli import main as model_zoo
from model_zoo.detection.yolo_yamls import YOLOV8, YOLOV10X, scaled_yaml
from model_zoo.reference import ultralytics_yolo as ref

NAMES = ["person", "bicycle", "car", "dog", "kite"]
H, W = 96, 128
VARIANTS = {
    # yolov8 at width 1/8 (8-32 channels); yolov10x's layout at width 1/4 (PSA needs 128 channels for one head)
    "yolov8": scaled_yaml(YOLOV8, "t", scales={"t": [0.33, 0.125, 256]}, nc=len(NAMES)),
    "yolov10": scaled_yaml(YOLOV10X, "t", scales={"t": [0.33, 0.25, 512]}, nc=len(NAMES)),
}
_ULTRALYTICS_CLASSES = {
    "ultralytics.nn.modules.conv": {"Conv": ref.Conv, "Concat": ref.Concat},
    "ultralytics.nn.modules.block": {c.__name__: c for c in (ref.Bottleneck, ref.C2f, ref.SPPF, ref.DFL, ref.SCDown,
                                                              ref.RepVGGDW, ref.CIB, ref.C2fCIB, ref.Attention,
                                                              ref.PSA)},
    "ultralytics.nn.modules.head": {"Detect": ref.Detect, "v10Detect": ref.V10Detect},
}


class DetectionModel(nn.Module):
    """What ultralytics pickles: the layer list as `model`, the yaml, the class names and the strides."""

    def __init__(self, detector: ref.YoloDetector, model_yaml: dict):
        super().__init__()
        self.model, self.yaml = detector.model, model_yaml
        self.names, self.stride = dict(enumerate(NAMES)), torch.tensor([8.0, 16.0, 32.0])


@contextlib.contextmanager
def as_ultralytics():
    """Our classes pickled under ultralytics' module paths (pickle records module + name; nothing is installed)."""
    classes = dict(_ULTRALYTICS_CLASSES, **{"ultralytics.nn.tasks": {"DetectionModel": DetectionModel}})
    saved, packages = [], ["ultralytics", "ultralytics.nn", "ultralytics.nn.modules"]
    for package in packages:   # pickle imports the module, so its parents too
        sys.modules[package] = types.ModuleType(package)
    for module, members in classes.items():
        sys.modules[module] = mod = types.ModuleType(module)
        for name, cls in members.items():
            saved.append((cls, cls.__module__, cls.__qualname__))
            cls.__module__, cls.__qualname__ = module, name
            setattr(mod, name, cls)
    try:
        yield
    finally:
        for cls, module, qualname in saved:
            cls.__module__, cls.__qualname__ = module, qualname
        for module in [*classes, *packages]:
            del sys.modules[module]


def calibrate_class_logits(model: nn.Module, std: float = 1.5, bias: float = -2.5) -> None:
    """Random weights give class logits of any spread; scale the class branches' last Convs so a picture's logits
    have standard deviation `std` around `bias`: a few dozen boxes above 0.25, well apart (as a trained model's)."""
    finals = {m: n for n, m in model.named_modules() if isinstance(m, nn.Conv2d) and re.search(r"cv3\.\d+\.2$", n)}
    outs = {}
    hooks = [m.register_forward_hook(lambda mod, args, out: outs.__setitem__(mod, out)) for m in finals]
    with torch.no_grad():
        model(reference_letterbox(images(9)[0])[0])
        for h in hooks:
            h.remove()
        for m, out in outs.items():
            m.weight.mul_(std / float((out - m.bias[None, :, None, None]).std()))
            m.bias.fill_(bias)


def make_checkpoint(path, model_yaml: dict, seed: int) -> ref.YoloDetector:
    """A random-weight detector saved as ultralytics saves one (half precision); returns the float model holding
    the same (half-rounded) values."""
    model = ref.randomize_(ref.YoloDetector(model_yaml), seed, scale=1.0)
    calibrate_class_logits(model)
    model = model.half().float().eval()
    ckpt = {"date": "2026-12-07T00:00:00", "version": "8.3.0", "license": "AGPL-3.0", "epoch": -1,
            "best_fitness": None, "model": DetectionModel(copy.deepcopy(model).half(), model_yaml), "ema": None,
            "updates": None, "optimizer": None, "train_args": {"imgsz": 640, "task": "detect", "batch": 16},
            "train_metrics": {"metrics/mAP50(B)": np.float64(0.5)}, "train_results": None}
    with as_ultralytics():
        torch.save(ckpt, path)
    assert not any(m.startswith("ultralytics") for m in sys.modules)
    return model


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def converted(request, tmp_path_factory):
    from lite.detection import YoloDetector
    root = tmp_path_factory.mktemp(request.param)
    model_yaml = VARIANTS[request.param]
    model = make_checkpoint(root / f"{request.param}.pt", model_yaml, seed=3 if request.param == "yolov8" else 4)
    name = "YOLOv8" if request.param == "yolov8" else "YOLOv10-X"
    assert model_zoo(["convert", name, "--checkpoint", str(root / f"{request.param}.pt"), "--output",
                      str(root / "lite"), "--height", str(H), "--width", str(W)]) == 0
    return request.param, model, YoloDetector(str(root / "lite")), root


def images(seed: int) -> list[np.ndarray]:
    """Pictures of several sizes and aspects (wider, taller, larger and smaller than the model's input)."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in ((50, 80), (150, 70), (96, 128), (200, 310)):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([np.sin(x / (7 + c) + y / (11 - c)) for c in range(3)], -1) * 90 + 128
        out.append(np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8))
    return out


def reference_letterbox(image: np.ndarray) -> tuple[torch.Tensor, tuple[int, int]]:
    h0, w0 = image.shape[:2]
    r = min(H / h0, W / w0)
    nw, nh = int(round(w0 * r)), int(round(h0 * r))
    x = torch.from_numpy(image).permute(2, 0, 1)[None].float()
    if (nh, nw) != (h0, w0):
        x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False).round().clamp(0, 255)
    top, left = int(round((H - nh) / 2 - 0.1)), int(round((W - nw) / 2 - 0.1))
    out = torch.full((1, 3, H, W), 114.0)
    out[:, :, top:top + nh, left:left + nw] = x
    return out / 255.0, (h0, w0)


def reference_detections(model, kind: str, picture: np.ndarray, conf: float = 0.25) -> np.ndarray:
    pixels, (h0, w0) = reference_letterbox(picture)
    with torch.no_grad():
        raw = model(pixels)
    rows = (ref.v10_topk(raw, 300, conf) if kind == "yolov10" else ref.non_max_suppression(raw, conf))[0].numpy()
    gain = min(H / h0, W / w0)
    px, py = round((W - w0 * gain) / 2 - 0.1), round((H - h0 * gain) / 2 - 0.1)
    rows[:, [0, 2]] = ((rows[:, [0, 2]] - px) / gain).clip(0, w0)
    rows[:, [1, 3]] = ((rows[:, [1, 3]] - py) / gain).clip(0, h0)
    return rows


def assert_same_detections(got: np.ndarray, want: np.ndarray, box_atol: float = 0.05, score_atol: float = 1e-4):
    """Rows (x1, y1, x2, y2, score, class) equal up to the order of near-equal scores (which float rounding may
    swap): scores in the same descending order, and each row matched by one of the other's (same class, close
    score and box)."""
    assert got.shape == want.shape
    np.testing.assert_allclose(got[:, 4], want[:, 4], atol=score_atol)
    unmatched = list(range(len(want)))
    for row in got:
        hits = [j for j in unmatched if want[j, 5] == row[5] and abs(want[j, 4] - row[4]) <= score_atol
                and np.abs(want[j, :4] - row[:4]).max() <= box_atol]
        assert hits, f"no reference detection matches {row}"
        unmatched.remove(hits[0])


def test_graph_output_equals_reference(converted):
    kind, model, detector, _ = converted
    pixels = np.random.default_rng(1).random((2, 3, H, W), dtype=np.float32)
    got = detector.raw(pixels)
    with torch.no_grad():
        want = model(torch.from_numpy(pixels)).numpy()
    anchors = (H // 8) * (W // 8) + (H // 16) * (W // 16) + (H // 32) * (W // 32)
    assert got.shape == want.shape == ((2, anchors, 4 + len(NAMES)) if kind == "yolov10"
                                       else (2, 4 + len(NAMES), anchors))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("converted", ["yolov8", "yolov10"], indirect=True)
def test_detections_equal_reference(converted):
    kind, model, detector, _ = converted
    pictures = images(2)
    found = detector(pictures)
    assert len(found) == len(pictures)
    total = 0
    for picture, dets in zip(pictures, found):
        want = reference_detections(model, kind, picture)
        assert len(dets) == len(want) > 0
        got = np.array([[*d.box, d.score, d.class_id] for d in dets], np.float32)
        assert_same_detections(got, want)
        assert all(d.label == NAMES[d.class_id] for d in dets)
        assert all(0 <= d.box[0] <= d.box[2] <= picture.shape[1] and 0 <= d.box[1] <= d.box[3] <= picture.shape[0]
                   for d in dets)
        total += len(dets)
    # a stricter confidence keeps a subset, best first
    strict = detector(pictures[:1], conf=0.6)[0]
    assert len(strict) < len(found[0]) and [d.score for d in strict] == sorted((d.score for d in strict),
                                                                               reverse=True)


def test_letterbox_and_resize_match_torch():
    from lite.detection import letterbox, resize_bilinear, scale_boxes
    rng = np.random.default_rng(0)
    for h, w, oh, ow in ((5, 7, 11, 3), (40, 30, 17, 23), (8, 8, 8, 8), (1, 9, 4, 4)):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = F.interpolate(torch.from_numpy(img).permute(2, 0, 1)[None].float(), size=(oh, ow), mode="bilinear",
                             align_corners=False)[0].permute(1, 2, 0).numpy()
        got = resize_bilinear(img.astype(np.float32), oh, ow)
        np.testing.assert_allclose(got, want, atol=1e-3)
        # uint8 images take the runtime's C++ loop (lite._lite.resize_bilinear_u8): the float result, rounded
        u8 = resize_bilinear(img, oh, ow)
        assert u8.dtype == np.uint8 and u8.shape == (oh, ow, 3)
        np.testing.assert_array_equal(u8, np.clip(np.rint(got), 0, 255).astype(np.uint8))
    from lite._lite import resize_bilinear_u8
    with pytest.raises(ValueError, match="height, width, channels"):
        resize_bilinear_u8(np.zeros((4, 4), np.uint8), 2, 2)
    with pytest.raises(ValueError, match="positive"):
        resize_bilinear_u8(np.zeros((4, 4, 3), np.uint8), 0, 2)
    boxed, r, (left, top) = letterbox(np.zeros((100, 50, 3), np.uint8), 64, 64)
    assert boxed.shape == (64, 64, 3) and r == 0.64 and (left, top) == (16, 0)
    assert (boxed[:, :16] == 114).all() and (boxed[:, 48:] == 114).all() and (boxed[:, 16:48] == 0).all()
    # a box on the letterboxed input maps back onto the original picture
    back = scale_boxes(np.array([[16.0, 0.0, 48.0, 64.0], [0.0, 0.0, 10.0, 10.0]]), (64, 64), (100, 50))
    np.testing.assert_allclose(back, [[0, 0, 50, 100], [0, 0, 0, 15.625]])


def test_postprocessing_equals_reference():
    from lite.detection import one_to_one_detections, suppressed_detections
    rng = np.random.default_rng(5)
    for trial in range(4):
        a, nc = 300, 7
        xywh = np.concatenate([rng.uniform(0, 200, (1, 2, a)), rng.uniform(5, 60, (1, 2, a))], 1)
        pred = np.concatenate([xywh, rng.random((1, nc, a)) ** 3], 1).astype(np.float32)
        got = suppressed_detections(pred, conf=0.2, iou=0.5, max_det=50 if trial else 300)[0]
        want = ref.non_max_suppression(torch.from_numpy(pred), conf=0.2, iou=0.5, max_det=50 if trial else 300)[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-4)
        assert 0 < len(got) < (pred[0, 4:].max(0) > 0.2).sum()   # NMS removed some, kept some
        corners = np.concatenate([pred[:, :2] - pred[:, 2:4] / 2, pred[:, :2] + pred[:, 2:4] / 2, pred[:, 4:]], 1)
        rows = corners.transpose(0, 2, 1)
        got = one_to_one_detections(rows, conf=0.3, max_det=40)[0]
        want = ref.v10_topk(torch.from_numpy(rows), 40, 0.3)[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


def test_nms_rule():
    from lite.detection import nms
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30], [0, 0, 10, 10.5]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.95], np.float32)
    np.testing.assert_array_equal(nms(boxes, scores, 0.5), [3, 2])   # 0 and 1 overlap the best one
    np.testing.assert_array_equal(nms(boxes, scores, 0.99), [3, 0, 1, 2])
    assert nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5).size == 0


def test_float16_weights(converted, tmp_path):
    from lite.detection import YoloDetector
    kind, model, detector, root = converted
    name = "YOLOv8" if kind == "yolov8" else "YOLOv10-X"
    assert model_zoo(["convert", name, "--checkpoint", str(root / f"{kind}.pt"), "--output", str(tmp_path),
                      "--height", str(H), "--width", str(W), "--precision", "fp16"]) == 0
    half = YoloDetector(str(tmp_path))
    assert os.path.getsize(tmp_path / "yolo_float16.ms") < 0.6 * os.path.getsize(root / "lite" / "yolo.ms")
    pixels = np.random.default_rng(2).random((1, 3, H, W), dtype=np.float32)
    full, got = detector.raw(pixels), half.raw(pixels)
    scale = np.abs(full).max()
    assert np.abs(got - full).max() < 0.02 * scale and np.abs(got - full).max() > 0   # float16 weights really used


def test_int8_from_the_checkpoint(converted, tmp_path, capsys):
    """--precision int8 --calibration DIR: FULL_QUANT on pictures letterboxed as the pipeline does; the Convs run in
    integer arithmetic and the head's output stays close to float32's."""
    from PIL import Image
    from lite.detection import YoloDetector
    kind, model, detector, root = converted
    name = "YOLOv8" if kind == "yolov8" else "YOLOv10-X"
    (tmp_path / "cal").mkdir()
    for i, picture in enumerate(images(7)):
        Image.fromarray(picture).save(tmp_path / "cal" / f"{i}.png")
    args = ["convert", name, "--checkpoint", str(root / f"{kind}.pt"), "--output", str(tmp_path / "q"),
            "--height", str(H), "--width", str(W), "--precision", "int8"]
    assert model_zoo(args) == 2 and "calibrates on pictures" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert model_zoo(args + ["--calibration", str(tmp_path / "empty")]) == 2
    assert "no pictures" in capsys.readouterr().err
    assert model_zoo(args + ["--calibration", str(tmp_path / "cal")]) == 0
    quantized = YoloDetector(str(tmp_path / "q"))
    assert (tmp_path / "q" / "yolo_int8.ms").is_file()
    pixels, _ = detector.preprocess(images(8))
    full, got = detector.raw(pixels), quantized.raw(pixels)
    # (random tiny nets with 7 calibration pictures: 0.989-0.99998 here; trained ones keep their ranges tighter)
    assert float(full.ravel() @ got.ravel() / np.linalg.norm(full) / np.linalg.norm(got)) > 0.98
    quantized.model.enable_profiling()
    quantized.raw(pixels)
    assert any(p["kernel"].startswith(("u8_", "q")) for p in quantized.model.last_profile() if p["op"] == "Conv")
    assert len(quantized(images(8))) == 4


def test_state_dict_with_yaml_beside(converted, tmp_path):
    """A plain state dict (no pickled classes) converts with its model yaml next to it."""
    import yaml
    from lite.detection import YoloDetector
    kind, model, detector, _ = converted
    torch.save({"model." + k: v for k, v in model.state_dict().items()}, tmp_path / "weights.pt")   # model.model.*
    (tmp_path / "weights.yaml").write_text(yaml.safe_dump(VARIANTS[kind]))
    out = tmp_path / "lite"
    assert model_zoo(["convert", "YOLOv8", "--checkpoint", str(tmp_path), "--output", str(out),
                      "--height", str(H), "--width", str(W)]) == 0
    pixels = np.random.default_rng(3).random((1, 3, H, W), dtype=np.float32)
    np.testing.assert_allclose(YoloDetector(str(out)).raw(pixels), detector.raw(pixels), rtol=1e-5, atol=1e-3)
    assert json.loads((out / "config.json").read_text())["names"] == [str(i) for i in range(len(NAMES))]


def test_cli_detect(converted, tmp_path, capsys):
    from PIL import Image
    kind, _, detector, root = converted
    picture = images(4)[1]
    Image.fromarray(picture).save(tmp_path / "p.png")
    name = "YOLOv8" if kind == "yolov8" else "YOLOv10-X"
    capsys.readouterr()
    assert model_zoo(["run", name, "--model", str(root / "lite"), "--image", str(tmp_path / "p.png"),
                      "--threshold", "0.4"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines() if line]
    want = detector([picture], conf=0.4)[0]
    assert [d["class_id"] for d in lines] == [d.class_id for d in want] and len(lines) > 0
    assert all(d["label"] in NAMES and len(d["box"]) == 4 for d in lines)
    with pytest.raises(SystemExit, match="--image"):
        model_zoo(["run", name, "--model", str(root / "lite")])


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch /tmp/yolo_pickle_ran",))


def test_checkpoint_reader_builds_nothing_unknown(tmp_path):
    """A pickled call of an unknown function becomes an inert record: nothing runs."""
    from model_zoo.detection.ultralytics_checkpoint import PickledObject, _load_pickle
    marker = "/tmp/yolo_pickle_ran"
    if os.path.exists(marker):
        os.unlink(marker)
    torch.save({"model": _Exploit(), "w": torch.ones(3)}, tmp_path / "bad.pt", pickle_protocol=2)
    loaded = _load_pickle(str(tmp_path / "bad.pt"))
    assert isinstance(loaded["model"], PickledObject) and "posix.system" in repr(loaded["model"])
    assert not os.path.exists(marker)
    assert torch.equal(loaded["w"], torch.ones(3))


def test_bad_input_is_named(converted, tmp_path):
    from lite.detection import YoloDetector
    from model_zoo.detection.ultralytics_checkpoint import read_ultralytics
    from model_zoo.detection.yolo_graph import build_yolo_graph
    kind, model, detector, root = converted
    data = (root / f"{kind}.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ConverterError, match="not a readable PyTorch checkpoint"):
        read_ultralytics(str(tmp_path / "cut.pt"))
    torch.save(model.state_dict(), tmp_path / "alone.pt")
    with pytest.raises(ConverterError, match="model yaml"):
        read_ultralytics(str(tmp_path / "alone.pt"))
    weights, info = read_ultralytics(str(root / f"{kind}.pt"))
    assert info["names"] == NAMES and info["strides"] == [8, 16, 32] and info["imgsz"] == 640
    assert set(info["bn_eps"].values()) == {1e-3}
    with pytest.raises(ConverterError, match="integer stride|concatenated maps"):
        build_yolo_graph(info, weights, 100, 128)
    yolo11 = copy.deepcopy(info)
    yolo11["yaml"]["backbone"][2][2] = "C3k2"
    with pytest.raises(NotImplementedError, match="layer 2: ultralytics module 'C3k2'"):
        build_yolo_graph(yolo11, weights, H, W)
    with pytest.raises(SystemExit, match="detects in images"):
        model_zoo(["convert", "YOLOv8", "--checkpoint", str(root / f"{kind}.pt"), "--output", str(tmp_path / "o"),
                   "--frames", "5"])
    with pytest.raises(ConverterError, match="float32, float16 or int8"):
        from model_zoo.families.yolo import convert_yolo
        convert_yolo(str(root / f"{kind}.pt"), str(tmp_path / "o"), "int4")
    with pytest.raises(ValueError, match=r"\[height, width, 3\]"):
        detector([np.zeros((4, 4, 4), np.uint8)])
    with pytest.raises(ValueError, match="NaN"):
        detector([np.full((8, 8, 3), np.nan, np.float32)])
    with pytest.raises(ValueError, match="conf and iou"):
        detector([images(0)[0]], conf=1.5)
    assert detector([]) == []
    with pytest.raises(FileNotFoundError, match="config.json"):
        YoloDetector(str(tmp_path))
