"""What every checkpoint container gives the graph builders: tensor names, shapes and source dtypes, each tensor
as a `DeferredArray` read from a memory mapping (nothing loaded up front), and float32 arrays of small tensors."""
from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from converter.deferred import DeferredArray
from converter.ir import ConverterError

F32 = np.dtype(np.float32)
PAGE = mmap.PAGESIZE


@dataclass
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str                          # the source's element type: float32, float16, bfloat16, float64, int64, ...
    file: str                           # for messages
    view: Callable[[], np.ndarray]      # the stored values, shaped (bfloat16 as uint16), zero-copy where possible
    release: Callable[[], None] | None = None
    # GGUF Q4_0 matrices: (scales [rows, cols / 32], codes [rows, cols] int8 in [-8, 7]) as the file holds them, so an
    # int4 graph stores them as they are instead of dequantising and quantising again
    int4_blocks: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None


def to_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values (bfloat16 given as uint16) as float32."""
    if dtype == "bfloat16":   # the bits, widened and shifted in one pass
        return np.left_shift(np.asarray(values, np.uint16), 16, dtype=np.uint32).view(np.float32)
    return np.asarray(values).astype(np.float32, copy=False)   # float32 stays a view of the mapping


FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


class Checkpoint(Mapping):
    """A read-only mapping name -> float32 array over one or more checkpoint files (`checkpoint[name]` loads that
    tensor; `deferred(name)` reads it later, block by block)."""

    kind = "checkpoint"

    def __init__(self, infos: dict[str, TensorInfo], closers: list[Callable[[], None]], description: str):
        self._infos, self._closers, self.description = infos, closers, description

    # -- Mapping --------------------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> np.ndarray:
        info = self.info(name)
        return to_float32(info.view(), info.dtype).reshape(info.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def __contains__(self, name) -> bool:
        return name in self._infos

    # -- lazy access ----------------------------------------------------------------------------------------------
    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise ConverterError(f"the checkpoint ({self.description}) has no tensor '{name}'") from None

    def deferred(self, name: str, index: int | None = None) -> DeferredArray:
        """The tensor (or its slice `index` along the first axis) as float32, read when written."""
        info = self.info(name)
        if info.dtype not in FLOAT_DTYPES:
            raise ConverterError(f"tensor '{name}' in {info.file} is {info.dtype}, a float type was expected")
        shape = info.shape if index is None else info.shape[1:]
        if index is not None and not 0 <= index < info.shape[0]:
            raise ConverterError(f"tensor '{name}' in {info.file}: index {index} of {info.shape[0]}")
        dtype, view = info.dtype, info.view

        def source():
            v = view()
            return v if index is None else v[index]

        def rows(r0, r1):
            return to_float32(source()[r0:r1], dtype)

        columns = (lambda c0, c1: to_float32(source()[:, c0:c1], dtype)) if len(shape) == 2 else None
        label = f"'{name}' in {os.path.basename(info.file)}" + ("" if index is None else f" [{index}]")
        d = DeferredArray(shape, rows, info.release, label, columns)
        if dtype in ("bfloat16", "float16"):   # stored in that precision too: the bits are copied, not re-rounded
            d.raw_dtype, d.raw_rows = dtype, (lambda r0, r1: source()[r0:r1])
        if info.int4_blocks is not None and index is None:
            d.int4_source = ("rows", info.int4_blocks)
        return d

    def close(self) -> None:
        for c in self._closers:
            c()
        self._closers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MappedFile:
    """One file mapped read-only; `release(start, length)` drops those pages from this process (they stay in the
    page cache), so a converter's resident memory holds the tensor being written, not every tensor written so far."""

    def __init__(self, path: str):
        self.path = path
        self.size = os.path.getsize(path)
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None

    def array(self, offset: int, dtype: np.dtype, count: int) -> np.ndarray:
        if self.map is None:
            return np.empty(0, dtype)
        return np.frombuffer(self.map, dtype=dtype, count=count, offset=offset)

    def release(self, start: int, length: int) -> None:
        if self.map is None or length <= 0 or not hasattr(mmap, "MADV_DONTNEED"):
            return
        begin = start // PAGE * PAGE
        end = min(self.size, start + length)
        try:
            self.map.madvise(mmap.MADV_DONTNEED, begin, end - begin)
        except (OSError, ValueError):
            pass   # only a hint

    def close(self) -> None:
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:   # a view is still alive somewhere; the mapping goes with it
                pass
