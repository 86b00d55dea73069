"""Loads mutated copies of a .ms file (and runs those that load). Run in a subprocess by
test_bad_input.py so that a crash shows up as a non-zero exit code, with the last mutation printed.

    python fuzz_worker.py MODEL.ms SEED COUNT MODE     MODE: corrupt (checksum kept) | hostile (checksum fixed)
"""
from __future__ import annotations

import os
import resource
import struct
import sys
import tempfile
import zlib

import numpy as np

import lite

HEADER = struct.Struct("<8sHHIQQQQIIQ")


def mutate(data: bytearray, rng: np.random.Generator, fix_crc: bool) -> bytearray:
    fields = list(HEADER.unpack_from(data))
    graph_end = fields[4] + fields[5]
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        pos = int(rng.integers(0, graph_end))
        kind = rng.integers(0, 3)
        if kind == 0:
            out[pos] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            out[pos] = int(rng.integers(0, 256))
        else:
            out[pos] = 0xFF
    if fix_crc:
        f = list(HEADER.unpack_from(out))
        g0, g1 = f[4], f[4] + f[5]
        if g1 <= len(out):
            f[8] = zlib.crc32(bytes(out[g0:g1])) & 0xFFFFFFFF
            HEADER.pack_into(out, 0, *f)
    return out


def main() -> None:
    path, seed, count, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    # Hostile shapes may ask for absurd memory: that must be a clean MemoryError, never an OOM kill.
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    base = bytearray(open(path, "rb").read())
    rng = np.random.default_rng(seed)
    outcomes = {"rejected": 0, "loaded": 0, "ran": 0}
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "m.ms")
        for i in range(count):
            data = mutate(base, rng, mode == "hostile")
            with open(target, "wb") as f:
                f.write(data)
            print(f"mutation {i}", flush=True)
            model = lite.Model()
            try:
                model.build_from_file(target)
            except (ValueError, TypeError, NotImplementedError, RuntimeError, MemoryError):
                outcomes["rejected"] += 1
                continue
            outcomes["loaded"] += 1
            try:
                feeds = []
                for t in model.get_inputs():
                    shape = [d if d >= 0 else 2 for d in t.shape]
                    if np.prod(shape, dtype=np.float64) > 1e7:
                        raise MemoryError("mutated input shape too large to feed")
                    feeds.append(np.ones(shape, dtype=lite._lite.numpy_dtype(t.dtype)))
                model.predict(feeds)
                outcomes["ran"] += 1
            except (ValueError, TypeError, NotImplementedError, RuntimeError, MemoryError):
                pass
    print("outcomes", outcomes, flush=True)


if __name__ == "__main__":
    main()
