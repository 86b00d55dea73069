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
CHUNK_BYTES = 4 << 20    # float32 bytes of one block of rows (the integer encoders' temporaries are ~3x that)
SCATTER_BYTES = 64 << 20   # transposes at least this large (float32) are written by bands of source rows
BAND_BYTES = 16 << 20      # float32 bytes of one band of a scattered transpose


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
        # Row reads of a mapped source let its pages go after each block; a transpose's block reads a band of
        # columns across every page of the source, so it keeps them until the whole tensor is written, and reads
        # bands of at least 32 columns (each source row then gives 64+ contiguous bytes, not a few).
        self.release_per_block = True
        self.min_block_rows = 1

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * 4)

    def rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) as float32; the source's pages are let go after each read (a transpose's band of columns
        touches all of them), so a block's read holds at most one tensor's source in memory."""
        block = np.ascontiguousarray(self._read(r0, r1), F32)
        if self.release_per_block:
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
        # A source under SCATTER_BYTES is read once, as float32, and its blocks of columns are cut from that (a band
        # of columns converted from the mapping per block re-reads the whole source each time); larger ones are
        # scattered (ScatteredTranspose) or read by bands of columns.
        whole: dict = {}

        def read(r0, r1):
            if self.nbytes < SCATTER_BYTES:
                if "v" not in whole:
                    whole["v"] = src.materialize()
                return transposed(whole["v"][:, r0:r1])
            return (columns(r0, r1) if columns is not None else src.materialize()[:, r0:r1]).T

        def release():
            whole.clear()
            src.release()

        def back(c0, c1):   # the transpose's columns are the source's rows
            return src.rows(c0, c1).T
        t = DeferredArray((self.shape[1], self.shape[0]), read, release, self.source + " (transposed)", back)
        if self.raw_rows is not None and self.nbytes < SCATTER_BYTES:
            raw_whole: dict = {}
            source_raw = self.raw_rows

            def raw_read(r0, r1):
                if "v" not in raw_whole:
                    raw_whole["v"] = source_raw(0, self.shape[0])
                return transposed(raw_whole["v"][:, r0:r1])
            t.raw_dtype, t.raw_rows = self.raw_dtype, raw_read

            def release_all():
                raw_whole.clear()
                release()
            t._release = release_all
        t.release_per_block, t.min_block_rows = False, 32
        t.transpose_of = self
        if self.int4_source is not None and self.int4_source[0] == "rows":
            t.int4_source = ("columns", self.int4_source[1])
        return t

    transpose_of: "DeferredArray | None" = None   # set on a transpose: the matrix it reads
    # Codes and scales already in our int4 form (a GGUF Q4_0 matrix): ("rows" | "columns", () -> (scales, codes)),
    # "rows": blocks of 32 along this array's last axis; "columns": along its first (the transpose of such a source).
    int4_source: tuple | None = None
    # A source already in bfloat16 / float16: its rows as stored (uint16 bits / float16), for storing them as they are.
    raw_dtype: str | None = None
    raw_rows: Callable[[int, int], np.ndarray] | None = None

    def raw(self, storage: str) -> Callable[[int, int], np.ndarray] | None:
        """Rows [r0, r1) in `storage`'s bits without a float32 round trip, when the source holds them."""
        return self.raw_rows if self.raw_dtype == storage and self.raw_rows is not None else None


def transposed(a: np.ndarray, tile: int = 128) -> np.ndarray:
    """a.T, contiguous, copied tile by tile: NumPy's own strided copy of a large transpose runs ~3x slower (each
    output row walks the whole source down one column)."""
    rows, cols = a.shape
    out = np.empty((cols, rows), a.dtype)
    for r in range(0, rows, tile):
        for c in range(0, cols, tile):
            out[c:c + tile, r:r + tile] = a[r:r + tile, c:c + tile].T
    return out


def chunk_rows(shape: tuple[int, ...], multiple: int = 1, budget: int | None = None) -> int:
    """Rows per block: about `budget` (CHUNK_BYTES) of float32, a multiple of `multiple` (and even, for nibble
    pairs)."""
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * 4)
    step = max(multiple, 2)
    return max(step, (budget or CHUNK_BYTES) // row_bytes // step * step)


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


def _per_leading_row(shape: tuple[int, ...], plan: StoragePlan) -> int | None:
    """Scales per index of the leading axis when each block of leading rows quantises on its own (None: a scale per
    index of a later axis, which needs every row first). Axis 0 with groups counts per block of rows instead."""
    axis, group = plan.axis, plan.group_size
    if axis == 0:
        return int(np.prod(shape[1:], dtype=np.int64)) if group else 1
    if group:
        return int(np.prod(shape[1:axis], dtype=np.int64)) * -(-shape[axis] // group) * \
            int(np.prod(shape[axis + 1:], dtype=np.int64))
    return None


def _blocks(shape: tuple[int, ...], plan: StoragePlan | None, minimum: int = 1):
    integer = plan is not None and plan.storage == "int"
    multiple = plan.group_size if integer and plan.axis == 0 and plan.group_size else 1
    # the integer encoder's temporaries (int64 codes, a transposed copy, ...) are ~8x its block: smaller blocks
    step = chunk_rows(shape, multiple, CHUNK_BYTES // 4 if integer else CHUNK_BYTES)
    if step < minimum:
        step = -(-minimum // max(multiple, 2)) * max(multiple, 2)
    return [(r0, min(shape[0], r0 + step)) for r0 in range(0, shape[0], step)]


def _grouped_view(block: np.ndarray, plan: StoragePlan) -> tuple[np.ndarray, int] | None:
    """A 2-D block viewed so that each scale's values lie along one axis, without a copy: (view, that axis), or None
    for a layout this fast path does not cover (quantize() then does it)."""
    if block.ndim != 2:
        return None
    rows, cols = block.shape
    axis, g = plan.axis, plan.group_size
    if axis == 1 and g == 0:
        return block, 0                                   # a scale per column: its values down axis 0
    if axis == 0 and g == 0:
        return block, 1                                   # a scale per row
    if axis == 0 and g and rows % g == 0:
        return block.reshape(rows // g, g, cols), 1       # [blocks, g, cols]: scales [blocks, cols]
    if axis == 1 and g and cols % g == 0:
        return block.reshape(rows, cols // g, g), 2       # [rows, blocks, g]: scales [rows, blocks]
    return None


def _block_scales(block: np.ndarray, plan: StoragePlan) -> np.ndarray:
    """The scales quantize() chooses for the block (a scale per column: the block's column maxima, not yet scales)."""
    from converter.quantization.encoding import symmetric_scale, symmetric_scales
    grouped = _grouped_view(block, plan)
    if grouped is None:
        return symmetric_scales(block, plan.bits, plan.axis, plan.group_size)
    view, axis = grouped
    amax = np.abs(view).max(axis=axis)
    if plan.axis == 1 and plan.group_size == 0:
        return amax
    return symmetric_scale(amax, 2 ** (plan.bits - 1) - 1).reshape(-1)


def _block_codes(block: np.ndarray, plan: StoragePlan, scale: np.ndarray):
    """The stored codes of a block with the given scales, as quantize(..., like=) writes them."""
    from converter.quantization.encoding import StoredWeight, quantize
    grouped = _grouped_view(block, plan)
    if grouped is None or (plan.bits == 4 and block.size % 2):
        like = StoredWeight("int8", np.empty(0, np.uint8), scale, None, plan.axis, plan.bits, plan.group_size)
        return quantize(block, plan.bits, plan.axis, plan.group_size, like=like).data
    view, axis = grouped
    q = view / np.expand_dims(scale.reshape(np.delete(view.shape, axis)), axis)
    qmax = 2 ** (plan.bits - 1) - 1
    np.rint(q, out=q)
    np.clip(q, -qmax, qmax, out=q)
    codes = q.astype(np.int8).reshape(-1).view(np.uint8)   # element order: the block's rows
    if plan.bits == 8:
        return codes
    return (codes[0::2] & 0xF) | ((codes[1::2] & 0xF) << 4)


def _holds_int4(values, plan: StoragePlan | None) -> bool:
    source = getattr(values, "int4_source", None)
    return (source is not None and plan is not None and plan.storage == "int" and plan.bits == 4 and
            plan.group_size == 32 and (source[0], plan.axis) in (("rows", 1), ("columns", 0)))


def _direct_int4(values, plan: StoragePlan | None):
    """(scales in the stored order, () -> packed codes) when `values` already hold int4 codes of `plan`'s layout
    (a GGUF Q4_0 matrix, or its transpose), else None."""
    if not _holds_int4(values, plan):
        return None
    kind, blocks = values.int4_source
    scales, codes = blocks()
    if kind == "columns":   # the transpose: scales [blocks, N], codes [K, N]
        scales, codes = np.ascontiguousarray(scales.T), transposed(codes)

    def packed():
        flat = codes.reshape(-1).view(np.uint8)
        return (flat[0::2] & 0xF) | ((flat[1::2] & 0xF) << 4)
    return scales.reshape(-1), packed


def _transpose_scales(src: DeferredArray, plan: StoragePlan) -> np.ndarray | None:
    """The scales of src.T under `plan`, from src's own rows (no transposed copy): per output column = per source row,
    per output row = per source column, blocks along either. None where a layout is not covered."""
    from converter.quantization.encoding import symmetric_scale
    N, K = src.shape   # the transpose is [K, N]
    axis, g = plan.axis, plan.group_size
    qmax = 2 ** (plan.bits - 1) - 1
    if (axis == 0 and g and K % g) or (axis == 1 and g and N % g) or axis > 1:
        return None
    step = chunk_rows(src.shape, g if (axis == 1 and g) else 1)
    parts, colmax = [], None
    for m0 in range(0, N, step):
        block = np.abs(src.rows(m0, min(N, m0 + step)))          # [m, K]
        if axis == 1 and not g:
            parts.append(block.max(axis=1))                        # per source row
        elif axis == 0 and g:
            parts.append(block.reshape(block.shape[0], K // g, g).max(axis=2))   # [m, K/g]
        elif axis == 1 and g:
            parts.append(block.reshape(block.shape[0] // g, g, K).max(axis=1))   # [m/g, K]
        else:
            m = block.max(axis=0)                                  # per source column
            colmax = m if colmax is None else np.maximum(colmax, m)
    if colmax is not None:
        return symmetric_scale(colmax, qmax)
    amax = np.concatenate(parts)
    if axis == 0:          # [N, K/g] -> the transpose's [K/g blocks, N]
        amax = amax.T
    elif g:                # [N/g, K] -> [K, N/g]
        amax = amax.T
    return symmetric_scale(np.ascontiguousarray(amax), qmax).reshape(-1)


def describe(values: "DeferredArray | np.ndarray", plan: StoragePlan | None) -> tuple[int, object]:
    """The stored byte length of `values` under `plan` and its StoredWeight without data (scales, layout; None for
    float32), computed before any byte is written (the file's graph section, which holds the scales, comes first).
    Integer plans read the values once for their scales here."""
    from converter.quantization.encoding import StoredWeight, symmetric_scale, symmetric_scales
    if not isinstance(values, DeferredArray):
        values = DeferredArray.of(values)
    shape, n = values.shape, values.size
    storage = plan.storage if plan is not None else "float32"
    if storage == "float32":
        return 4 * n, None
    if storage in ("bfloat16", "float16"):
        return 2 * n, StoredWeight(storage, np.empty(0, np.uint16))
    if plan.axis >= len(shape):
        raise ValueError(f"{values.source}: quantisation axis {plan.axis} of a rank-{len(shape)} array")
    length = n if plan.bits == 8 else (n + 1) // 2
    direct = _direct_int4(values, plan)
    if direct is not None:
        return length, StoredWeight("int8", np.empty(0, np.uint8), direct[0], None, plan.axis, 4, 32)
    src = values.transpose_of
    if src is not None and (scale := _transpose_scales(src, plan)) is not None:
        src.release()
        values.release()
        return length, StoredWeight("int8", np.empty(0, np.uint8), scale, None, plan.axis, plan.bits, plan.group_size)
    if not shape or shape[0] == 0:
        scale = symmetric_scales(values.materialize(), plan.bits, plan.axis, plan.group_size)
    elif _per_leading_row(shape, plan) is not None:
        scale = np.concatenate([_block_scales(values.rows(r0, r1), plan)
                                for r0, r1 in _blocks(shape, plan, values.min_block_rows)])
    else:   # a scale per index of a later axis: its largest magnitude over every row
        amax = None
        for r0, r1 in _blocks(shape, plan, values.min_block_rows):
            block = values.rows(r0, r1)
            if len(shape) == 2:
                m = _block_scales(block, plan)   # (column maxima)
            else:
                m = np.moveaxis(np.abs(block), plan.axis, 0).reshape(shape[plan.axis], -1).max(axis=1)
            amax = m if amax is None else np.maximum(amax, m)
        scale = symmetric_scale(amax, 2 ** (plan.bits - 1) - 1)
    values.release()   # the scan touched the source: let its pages go until the values are written
    return length, StoredWeight("int8", np.empty(0, np.uint8), scale, None, plan.axis, plan.bits, plan.group_size)


def encode(values: "DeferredArray | np.ndarray", plan: StoragePlan | None, stored,
           release_after_write: bool = False) -> Iterator:
    """The stored bytes of `values` block by block (buffers), with the scales `describe` chose.
    `release_after_write`: after a float32 block that is a view of the mapped source (written without a copy),
    yield the source's release, for the writer to call once that block is on its way to disk."""
    from converter.quantization.encoding import quantize, to_bfloat16, to_float16
    if not isinstance(values, DeferredArray):
        values = DeferredArray.of(values)
    shape = values.shape
    storage = plan.storage if plan is not None else "float32"
    if not shape or shape[0] == 0:
        whole = values.materialize()
        if storage == "float32":
            yield whole.astype(np.float32).tobytes()
        elif storage in ("bfloat16", "float16"):
            yield (to_bfloat16(whole) if storage == "bfloat16" else to_float16(whole)).data.tobytes()
        else:
            yield quantize(whole, plan.bits, plan.axis, plan.group_size, like=stored).data.tobytes()
        return
    direct = _direct_int4(values, plan)
    if direct is not None:   # codes as the checkpoint holds them (one tensor's codes in memory)
        yield direct[1]()
        values.release()
        return
    per_row = _per_leading_row(shape, plan) if storage == "int" else None
    raw = values.raw(storage) if storage in ("bfloat16", "float16") else None
    for r0, r1 in _blocks(shape, plan, values.min_block_rows):
        if raw is not None:
            yield np.ascontiguousarray(raw(r0, r1)).reshape(-1).view(np.uint8)
            if values.release_per_block:
                values.release()
            continue
        block = values.rows(r0, r1)
        if storage == "float32":
            yield memoryview(block).cast("B")   # written without a copy
            if release_after_write and block.base is not None and values.release_per_block:
                # a view of the mapped checkpoint: its pages are let go once the writer has written them
                yield values.release
        elif storage in ("bfloat16", "float16"):
            yield (to_bfloat16(block) if storage == "bfloat16" else to_float16(block)).data
        else:
            if per_row is None:
                scale = stored.scale
            elif plan.axis == 0 and plan.group_size:
                g = plan.group_size
                scale = stored.scale[(r0 // g) * per_row:((r0 // g) + -(-(r1 - r0) // g)) * per_row]
            else:
                scale = stored.scale[r0 * per_row:r1 * per_row]
            yield _block_codes(block, plan, scale)


def encode_chunks(values: "DeferredArray | np.ndarray", plan: StoragePlan | None) -> tuple[Iterator, Callable]:
    """describe + encode: the stored bytes block by block, and the StoredWeight without data."""
    _, stored = describe(values, plan)
    return encode(values, plan, stored), lambda: stored


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
    d = DeferredArray((rows, sum(p.shape[1] for p in parts)), read, release,
                      source or " + ".join(p.source for p in parts))
    d.release_per_block = all(p.release_per_block for p in parts)
    d.min_block_rows = max(p.min_block_rows for p in parts)
    return d


def take_rows(src: DeferredArray, index, source: str = "") -> DeferredArray:
    """Rows `index` of `src`, in that order (a projection's rows regrouped: Qwen3.5's interleaved query / gate heads);
    a block reads the span of source rows it needs."""
    index = np.asarray(index, np.int64)
    if index.ndim != 1 or (len(index) and (index.min() < 0 or index.max() >= src.shape[0])):
        raise ValueError(f"{src.source}: row index out of [0, {src.shape[0]})")

    def read(r0, r1):
        want = index[r0:r1]
        lo = int(want.min())
        return src.rows(lo, int(want.max()) + 1)[want - lo]
    d = DeferredArray((len(index),) + src.shape[1:], read, src.release, source or f"{src.source} (rows)")
    d.release_per_block, d.min_block_rows = src.release_per_block, src.min_block_rows
    return d


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


class ScatteredTranspose:
    """A large transpose written without holding its source: each band of source rows [m0, m1) (read in order,
    its pages let go after it) is the output's columns [m0, m1) of every output row, written with pwrite at their
    offsets. The block-by-block transpose instead reads a band of source columns per block, every page of the source
    each time, so it keeps the whole source resident (a tied 151936 x 896 bfloat16 embedding: 272 MB). Covers
    float storage, int8 with a scale per output column and int4 in blocks along the output rows."""

    def __init__(self, values: DeferredArray, plan: StoragePlan | None):
        self.values, self.plan = values, plan
        self.source = values.transpose_of
        self.K, self.N = values.shape   # output rows (the source's columns), output columns (the source's rows)
        self.storage = plan.storage if plan is not None else "float32"
        self.stored = None

    @staticmethod
    def applies(values, plan: StoragePlan | None) -> bool:
        if not isinstance(values, DeferredArray) or values.transpose_of is None or values.nbytes < SCATTER_BYTES:
            return False
        if _holds_int4(values, plan):
            return False
        K, N = values.shape
        if plan is None or plan.storage in ("float32", "bfloat16", "float16"):
            return True
        if plan.bits == 8:
            return plan.axis == 1 and plan.group_size == 0
        # int4: whole bytes per output row's band: even columns; blocks along the output rows (or a scale per column)
        return N % 2 == 0 and ((plan.axis == 0 and plan.group_size > 0) or (plan.axis == 1 and plan.group_size == 0))

    def _bands(self):
        step = max(2, BAND_BYTES // (self.K * 4) // 2 * 2)
        return [(m0, min(self.N, m0 + step)) for m0 in range(0, self.N, step)]

    def describe(self) -> tuple[int, object]:
        """(stored length, StoredWeight without data): integer scales from one pass over the source's bands."""
        from converter.quantization.encoding import StoredWeight, symmetric_scale
        n = self.K * self.N
        if self.storage == "float32":
            return 4 * n, None
        if self.storage in ("bfloat16", "float16"):
            self.stored = StoredWeight(self.storage, np.empty(0, np.uint16))
            return 2 * n, self.stored
        plan = self.plan
        if plan.axis == 1:   # a scale per output column: per source row
            qmax = 2 ** (plan.bits - 1) - 1
            scale = np.concatenate([symmetric_scale(np.abs(self.source.rows(m0, m1)).max(axis=1), qmax)
                                    for m0, m1 in self._bands()])
        else:                # blocks of group_size output rows per column: [blocks, N]
            blocks = -(-self.K // plan.group_size)
            scale = np.empty((blocks, self.N), np.float32)
            for m0, m1 in self._bands():
                scale[:, m0:m1] = _block_scales(transposed(self.source.rows(m0, m1)), plan).reshape(blocks, m1 - m0)
            scale = scale.reshape(-1)
        self.source.release()
        self.stored = StoredWeight("int8", np.empty(0, np.uint8), scale, None, plan.axis, plan.bits, plan.group_size)
        return (n if plan.bits == 8 else n // 2), self.stored

    def write(self, fd: int, base: int) -> None:
        """Writes the stored bytes at file offset `base` (describe() first)."""
        import os

        from converter.quantization.encoding import to_bfloat16, to_float16
        plan, K, N = self.plan, self.K, self.N
        raw = self.source.raw(self.storage) if self.storage in ("bfloat16", "float16") else None
        for m0, m1 in self._bands():
            if raw is not None:   # stored as the source holds it: its bits transposed
                bits = transposed(np.ascontiguousarray(raw(m0, m1))).view(np.uint8).reshape(K, -1)
                self.source.release()
                for r in range(K):
                    os.pwrite(fd, bits[r], base + r * N * 2 + m0 * 2)
                continue
            out = transposed(self.source.rows(m0, m1))   # output rows x columns [m0, m1)
            if self.storage == "float32":
                rows, width, start = out.view(np.uint8).reshape(K, -1), 4, m0 * 4
            elif self.storage in ("bfloat16", "float16"):
                enc = to_bfloat16(out) if self.storage == "bfloat16" else to_float16(out)
                rows, width, start = enc.data.view(np.uint8).reshape(K, -1), 2, m0 * 2
            else:
                if plan.axis == 1:
                    scale = self.stored.scale[m0:m1]
                else:
                    blocks = -(-K // plan.group_size)
                    scale = self.stored.scale.reshape(blocks, N)[:, m0:m1].reshape(-1)
                rows = _block_codes(out, plan, np.ascontiguousarray(scale)).view(np.uint8).reshape(K, -1)
                width, start = (1, m0) if plan.bits == 8 else (0.5, m0 // 2)
            row_bytes = int(N * width)
            for r in range(K):
                os.pwrite(fd, rows[r], base + r * row_bytes + start)
        self.source.release()
