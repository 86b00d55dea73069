"""Runtime behaviour beyond single operators: memory planning, result ownership, threads, repeat runs."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from model_zoo.tiny import small_cnn
from parity import convert, load


def chain_model(length: int, width: int):
    nodes = [helper.make_node("Tanh" if i % 2 else "Neg", [f"t{i}"], [f"t{i + 1}"]) for i in range(length)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [width])],
                              [helper.make_tensor_value_info(f"t{length}", TensorProto.FLOAT, [width])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_arena_reuses_buffers_with_disjoint_lifetimes(tmp_path):
    width, length = 1024, 20
    m = load(convert(chain_model(length, width), str(tmp_path)))
    x = np.random.default_rng(0).standard_normal(width).astype(np.float32)
    y = m.predict([x])[0].get_data_to_numpy()
    want = x
    for i in range(length):
        want = np.tanh(want) if i % 2 else -want
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    arena = m._core.arena_bytes()
    # 19 intermediates of 4 KiB each; only two are ever live at once.
    assert 2 * width * 4 <= arena <= 3 * width * 4, arena


def view_model(reread: bool):
    """x -> Neg -> Reshape -> Tanh (-> + Neg's output again, shaped back, when `reread`)."""
    shape = helper.make_tensor("to", TensorProto.INT64, [2], [32, 64])
    back = helper.make_tensor("back", TensorProto.INT64, [2], [64, 32])
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Reshape", ["a", "to"], ["b"]),
             helper.make_node("Tanh", ["b"], ["c"] if reread else ["y"])]
    if reread:
        nodes += [helper.make_node("Reshape", ["c", "back"], ["d"]), helper.make_node("Add", ["d", "a"], ["y"])]
    out = [64, 32] if reread else [32, 64]
    graph = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], [shape, back])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("reread", [False, True])
def test_views_share_their_input_buffer_unless_it_is_read_later(reread, tmp_path):
    m = load(convert(view_model(reread), str(tmp_path)))
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    want = np.tanh(-x.reshape(32, 64))
    if reread:
        want = want.reshape(64, 32) - x
    np.testing.assert_allclose(m.predict([x])[0].get_data_to_numpy(), want, rtol=1e-5, atol=1e-6)
    if not reread:   # Neg's output and the reshaped view are one 8 KiB buffer
        assert m._core.arena_bytes() <= 64 * 32 * 4 + 64, m._core.arena_bytes()


def test_results_survive_later_runs(tmp_path):
    m = load(convert(small_cnn(), str(tmp_path)))
    rng = np.random.default_rng(1)
    x1, x2 = (rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2))
    y1 = m.predict([x1])[0].get_data_to_numpy()
    keep = y1.copy()
    m.predict([x2])
    np.testing.assert_array_equal(y1, keep)


def test_thread_counts_agree(tmp_path):
    ms = convert(small_cnn(), str(tmp_path))
    x = np.random.default_rng(2).standard_normal((3, 3, 32, 32)).astype(np.float32)
    outs = [load(ms, threads=t).predict([x])[0].get_data_to_numpy() for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-5, atol=1e-6)


def test_repeated_runs_are_deterministic(tmp_path):
    m = load(convert(small_cnn(), str(tmp_path)), threads=2)
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    first = m.predict([x])[0].get_data_to_numpy()
    for _ in range(5):
        np.testing.assert_array_equal(m.predict([x])[0].get_data_to_numpy(), first)


def test_concurrent_predict_calls_are_serialised(tmp_path):
    m = load(convert(small_cnn(), str(tmp_path)), threads=2)
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    expected = [m.predict([x])[0].get_data_to_numpy() for x in xs]
    results = [None] * len(xs)

    def work(i):
        for _ in range(5):
            results[i] = m.predict([xs[i]])[0].get_data_to_numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, e in zip(results, expected):
        np.testing.assert_array_equal(r, e)


def test_input_array_is_not_modified(tmp_path):
    m = load(convert(small_cnn(), str(tmp_path)))
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    before = x.copy()
    m.predict([x])
    np.testing.assert_array_equal(x, before)


def test_failed_build_keeps_previous_model(tmp_path):
    import lite
    ms = convert(small_cnn(), str(tmp_path))
    m = load(ms)
    bad = tmp_path / "bad.ms"
    bad.write_bytes(b"not a model at all, definitely" * 4)
    try:
        m.build_from_file(str(bad))
    except lite.ModelFormatError:
        pass
    assert m.predict([np.zeros((1, 3, 32, 32), np.float32)])[0].shape == [1, 10]


def test_alternating_shapes_reuse_cached_plans(tmp_path):
    """Plans are cached per input-shape signature (LRU of 8); results stay right through eviction."""
    m = load(convert(small_cnn(), str(tmp_path)))
    rng = np.random.default_rng(6)
    xs = {b: rng.standard_normal((b, 3, 32, 32)).astype(np.float32) for b in range(1, 11)}
    want = {b: m.predict([x])[0].get_data_to_numpy() for b, x in xs.items()}   # 10 shapes: evicts 2
    for b in [1, 2, 1, 10, 3, 1, 9, 2]:
        np.testing.assert_array_equal(m.predict([xs[b]])[0].get_data_to_numpy(), want[b])
        assert m.get_outputs()[0].shape == [b, 10]


def test_large_outputs_are_independent_across_runs_and_listings(tmp_path):
    """Outputs are computed straight into per-run buffers (recycled by size once freed): a result the
    caller still holds is never reused, and an output listed twice gives two independent arrays."""
    n = 64 * 1024   # 256 KiB: above the recycling threshold
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Tanh", ["y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [n]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
    m = load(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path)))
    rng = np.random.default_rng(2)
    held = []
    for _ in range(4):
        x = rng.standard_normal(n).astype(np.float32)
        y, z, y2 = (t.get_data_to_numpy() for t in m.predict([x]))
        np.testing.assert_array_equal(y, -x)
        np.testing.assert_allclose(z, np.tanh(-x), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(y2, y)
        y2[:] = 7.0   # the second listing is its own array
        assert not np.any(y == 7.0)
        held.append((x, y))
        del z   # freed: its buffer may serve the next run
    for x, y in held:   # results still held were never handed out again
        np.testing.assert_array_equal(y, -x)


def test_released_weight_pages_are_read_again_on_new_shapes(tmp_path):
    """Packed weights let the runtime drop the weights' pages of the file mapping; a new input shape
    re-prepares (re-packs from the file) and still computes the same convolution and MatMul."""
    from onnx import numpy_helper

    from parity import run_ort
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)   # 72 KiB: whole pages to release
    fc = rng.standard_normal((7, 300)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["c", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32, 5, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m = load(convert(model, str(tmp_path)))
    for n in (1, 3, 1, 2):
        x = rng.standard_normal((n, 32, 5, 7)).astype(np.float32)
        np.testing.assert_allclose(m.predict([x])[0].get_data_to_numpy(), run_ort(model, {"x": x})[0],
                                   rtol=1e-4, atol=1e-4)


def test_core_round_trip_measures_pinned_cpus_only():
    """The benchmarks' CPU placement figure: a positive round trip between two CPUs this process may use, -1 for
    one CPU twice or a CPU it may not use (nothing is pinned there)."""
    import lite
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) >= 2:
        assert 0 < lite._lite.measure_core_round_trip_ns(cpus[0], cpus[1], 20000, 3) < 1e6
    assert lite._lite.measure_core_round_trip_ns(0, 0) == -1
    assert lite._lite.measure_core_round_trip_ns(0, 4096) == -1
    assert lite._lite.measure_core_round_trip_ns(-1, 1) == -1


_AFFINITY_PROBE = r"""
import json, os, sys, threading
import numpy as np
from onnx import TensorProto, helper, numpy_helper
sys.path.insert(0, sys.argv[1])
import lite
from parity import convert
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
ctx = lite.Context()
ctx.cpu.thread_num = 2
ctx.cpu.bind_cores = sys.argv[3] == "1"
model = lite.Model()
model.build_from_file(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[2]),
                      lite.ModelType.MINDIR_LITE, ctx)
x = np.ones((1, 64, 56, 56), np.float32)
for _ in range(20):
    model.predict([x])

def cpus(text):
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)

masks = {}
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/status") as f:
        line = next(l for l in f if l.startswith("Cpus_allowed_list:"))
    masks[int(tid)] = cpus(line.split(":", 1)[1].strip())
print(json.dumps({"main": threading.get_native_id(), "allowed": sorted(os.sched_getaffinity(0)), "masks": masks}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
@pytest.mark.parametrize("mode", ["default", "bind_cores", "off"])
def test_worker_keeps_off_the_callers_cpu(mode, tmp_path):
    """A woken worker can be placed on its caller's CPU and then only runs when the caller waits. With a CPU for
    every thread, the worker's affinity excludes the CPU the caller ran its last job on (all others allowed);
    bind_cores pins it to one CPU instead; LITE_KEEP_OFF_CALLER=0 leaves it unrestricted."""
    import json
    import subprocess
    import sys
    env = dict(os.environ)
    if mode == "off":
        env["LITE_KEEP_OFF_CALLER"] = "0"
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _AFFINITY_PROBE, tests_dir, str(tmp_path),
                           "1" if mode == "bind_cores" else "0"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    allowed = set(report["allowed"])
    others = [set(m) for tid, m in report["masks"].items() if int(tid) != report["main"]]
    restricted = [m for m in others if m != allowed]
    if mode == "default":
        assert any(len(allowed - m) == 1 and m < allowed for m in restricted), report
    elif mode == "bind_cores":
        assert any(len(m) == 1 for m in restricted), report
    else:
        assert restricted == [], report


def test_context_rejects_unknown_settings():
    """Settings are on Context.cpu (thread_num, bind_cores, precision_mode): a misspelt or misplaced one raises
    instead of being silently ignored."""
    import lite
    ctx = lite.Context()
    ctx.cpu.bind_cores = True
    with pytest.raises(AttributeError):
        ctx.bind_cores = True
    with pytest.raises(AttributeError):
        ctx.cpu.thread_count = 2


@pytest.mark.parametrize("n,grain,threads,expected_chunks", [
    (14, 1, 2, 14),      # up to 16 grains a thread: every grain its own chunk (14 GEMM column blocks: 7 each)
    (32, 1, 2, 32),
    (33, 1, 2, 8),       # beyond: four chunks a thread (of 4 or 5 grains)
    (1000, 1, 2, 8),
    (1000, 100, 3, 10),  # 10 grains for 3 threads: each grain a chunk
    (7, 4, 2, 2),        # ranges stay multiples of the grain, the last one short
    (5, 8, 2, 1),        # one grain or less: the caller runs it whole
])
def test_thread_pool_chunking(n, grain, threads, expected_chunks):
    """ParallelFor hands out whole grains, covers [0, n) exactly once, and splits small counts of grains one grain a
    chunk so that the threads' fixed shares are equal (7 chunks of 2 made shares of 3 and 4 chunks)."""
    from lite import _lite
    ranges = _lite.thread_pool_chunks(n, grain, threads)
    assert len(ranges) == expected_chunks
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    for (b0, e0), (b1, _) in zip(ranges, ranges[1:]):
        assert e0 == b1
    for b, e in ranges:
        assert b < e and b % grain == 0 and (e - b) % grain == 0 or e == n
    grains = [(e - b + grain - 1) // grain for b, e in ranges]
    assert max(grains) - min(grains) <= 1   # dealt evenly


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's resident set size")
def test_gather_table_is_resident_before_the_first_run(tmp_path):
    """An embedding-like table read in place from the file mapping has its pages mapped when the model is prepared,
    not faulted in row by row during runs."""
    rows, width = 16384, 1024   # 64 MiB of float32
    table = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)], "embed",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
                              [numpy_helper.from_array(table, "table")])
    path = convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path))
    del table

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before = rss()
    m = load(path)
    ids = np.array([5, rows - 1], np.int64)
    y = m.predict([ids])[0].get_data_to_numpy()
    grown = rss() - before
    want = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)[ids]
    np.testing.assert_array_equal(y, want)
    assert grown >= 0.9 * rows * width * 4, grown
