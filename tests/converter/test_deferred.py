"""Deferred constants (converter/deferred.py): encoded a block of rows at a time, every storage gives the bytes and
scales the whole-array encoders give, so the runtime decodes the same values; transposes and side-by-side stacks
read the right rows."""
from __future__ import annotations

import numpy as np
import pytest

from converter import deferred
from converter.deferred import DeferredArray, StoragePlan, encode_chunks, hstack, stored_values
from converter.quantization.encoding import decode, quantize, to_bfloat16, to_float16


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(deferred, "CHUNK_BYTES", 4096)   # many blocks even for small test arrays


def whole(values: np.ndarray, plan: StoragePlan | None) -> np.ndarray:
    if plan is None or plan.storage == "float32":
        return values
    if plan.storage == "bfloat16":
        return decode(to_bfloat16(values), values.shape)
    if plan.storage == "float16":
        return decode(to_float16(values), values.shape)
    return decode(quantize(values, plan.bits, plan.axis, plan.group_size), values.shape)


@pytest.mark.parametrize("plan", [None, StoragePlan("bfloat16"), StoragePlan("float16"),
                                  StoragePlan("int", 8, axis=1), StoragePlan("int", 8, axis=0),
                                  StoragePlan("int", 4, axis=0, group_size=32), StoragePlan("int", 4, axis=1, group_size=32),
                                  StoragePlan("int", 4, axis=1)], ids=str)
@pytest.mark.parametrize("shape", [(200, 72), (96, 33), (1, 64), (7,)])
def test_blocks_encode_like_the_whole_array(plan, shape):
    if plan is not None and plan.storage == "int" and plan.axis >= len(shape):
        pytest.skip("axis beyond rank")
    values = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    d = DeferredArray.of(values, "w")
    np.testing.assert_array_equal(stored_values(d, plan), whole(values, plan))
    chunks, described = encode_chunks(d, plan)
    data = b"".join(chunks)
    if plan is not None and plan.storage == "int":
        full = quantize(values, plan.bits, plan.axis, plan.group_size)
        assert data == full.data.tobytes()
        np.testing.assert_array_equal(described().scale, full.scale)


def test_transpose_and_hstack_read_the_right_rows():
    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    b = np.arange(60, 120, dtype=np.float32).reshape(6, 10)
    t = DeferredArray.of(a).T
    assert t.shape == (10, 6)
    np.testing.assert_array_equal(t.rows(3, 7), a.T[3:7])
    np.testing.assert_array_equal(t.T.materialize(), a)
    s = hstack([DeferredArray.of(a).T, DeferredArray.of(b).T])
    np.testing.assert_array_equal(s.materialize(), np.concatenate([a.T, b.T], axis=1))


def test_a_short_read_is_an_error():
    d = DeferredArray((4, 3), lambda r0, r1: np.zeros((1, 3), np.float32), source="'x' in f")
    with pytest.raises(ValueError, match="'x' in f"):
        d.rows(0, 4)


@pytest.mark.parametrize("plan", [None, StoragePlan("bfloat16"), StoragePlan("int", 8, axis=1),
                                  StoragePlan("int", 4, axis=0, group_size=32), StoragePlan("int", 4, axis=1)], ids=str)
def test_scattered_transpose_writes_the_same_file(plan, tmp_path, monkeypatch):
    """A large transpose written by bands of source rows (pwrite at each output row's offset) gives the file the
    block-by-block transpose gives, byte for byte."""
    from converter.ir import Graph, Tensor
    from converter.writer import write_ms

    source = np.random.default_rng(1).standard_normal((250, 96)).astype(np.float32)   # output [96, 250]

    def write(path):
        g = Graph()
        d = DeferredArray.of(source, "w").T
        g.tensors["w"] = Tensor("w", np.dtype(np.float32), list(d.shape), d, stored=plan)
        g.tensors["x"] = Tensor("x", np.dtype(np.float32), [1])
        g.inputs, g.outputs = ["x"], ["w"]
        return open(write_ms(g, str(path)).path, "rb").read()
    monkeypatch.setattr(deferred, "BAND_BYTES", 96 * 4 * 40)   # bands of 40 source rows
    monkeypatch.setattr(deferred, "SCATTER_BYTES", 1 << 40)
    blockwise = write(tmp_path / "a.ms")
    monkeypatch.setattr(deferred, "SCATTER_BYTES", 0)
    assert deferred.ScatteredTranspose.applies(DeferredArray.of(source).T, plan)
    assert write(tmp_path / "b.ms") == blockwise


def write_bf16_safetensors(path, name: str, values: np.ndarray) -> None:
    """A safetensors file with one BF16 tensor (NumPy has no bfloat16: the bits by hand)."""
    import json
    import struct
    bits = to_bfloat16(values).data.astype(np.uint16)
    header = json.dumps({name: {"dtype": "BF16", "shape": list(values.shape), "data_offsets": [0, bits.nbytes]}})
    header += " " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode() + bits.tobytes())


@pytest.mark.parametrize("scatter", [False, True])
def test_bfloat16_source_stored_as_bfloat16_copies_its_bits(scatter, tmp_path, monkeypatch):
    """A bf16 checkpoint tensor stored as bf16 is copied (transposed where asked), not widened and re-rounded: the
    same file as the float32 round trip gives."""
    from converter.frontends.checkpoint import open_safetensors
    from converter.ir import Graph, Tensor
    from converter.writer import write_ms

    values = np.random.default_rng(2).standard_normal((250, 96)).astype(np.float32)
    write_bf16_safetensors(tmp_path / "w.safetensors", "w", values)
    monkeypatch.setattr(deferred, "SCATTER_BYTES", 0 if scatter else 1 << 40)
    monkeypatch.setattr(deferred, "BAND_BYTES", 96 * 4 * 40)

    def write(path, keep_raw):
        ckpt = open_safetensors([str(tmp_path / "w.safetensors")])
        d = ckpt.deferred("w")
        if not keep_raw:
            d.raw_rows = None
        d = d.T
        assert (d.raw("bfloat16") is not None or d.transpose_of.raw("bfloat16") is not None) == keep_raw
        g = Graph()
        g.tensors["w"] = Tensor("w", np.dtype(np.float32), list(d.shape), d, stored=StoragePlan("bfloat16"))
        g.tensors["x"] = Tensor("x", np.dtype(np.float32), [1])
        g.inputs, g.outputs = ["x"], ["w"]
        data = open(write_ms(g, str(path)).path, "rb").read()
        ckpt.close()
        return data
    assert write(tmp_path / "raw.ms", True) == write(tmp_path / "widened.ms", False)


@pytest.mark.parametrize("plan", [StoragePlan("int", 8, axis=1), StoragePlan("int", 8, axis=0),
                                  StoragePlan("int", 4, axis=0, group_size=32), StoragePlan("int", 4, axis=1, group_size=32),
                                  StoragePlan("int", 4, axis=1), StoragePlan("bfloat16")], ids=str)
def test_transposes_encode_like_the_whole_array(plan):
    """Scales of a transpose found from its source's rows, blocks transposed tile by tile: as quantize() on the
    transposed array."""
    values = np.random.default_rng(3).standard_normal((192, 160)).astype(np.float32)
    d = DeferredArray.of(values, "w").T
    np.testing.assert_array_equal(stored_values(d, plan), whole(np.ascontiguousarray(values.T), plan))
