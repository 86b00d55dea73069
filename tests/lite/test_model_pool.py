"""ModelParallelRunner (workers sharing one copy of the weights, predict from many threads), ModelGroup (weights
shared between files by content, one workspace for several models), predict into caller storage and inputs from torch
/ DLPack producers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from model_zoo.tiny import small_cnn
from parity import convert, load, run_ort

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp(seed: int = 0, batch: int | str = "N", width: int = 512, hidden: int = 1024) -> onnx.ModelProto:
    """x[batch, width] -> MatMul -> Relu -> MatMul: two weights of width x hidden floats (2 MB each by default)."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array((rng.standard_normal((width, hidden)) * 0.05).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((hidden, width)) * 0.05).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def convnet(channels: int = 256, size: int = 14) -> onnx.ModelProto:
    """Two 3x3 Convs of channels x channels (2.4 MB of weights each at 256): the Winograd kernels' packed forms."""
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.02).astype(np.float32), f"w{i}")
          for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], ws)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    d = tmp_path_factory.mktemp("pool_cnn")
    model = small_cnn()
    return model, convert(model, str(d))   # dynamic batch


def context(threads: int = 1, workers: int = 2) -> lite.Context:
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    ctx.parallel.workers_num = workers
    return ctx


def predict_from_threads(predict, count: int, threads: int) -> dict[int, np.ndarray]:
    """predict(i) for i in range(count), spread over `threads` threads running at once: {i: result}. An exception
    in any thread fails the test."""
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            for i in range(k, count, threads):
                got[i] = predict(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    pool = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    return got


def test_runner_matches_a_model_from_many_threads(cnn):
    """8 threads x 12 predicts of different batch sizes on 3 workers: every result equals the single Model's for the
    same input, bit for bit (same kernels, same threads per worker)."""
    model, path = cnn
    runner = lite.ModelParallelRunner()
    runner.build_from_file(path, context(workers=3))
    assert runner.workers_num == 3
    assert [i.name for i in runner.get_inputs()] == [model.graph.input[0].name]
    assert runner.get_inputs()[0].shape[0] == -1
    reference = load(path)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1 + i % 4, 3, 32, 32)).astype(np.float32) for i in range(96)]
    want = [reference.predict([x])[0].get_data_to_numpy() for x in inputs]
    got = predict_from_threads(lambda i: runner.predict([inputs[i]])[0].get_data_to_numpy(), len(inputs), 8)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[i], w)


def test_runner_against_onnxruntime_and_its_old_api(cnn):
    model, path = cnn
    runner = lite.ModelParallelRunner()
    runner.init(path, lite.RunnerConfig(context(workers=5), workers_num=2))
    assert runner.workers_num == 2
    assert str(runner) == f"model_path: {path}."
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    for _ in range(3):   # each worker in turn
        got = runner.predict({model.graph.input[0].name: x})[0].get_data_to_numpy()
        np.testing.assert_allclose(got, run_ort(model, {model.graph.input[0].name: x})[0], rtol=1e-4, atol=1e-5)


def test_runner_bad_input_frees_its_worker(cnn):
    """A refused predict gives its worker back: with one worker, the next predict still runs."""
    _, path = cnn
    runner = lite.ModelParallelRunner()
    runner.build_from_file(path, context(workers=1))
    with pytest.raises(ValueError, match="expected shape"):
        runner.predict([np.zeros((1, 4, 32, 32), np.float32)])
    with pytest.raises(TypeError, match="expected dtype float32"):
        runner.predict([np.zeros((1, 3, 32, 32), np.float64)])
    assert runner.predict([np.zeros((1, 3, 32, 32), np.float32)])[0].shape == [1, 10]


def test_runner_settings_and_errors(cnn, tmp_path):
    _, path = cnn
    runner = lite.ModelParallelRunner()
    with pytest.raises(RuntimeError, match="not built"):
        runner.get_inputs()
    with pytest.raises(FileNotFoundError):
        runner.build_from_file(str(tmp_path / "missing.ms"))
    with pytest.raises(ValueError, match="workers_num"):
        runner.build_from_file(path, context(workers=-1))
    bad = tmp_path / "bad.ms"
    bad.write_bytes(b"\0" * 300)
    with pytest.raises(ValueError, match="invalid .ms file"):
        runner.build_from_file(str(bad))
    with pytest.raises(AttributeError):
        context().parallel.worker_num = 2   # misspelt: refused, not ignored
    runner.build_from_file(path, context(workers=0))   # as many as the CPUs allow
    assert runner.workers_num == max(1, len(os.sched_getaffinity(0)))


RSS_PROBE = r"""
import json, sys
import numpy as np
import lite

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
probe = lite.Model(); probe.build_from_file(path)
x = np.ones(probe.get_inputs()[0].shape, np.float32); del probe
warm = lite.Model(); warm.build_from_file(path); warm.predict([x]); del warm   # libraries and first-use buffers
before = rss_kb()
if mode == "runner":
    ctx = lite.Context(); ctx.parallel.workers_num = n
    r = lite.ModelParallelRunner(); r.build_from_file(path, ctx)
    outs = [r.predict([x])[0].get_data_to_numpy() for _ in range(2 * n)]   # every worker runs
else:
    ms = []
    for _ in range(n):
        m = lite.Model(); m.build_from_file(path); ms.append(m)
    outs = [m.predict([x])[0].get_data_to_numpy() for m in ms]
assert all(np.array_equal(o, outs[0]) for o in outs)
print(json.dumps({"grown_kb": rss_kb() - before}))
"""


@pytest.mark.parametrize("kind", ["matmul", "conv", "int8_matmul"])
def test_runner_workers_share_one_copy_of_the_weights(tmp_path, kind):
    """RSS: 4 separate Models each hold their packed weights (MatMul panels, Winograd-transformed Conv filters, integer
    code panels); a runner's 4 workers hold one copy, so 4 workers cost about one Model plus their activation arenas."""
    model = convnet() if kind == "conv" else mlp(batch=4, width=512, hidden=1024)
    options = {}
    if kind == "int8_matmul":   # FULL_QUANT: integer MatMuls on int8 codes
        cfg = tmp_path / "q.cfg"
        cfg.write_text("[common_quant_param]\nquant_type=FULL_QUANT\nbit_num=8\n")
        options["config_file"] = str(cfg)
    path = convert(model, str(tmp_path), **options)
    weight_kb = {"matmul": 2 * 512 * 1024 * 4, "conv": 2 * 256 * 256 * 9 * 4, "int8_matmul": 2 * 512 * 1024}[kind] // 1024

    def grown(mode: str, n: int) -> int:
        out = subprocess.run([sys.executable, "-c", RSS_PROBE, path, mode, str(n)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])["grown_kb"]

    one, models4, runner4 = grown("models", 1), grown("models", 4), grown("runner", 4)
    assert one > weight_kb, one                               # at least the packed weights
    assert models4 > 3.5 * one, (models4, one)                # the cost being removed: a packed copy per Model
    # One copy for the four workers: the three workers past the first add their arenas only, under half of what three
    # more Models add (their packed weights and arenas; with ResNet-sized 14x14 Convs on F(2x2) Winograd the arenas
    # are a fifth of a Model, so "runner4 < 1.5 one" no longer measured the sharing).
    assert runner4 - one < 0.5 * (models4 - one), (runner4, models4, one)


def test_group_shares_equal_weights_between_files(tmp_path):
    """Two files of one network converted for different batch sizes (an LLM's prompt and decode graphs are the same
    case): with SHARE_WEIGHT their equal constants are packed once (the group counts them); a third model with other
    weights shares nothing; every member still computes its own result."""
    a_path = convert(mlp(batch=8), str(tmp_path), name="b8")
    b_path = convert(mlp(batch=1), str(tmp_path), name="b1")
    c_path = convert(mlp(seed=5, batch=1), str(tmp_path), name="other")
    group = lite.ModelGroup(lite.ModelGroupFlag.SHARE_WEIGHT)
    a, b, c = lite.Model(), lite.Model(), lite.Model()
    group.add_model([a, b, c])
    a.build_from_file(a_path)
    assert group.shared_weight_bytes == 0
    b.build_from_file(b_path)
    assert group.shared_weight_bytes == 2 * 512 * 1024 * 4
    c.build_from_file(c_path)
    assert group.shared_weight_bytes == 2 * 512 * 1024 * 4
    rng = np.random.default_rng(2)
    for model, onnx_model, batch in ((a, mlp(batch=8), 8), (b, mlp(batch=1), 1), (c, mlp(seed=5, batch=1), 1)):
        x = rng.standard_normal((batch, 512)).astype(np.float32)
        np.testing.assert_allclose(model.predict([x])[0].get_data_to_numpy(), run_ort(onnx_model, {"x": x})[0],
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="built already"):
        group.add_model([a])
    with pytest.raises(TypeError, match="all be"):
        group.add_model([lite.Model(), "x.ms"])


def test_group_shares_compressed_weights(tmp_path):
    """Weights stored compressed (fp16 here) are matched by their codes: shared, and still decoded correctly."""
    a_path = convert(mlp(batch=4), str(tmp_path), name="a", fp16=True)
    b_path = convert(mlp(batch=2), str(tmp_path), name="b", fp16=True)
    group = lite.ModelGroup(lite.ModelGroupFlag.SHARE_WEIGHT_WORKSPACE)
    a, b = lite.Model(), lite.Model()
    group.add_model([a, b])
    a.build_from_file(a_path)
    b.build_from_file(b_path)
    assert group.shared_weight_bytes == 2 * 512 * 1024 * 2
    x = np.random.default_rng(3).standard_normal((4, 512)).astype(np.float32)
    alone = load(a_path).predict([x])[0].get_data_to_numpy()
    np.testing.assert_array_equal(a.predict([x])[0].get_data_to_numpy(), alone)
    np.testing.assert_array_equal(b.predict([x[:2]])[0].get_data_to_numpy(),
                                  load(b_path).predict([x[:2]])[0].get_data_to_numpy())
    np.testing.assert_allclose(b.predict([x[:2]])[0].get_data_to_numpy(), alone[:2], rtol=1e-4, atol=1e-5)


def test_group_shares_one_workspace(cnn, tmp_path):
    """SHARE_WORKSPACE: members run on one arena sized for the largest plan so far; a member whose plan was laid out
    on the arena before another member grew it runs correctly on the new one."""
    model, path = cnn
    group = lite.ModelGroup()   # SHARE_WORKSPACE, MindSpore Lite's default
    assert group.flags == lite.ModelGroupFlag.SHARE_WORKSPACE
    small, large = lite.Model(), lite.Model()
    group.add_model([small, large])
    small.build_from_file(path)
    large.build_from_file(path)
    rng = np.random.default_rng(4)
    x_small = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    x_large = rng.standard_normal((8, 3, 32, 32)).astype(np.float32)
    name = model.graph.input[0].name
    want_small = run_ort(model, {name: x_small})[0]
    want_large = run_ort(model, {name: x_large})[0]
    np.testing.assert_allclose(small.predict([x_small])[0].get_data_to_numpy(), want_small, rtol=1e-4, atol=1e-5)
    small_arena = group.workspace_bytes
    assert small_arena > 0
    np.testing.assert_allclose(large.predict([x_large])[0].get_data_to_numpy(), want_large, rtol=1e-4, atol=1e-5)
    assert group.workspace_bytes > small_arena
    np.testing.assert_allclose(small.predict([x_small])[0].get_data_to_numpy(), want_small, rtol=1e-4, atol=1e-5)
    assert group.cal_max_size_of_workspace(lite.ModelType.MINDIR_LITE, lite.Context()) == group.workspace_bytes
    paths_group = lite.ModelGroup()
    paths_group.add_model([path, path])
    assert paths_group.cal_max_size_of_workspace() == 0   # dynamic batch: nothing planned until shapes are known


def test_predict_into_caller_storage(cnn):
    model, path = cnn
    m = load(path)
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = m.predict([x])[0].get_data_to_numpy().copy()
    out = np.full((2, 10), np.nan, np.float32)
    result = m.predict([x], [out])
    assert result[0].get_data_to_numpy() is out
    np.testing.assert_array_equal(out, want)
    # A Tensor holding storage is written into; one without data receives the result; an empty list is filled.
    holder = lite.Tensor("y", [2, 10], lite.DataType.FLOAT32, data=np.zeros((2, 10), np.float32))
    storage = holder.get_data_to_numpy()
    assert m.predict([x], [holder])[0] is holder and holder.get_data_to_numpy() is storage
    np.testing.assert_array_equal(storage, want)
    empty_tensor = m.get_outputs()
    m.predict([x], empty_tensor)
    np.testing.assert_array_equal(empty_tensor[0].get_data_to_numpy(), want)
    filled: list = []
    m.predict([x], filled)
    np.testing.assert_array_equal(filled[0].get_data_to_numpy(), want)
    # Storage of the wrong shape or dtype is refused before anything is written; so are read-only arrays.
    wrong = np.full((3, 10), 7.0, np.float32)
    with pytest.raises(ValueError, match=r"output '.*': the storage given is float32 \[3, 10\], the result is "
                                         r"float32 \[2, 10\]"):
        m.predict([x], [wrong])
    assert (wrong == 7.0).all()
    with pytest.raises(ValueError, match="the storage given is float64"):
        m.predict([x], [np.zeros((2, 10), np.float64)])
    frozen = np.zeros((2, 10), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable C-contiguous"):
        m.predict([x], [frozen])
    with pytest.raises(ValueError, match="has 1 outputs, got 2"):
        m.predict([x], [out, out])
    runner = lite.ModelParallelRunner()
    runner.build_from_file(path, context(workers=2))
    out2 = np.zeros((2, 10), np.float32)
    assert runner.predict([x], [out2])[0].get_data_to_numpy() is out2
    np.testing.assert_array_equal(out2, want)


def test_inputs_from_torch_and_dlpack(cnn):
    torch = pytest.importorskip("torch")
    model, path = cnn
    m = load(path)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    want = m.predict([x.numpy()])[0].get_data_to_numpy()
    np.testing.assert_array_equal(m.predict([x])[0].get_data_to_numpy(), want)
    np.testing.assert_array_equal(m.predict([x.requires_grad_()])[0].get_data_to_numpy(), want)
    np.testing.assert_array_equal(m.predict({model.graph.input[0].name: x.detach()})[0].get_data_to_numpy(), want)
    # In place: the array handed to the runtime is the tensor's memory.
    assert np.shares_memory(lite._host_array("x", x), x.detach().numpy())
    # A non-contiguous view is read correctly (the binding makes it contiguous).
    wide = torch.randn(2, 3, 32, 64, generator=torch.Generator().manual_seed(1))
    np.testing.assert_array_equal(m.predict([wide[..., ::2]])[0].get_data_to_numpy(),
                                  m.predict([np.ascontiguousarray(wide.numpy()[..., ::2])])[0].get_data_to_numpy())
    # bfloat16 arrives as its bits, as the runtime takes bfloat16 from NumPy.
    bits = lite._host_array("x", torch.tensor([1.0, -2.0], dtype=torch.bfloat16))
    assert bits.dtype == np.uint16 and bits.tolist() == [0x3F80, 0xC000]

    class Producer:   # any DLPack producer
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    np.testing.assert_array_equal(m.predict([Producer(x.detach().numpy())])[0].get_data_to_numpy(), want)
    with pytest.raises(TypeError, match="expected a numpy array, Tensor, torch tensor or DLPack producer"):
        m.predict([object()])
    with pytest.raises(TypeError, match="pass a numpy array, not list"):
        m.predict([[1.0, 2.0]])


def _thread_affinities() -> list[set[int]]:
    """Each thread of this process: the CPUs it may run on."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        out.append(os.sched_getaffinity(int(tid)))
    return out


def test_thread_affinity_settings(cnn):
    """thread_affinity_core_list pins the pool's workers to the cores named (the caller stays where it is); a core the
    process may not use is refused; inter_op_parallel_num above 1 warns and changes nothing."""
    _, path = cnn
    usable = sorted(os.sched_getaffinity(0))
    core = usable[-1]
    ctx = lite.Context()
    ctx.cpu.thread_num = 3
    ctx.cpu.thread_affinity_core_list = [usable[0], core]
    m = lite.Model()
    before = _thread_affinities()
    m.build_from_file(path, context=ctx)
    pinned = [a for a in _thread_affinities() if a == {core} or a == {usable[0]}]
    assert len(pinned) >= len([a for a in before if len(a) == 1]) + 2   # two workers pinned
    assert os.sched_getaffinity(0) == set(usable)                        # the caller untouched
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(m.predict([x])[0].get_data_to_numpy(),
                                  load(path).predict([x])[0].get_data_to_numpy())
    ctx.cpu.thread_affinity_core_list = [4095]
    with pytest.raises(ValueError, match="core 4095 is not one this process may run on"):
        lite.Model().build_from_file(path, context=ctx)
    ctx.cpu.thread_affinity_core_list = []
    ctx.cpu.thread_affinity_mode = 3
    with pytest.raises(ValueError, match="thread_affinity_mode"):
        lite.Model().build_from_file(path, context=ctx)
    ctx.cpu.thread_affinity_mode = 1
    ctx.cpu.inter_op_parallel_num = 2
    with pytest.warns(RuntimeWarning, match="inter_op_parallel_num=2"):
        m2 = lite.Model()
        m2.build_from_file(path, context=ctx)
    np.testing.assert_array_equal(m2.predict([x])[0].get_data_to_numpy(),
                                  load(path).predict([x])[0].get_data_to_numpy())
    runner = lite.ModelParallelRunner()
    ctx.cpu.inter_op_parallel_num = 1
    ctx.parallel.workers_num = 2
    runner.build_from_file(path, ctx)   # each worker pinned on its own stretch of the cores
    np.testing.assert_array_equal(runner.predict([x])[0].get_data_to_numpy(),
                                  load(path).predict([x])[0].get_data_to_numpy())


def test_shared_workspace_members_from_many_threads(cnn):
    """Members of a SHARE_WEIGHT_WORKSPACE group predicted from 4 threads at once, with batch sizes that make each
    grow the shared arena in turn: they run one at a time on it, and every result equals a lone model's."""
    model, path = cnn
    group = lite.ModelGroup(lite.ModelGroupFlag.SHARE_WEIGHT_WORKSPACE)
    members = [lite.Model() for _ in range(2)]
    group.add_model(members)
    for m in members:
        m.build_from_file(path)
    reference = load(path)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((1 + i % 6, 3, 32, 32)).astype(np.float32) for i in range(48)]
    want = [reference.predict([x])[0].get_data_to_numpy() for x in inputs]
    got = predict_from_threads(lambda i: members[i % 2].predict([inputs[i]])[0].get_data_to_numpy(), len(inputs), 4)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[i], w)
    assert group.shared_weight_bytes > 0 and group.workspace_bytes > 0
