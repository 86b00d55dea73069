"""The NonMaxSuppression operator (format 1.16; lite/src/kernels/detection.cc) against ONNX Runtime: both box forms
(corners in any diagonal order, centre and size), batches and classes, score thresholds, output limits, overlapping
and identical boxes, boxes of no area, NaN scores; computed per run (inputs fed) and folded at convert time (constant
inputs, converter/ops.py's NumPy twin); bad inputs named. Also lite._lite.greedy_nms, which lite.detection uses."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(41)


def nms_model(batches, classes, n, max_out=None, iou=None, score=None, centre=0, constant_inputs=None):
    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [batches, n, 4]),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batches, classes, n])]
    inits, names = [], ["boxes", "scores"]
    if constant_inputs is not None:
        inputs = []
        inits += [numpy_helper.from_array(constant_inputs[0], "boxes"),
                  numpy_helper.from_array(constant_inputs[1], "scores")]
    for name, value, dtype in (("max_out", max_out, np.int64), ("iou", iou, np.float32), ("score", score, np.float32)):
        if value is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.array([value], dtype), name))
        names.append(name)
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=centre)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("selected", TensorProto.INT64, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def random_boxes(batches, n, centre, spread=100.0):
    xy = rng.uniform(0, spread, (batches, n, 2))
    wh = rng.uniform(2, spread / 3, (batches, n, 2))
    if centre:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    corners = np.concatenate([xy, xy + wh], -1)
    flip = rng.random((batches, n)) < 0.3   # any diagonal pair: some boxes given from the other corner
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    return corners[..., [1, 0, 3, 2]].astype(np.float32)   # (y1, x1, y2, x2)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("centre", [0, 1])
@pytest.mark.parametrize("limits", [dict(max_out=1000, iou=0.5), dict(max_out=3, iou=0.3, score=0.4),
                                    dict(max_out=20, iou=0.0), dict(max_out=50, iou=1.0, score=0.9),
                                    dict(max_out=0, iou=0.5), dict(max_out=10)],
                         ids=["all", "few scored", "any overlap", "none overlap", "no output", "defaults"])
def test_nms_matches_onnxruntime(limits, centre, threads):
    batches, classes, n = 2, 3, 60
    model = nms_model(batches, classes, n, centre=centre, **limits)
    feeds = {"boxes": random_boxes(batches, n, centre), "scores": rng.random((batches, classes, n), np.float32)}
    got = assert_parity(model, feeds, threads=threads)[0]
    assert got.shape[1] == 3 and (limits.get("max_out") == 0) == (len(got) == 0)


def test_nms_identical_and_empty_boxes():
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 10], [5, 5, 5, 9], [20, 20, 30, 30], [21, 21, 31, 31],
                       [0, 0, 10, 10]]], np.float32)
    scores = np.array([[[0.9, 0.9, 0.95, 0.5, 0.4, 0.7]]], np.float32)
    got = assert_parity(nms_model(1, 1, 6, max_out=10, iou=0.5), {"boxes": boxes, "scores": scores})[0]
    # box 2 has no area: kept, suppressing nothing; 0 and 1 tie (0 first), 1 and 5 repeat 0, 4 overlaps 3
    np.testing.assert_array_equal(got[:, 2], [2, 0, 3])


def test_nms_nan_scores_come_last(tmp_path):
    """(ONNX Runtime's order for a NaN score follows its heap's internals; the rule here is NaN after every number.)"""
    boxes = np.array([[[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50], [41, 41, 51, 51]]], np.float32)
    scores = np.array([[[0.2, np.nan, 0.9, 0.1]]], np.float32)
    m = load(convert(nms_model(1, 1, 4, max_out=10, iou=0.5), str(tmp_path)), 1)
    got = m.predict({"boxes": boxes, "scores": scores})[0].get_data_to_numpy()
    np.testing.assert_array_equal(got[:, 2], [2, 0, 1])   # 3 overlaps 2; the NaN box last
    m2 = load(convert(nms_model(1, 1, 4, max_out=10, iou=0.5, score=0.0), str(tmp_path), name="thresholded"), 1)
    got = m2.predict({"boxes": boxes, "scores": scores})[0].get_data_to_numpy()
    np.testing.assert_array_equal(got[:, 2], [2, 0])      # a score threshold drops it (NaN > t is false)


def test_nms_folded_at_convert_time(tmp_path):
    boxes, scores = random_boxes(1, 40, 0), rng.random((1, 2, 40), np.float32)
    model = nms_model(1, 2, 40, max_out=5, iou=0.4, score=0.2, constant_inputs=(boxes, scores))
    m = load(convert(model, str(tmp_path)), 1)
    got = m.predict({})[0].get_data_to_numpy()
    want = run_ort(model, {})[0]
    np.testing.assert_array_equal(got, want)


def test_nms_bad_inputs_are_named(tmp_path):
    from converter.ir import ConverterError
    model = nms_model(1, 1, 5, max_out=3, iou=1.5)
    m = load(convert(model, str(tmp_path)), 1)
    feeds = {"boxes": random_boxes(1, 5, 0), "scores": rng.random((1, 1, 5), np.float32)}
    with pytest.raises(Exception, match=r"iou_threshold must lie in \[0, 1\]"):
        m.predict(feeds)
    ok = load(convert(nms_model(1, 1, "n", max_out=3, iou=0.5), str(tmp_path), name="ok"), 1)   # any box count
    with pytest.raises(Exception, match=r"scores must be \[num_batches, num_classes, spatial_dimension\]"):
        ok.predict({"boxes": random_boxes(1, 5, 0), "scores": rng.random((1, 1, 4), np.float32)})
    bad = nms_model(1, 1, 5, max_out=3)
    bad.graph.node[0].attribute[0].i = 2
    with pytest.raises(ConverterError, match="center_point_box must be 0 or 1"):
        convert(bad, str(tmp_path), name="bad")


def test_greedy_nms_binding():
    from lite._lite import greedy_nms
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30], [0, 0, 10, 10.5]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.95], np.float32)
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.5, 10), [3, 2])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.99, 10), [3, 0, 1, 2])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.99, 2), [3, 0])
    assert greedy_nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5, 5).size == 0
    with pytest.raises(ValueError, match=r"boxes must be \[n, 4\]"):
        greedy_nms(np.zeros((3, 5), np.float32), np.zeros(3, np.float32), 0.5, 5)
    with pytest.raises(ValueError, match="one per box"):
        greedy_nms(boxes, scores[:2], 0.5, 5)
