"""Constants read when the writer stores them, and how they are stored.

A checkpoint frontend does not load a model: each weight becomes a `DeferredArray` (its shape, and a function that
reads a range of its rows from the checkpoint's memory-mapped file, transposed or sliced as the graph needs), and the
writer encodes and writes it a block of rows at a time (`encode_chunks`). Converting a model then needs memory for
one tensor's source pages and one block, never for the whole model. `StoragePlan` is the encoding chosen for a
deferred constant (float32, bfloat16 / float16 halves, int8 / int4 codes): the same bytes `quantization.encoding`
writes for the whole array at once."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np


F32 = np.dtype(np.float32)
CHUNK_BYTES = 4 << 20    # float32 bytes of one block of rows (the integer encoders' temporaries are ~8x that)


class DeferredArray:
    """A float32 array of `shape` whose rows [r0, r1) `read(r0, r1)` returns (float32, C order); `release()` lets go
    of whatever the source holds for it (a mapping's pages) once written."""

    def __init__(self, shape: tuple[int, ...], read: Callable[[int, int], np.ndarray],
                 release: Callable[[], None] | None = None, source: str = "",
                 columns: Callable[[int, int], np.ndarray] | None = None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = F32
        self._read, self._release = read, release
        self._columns = columns   # a matrix's columns [c0, c1) as float32 [rows, c1 - c0], if the source can
        self.source = source      # where the values come from, for error messages

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * 4)

    def rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) as float32; the source's pages are let go after each read (a transpose's band of columns
        touches all of them), so a block's read holds at most one tensor's source in memory."""
        block = np.ascontiguousarray(self._read(r0, r1), F32)
        self.release()
        want = (r1 - r0,) + self.shape[1:]
        if block.shape != want:
            raise ValueError(f"{self.source}: read {block.shape} for rows [{r0}, {r1}), expected {want}")
        return block

    def materialize(self) -> np.ndarray:
        if not self.shape:
            return np.asarray(self._read(0, 1), F32).reshape(())
        return self.rows(0, self.shape[0])

    def release(self) -> None:
        if self._release is not None:
            self._release()

    def __repr__(self) -> str:
        return f"DeferredArray({self.shape}, {self.source!r})"

    # -- the usual derived views (each still deferred) ----------------------------------------------------------
    @staticmethod
    def of(array: np.ndarray, source: str = "") -> "DeferredArray":
        a = np.asarray(array)
        return DeferredArray(a.shape, lambda r0, r1: a[r0:r1].astype(F32, copy=False), source=source,
                             columns=(lambda c0, c1: a[:, c0:c1].astype(F32)) if a.ndim == 2 else None)

    @property
    def T(self) -> "DeferredArray":
        """The transpose of a matrix: output rows are source columns (each block reads a band of columns)."""
        if self.ndim != 2:
            raise ValueError(f"{self.source}: transpose of a rank-{self.ndim} array")
        columns, src = self._columns, self

        def read(r0, r1):
            return (columns(r0, r1) if columns is not None else src.materialize()[:, r0:r1]).T

        def back(c0, c1):   # the transpose's columns are the source's rows
            return src.rows(c0, c1).T
        return DeferredArray((self.shape[1], self.shape[0]), read, self._release, self.source + " (transposed)", back)


def chunk_rows(shape: tuple[int, ...], multiple: int = 1) -> int:
    """Rows per block: about CHUNK_BYTES of float32, a multiple of `multiple` (and even, for nibble pairs)."""
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * 4)
    step = max(multiple, 2)
    return max(step, CHUNK_BYTES // row_bytes // step * step)


@dataclass(frozen=True)
class StoragePlan:
    """How a float32 constant is stored: "float32", "bfloat16", "float16", or "int" codes of `bits` (8 / 4,
    symmetric) with a scale per index along `axis` (group_size 0) or per block of `group_size` along it."""
    storage: str
    bits: int = 8
    axis: int = -1
    group_size: int = 0

    def __post_init__(self):
        if self.storage not in ("float32", "bfloat16", "float16", "int"):
            raise ValueError(f"storage {self.storage!r}")
        if self.storage == "int" and (self.bits not in (8, 4) or self.axis < 0):
            raise ValueError(f"integer storage needs bits 8/4 and an axis, got {self}")


def encode_chunks(values: DeferredArray | np.ndarray, plan: StoragePlan | None
                  ) -> tuple[Iterator[bytes], Callable[[], object]]:
    """The stored bytes of `values` block by block, and (called after the blocks are consumed) the StoredWeight
    describing them without its data (scales and layout; None for float32)."""
    # (imported here: the quantisation package imports the writer, which imports this module)
    from converter.quantization.encoding import StoredWeight, quantize, to_bfloat16, to_float16
    if not isinstance(values, DeferredArray):
        values = DeferredArray.of(values)
    shape = values.shape
    storage = plan.storage if plan is not None else "float32"
    meta: dict = {"stored": None}
    if not shape or shape[0] == 0:
        whole = values.materialize() if shape else values.materialize().reshape(())

        def one():
            yield _encode_whole(whole, plan, meta)
        return one(), lambda: meta["stored"]

    if storage in ("float32", "bfloat16", "float16"):
        def floats():
            step = chunk_rows(shape)
            for r0 in range(0, shape[0], step):
                block = values.rows(r0, min(shape[0], r0 + step))
                if storage == "float32":
                    yield memoryview(block).cast("B")   # written without a copy
                else:
                    s = to_bfloat16(block) if storage == "bfloat16" else to_float16(block)
                    yield s.data.tobytes()
            if storage != "float32":
                meta["stored"] = StoredWeight(storage, np.empty(0, np.uint16))
        return floats(), lambda: meta["stored"]

    ndim = len(shape)
    axis, group = plan.axis, plan.group_size
    if axis >= ndim:
        raise ValueError(f"{values.source}: quantisation axis {axis} of a rank-{ndim} array")
    if axis == 0 or (group and axis > 0):
        # Scales per leading-axis index, per block along the leading axis, or per block along a later axis: every
        # block of leading rows (a multiple of the group along axis 0) quantises on its own.
        multiple = group if (axis == 0 and group) else 1

        def independent():
            step = chunk_rows(shape, multiple)
            scales = []
            for r0 in range(0, shape[0], step):
                s = quantize(values.rows(r0, min(shape[0], r0 + step)), plan.bits, axis, group)
                scales.append(s.scale)
                yield s.data.tobytes()
            meta["stored"] = StoredWeight("int8", np.empty(0, np.uint8), np.concatenate(scales), None, axis,
                                          plan.bits, group)
        return independent(), lambda: meta["stored"]

    # A scale per index along a later axis (a MatMul weight's output columns): its maximum over every row first.
    def per_column():
        step = chunk_rows(shape)
        amax = None
        for r0 in range(0, shape[0], step):
            block = np.abs(values.rows(r0, min(shape[0], r0 + step)))
            m = np.moveaxis(block, axis, 0).reshape(shape[axis], -1).max(axis=1)
            amax = m if amax is None else np.maximum(amax, m)
        qmax = 2 ** (plan.bits - 1) - 1
        scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
        like = StoredWeight("int8", np.empty(0, np.uint8), scale, None, axis, plan.bits, 0)
        for r0 in range(0, shape[0], step):
            yield quantize(values.rows(r0, min(shape[0], r0 + step)), plan.bits, axis, 0, like=like).data.tobytes()
        meta["stored"] = like
    return per_column(), lambda: meta["stored"]


def _encode_whole(whole: np.ndarray, plan: StoragePlan | None, meta: dict) -> bytes:
    from converter.quantization.encoding import StoredWeight, quantize, to_bfloat16, to_float16
    if plan is None or plan.storage == "float32":
        return np.ascontiguousarray(whole, F32).tobytes()
    if plan.storage in ("bfloat16", "float16"):
        s = to_bfloat16(whole) if plan.storage == "bfloat16" else to_float16(whole)
    else:
        s = quantize(whole, plan.bits, plan.axis, plan.group_size)
    meta["stored"] = StoredWeight(s.storage, np.empty(0, np.uint8), s.scale, s.zero_point, s.axis, s.bits,
                                  s.group_size)
    return s.data.tobytes()


def hstack(parts: list[DeferredArray], source: str = "") -> DeferredArray:
    """Matrices of equal row counts side by side (each block reads the same rows of every part)."""
    rows = parts[0].shape[0]
    if any(p.ndim != 2 or p.shape[0] != rows for p in parts):
        raise ValueError(f"{source}: hstack of {[p.shape for p in parts]}")

    def read(r0, r1):
        return np.concatenate([p.rows(r0, r1) for p in parts], axis=1)

    def release():
        for p in parts:
            p.release()
    return DeferredArray((rows, sum(p.shape[1] for p in parts)), read, release,
                         source or " + ".join(p.source for p in parts))


def stored_values(values: DeferredArray | np.ndarray, plan: StoragePlan | None) -> np.ndarray:
    """The float32 values the runtime reads back from `values` stored by `plan` (for tests and reports)."""
    from converter.quantization.encoding import StoredWeight, decode
    shape = values.shape
    chunks, described = encode_chunks(values, plan)
    data = b"".join(chunks)
    stored = described()
    if stored is None:
        return np.frombuffer(data, np.float32).reshape(shape).copy()
    raw = np.frombuffer(data, np.uint16 if stored.storage in ("float16", "bfloat16") else np.uint8)
    full = StoredWeight(stored.storage, raw, stored.scale, stored.zero_point, stored.axis, stored.bits,
                        stored.group_size)
    return decode(full, shape)
