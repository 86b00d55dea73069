"""The attention kernel reading keys and values through block tables (a paged KV cache), each sample's queries the
last of its positions (decode steps and prefill chunks in one call), against dense NumPy attention."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from lite import _lite

rng = np.random.default_rng(33)


def reference(q, k, v, causal_from_end):
    """q [hq, sq, d], k/v [hkv, skv, d] of one sample: softmax(q k^T / sqrt(d)) v, float64."""
    hq, sq, d = q.shape
    group = hq // k.shape[0]
    kk, vv = np.repeat(k, group, 0).astype(np.float64), np.repeat(v, group, 0).astype(np.float64)
    s = q.astype(np.float64) @ kk.transpose(0, 2, 1) / np.sqrt(d)
    if causal_from_end:
        offset = k.shape[1] - sq
        allowed = np.arange(k.shape[1])[None, :] <= np.arange(sq)[:, None] + offset
        s = np.where(allowed, s, -np.inf)
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ vv


def paged_attention(q_rows, cache_k, cache_v, tables, q_lens, kv_lens, hq, hkv, causal, threads=1, **extra):
    """q_rows [sum q_lens, hq, d] (TND); cache_* [num_blocks, hkv, block_size, d]; tables [batch, blocks_per_seq]."""
    d, dv = q_rows.shape[-1], cache_v.shape[-1] - (4 if extra.get("kv_elem") == 3 else 0)
    nb, _, bs, _ = cache_k.shape
    rk, rv = cache_k.shape[-1], cache_v.shape[-1]   # a cache row's elements (int8 rows: + the scale's 4 bytes)
    out = np.zeros((q_rows.shape[0], hq, dv), np.float32)
    tables = np.ascontiguousarray(tables, np.int64)
    spec = dict(batch=len(q_lens), q_heads=hq, kv_heads=hkv, q_len=max(q_lens), kv_len=max(kv_lens), head_dim=d,
                v_dim=dv, elem=0, scale=1.0 / np.sqrt(d), causal=causal, causal_from_end=causal,
                q=q_rows.ctypes.data, q_strides=[0, d, hq * d],
                k=cache_k.ctypes.data, k_strides=[hkv * bs * rk, bs * rk, rk],
                v=cache_v.ctypes.data, v_strides=[hkv * bs * rv, bs * rv, rv],
                out=out.ctypes.data, out_strides=[0, out.shape[-1], hq * out.shape[-1]],
                q_lens=list(q_lens), kv_lens=list(kv_lens), kv_block_table=tables.ctypes.data, kv_block_size=bs,
                kv_blocks_per_seq=tables.shape[1], kv_num_blocks=nb, **extra)
    _lite.attention(spec, threads)
    return out


@pytest.mark.parametrize("block_size", [16, 5])
@pytest.mark.parametrize("threads", [1, 2])
def test_mixed_batch_through_block_tables(block_size, threads):
    hq, hkv, d = 4, 2, 16
    kv_lens, q_lens = [37, 1, 300, 9], [37, 1, 1, 4]        # a prompt, a first decode, a long decode, a chunk
    per_seq = max(-(-n // block_size) for n in kv_lens)
    num_blocks = sum(-(-n // block_size) for n in kv_lens) + 3
    cache_k = rng.standard_normal((num_blocks, hkv, block_size, d)).astype(np.float32)
    cache_v = rng.standard_normal((num_blocks, hkv, block_size, d)).astype(np.float32)
    order = rng.permutation(num_blocks)                      # blocks scattered through the cache
    tables, used = np.full((4, per_seq), -1, np.int64), 0
    for b, n in enumerate(kv_lens):
        need = -(-n // block_size)
        tables[b, :need] = order[used:used + need]
        used += need
    q_rows = rng.standard_normal((sum(q_lens), hq, d)).astype(np.float32)
    got = paged_attention(q_rows, cache_k, cache_v, tables, q_lens, kv_lens, hq, hkv, causal=True, threads=threads)
    start = 0
    for b, (sq, skv) in enumerate(zip(q_lens, kv_lens)):
        rows = [tables[b, r // block_size] for r in range(skv)]
        k = np.stack([cache_k[blk, :, r % block_size] for r, blk in enumerate(rows)], 1)   # [hkv, skv, d]
        v = np.stack([cache_v[blk, :, r % block_size] for r, blk in enumerate(rows)], 1)
        want = reference(q_rows[start:start + sq].transpose(1, 0, 2), k, v, causal_from_end=True)
        np.testing.assert_allclose(got[start:start + sq].transpose(1, 0, 2), want, rtol=1e-4, atol=1e-5)
        start += sq


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("block_size", [16, 5])
@pytest.mark.parametrize("threads", [1, 2])
def test_long_causal_prompts_through_block_tables(block_size, threads, bf16):
    """Prompt steps of 128+ queries take the causal tiling (128-key tiles, 64-query blocks): whole prompts, one
    continuing a 90-token past (its query blocks off the key tiles' boundaries), and a short chunk beside them."""
    if bf16 and "avx512_bf16" not in open("/proc/cpuinfo").read():
        pytest.skip("needs avx512_bf16")
    hq, hkv, d = 6, 2, 32
    kv_lens, q_lens = [300, 130, 290, 40], [300, 130, 200, 7]
    cache_k, cache_v, tables = scattered_cache(kv_lens, hkv, block_size, d, d, spare=3)
    q_rows = rng.standard_normal((sum(q_lens), hq, d)).astype(np.float32)
    got = paged_attention(q_rows, cache_k, cache_v, tables, q_lens, kv_lens, hq, hkv, causal=True, threads=threads,
                          bf16_products=bf16)
    start = 0
    for b, (sq, skv) in enumerate(zip(q_lens, kv_lens)):
        k = np.stack([cache_k[tables[b, r // block_size], :, r % block_size] for r in range(skv)], 1)
        v = np.stack([cache_v[tables[b, r // block_size], :, r % block_size] for r in range(skv)], 1)
        want = reference(q_rows[start:start + sq].transpose(1, 0, 2), k, v, causal_from_end=True)
        # bf16: keys, queries, probabilities and values rounded to 8 bits (outputs of magnitude ~1)
        rtol, atol = (3e-2, 1e-2) if bf16 else (1e-4, 1e-5)
        np.testing.assert_allclose(got[start:start + sq].transpose(1, 0, 2), want, rtol=rtol, atol=atol)
        start += sq


def test_a_block_outside_the_cache_is_refused():
    cache = np.zeros((2, 1, 4, 8), np.float32)
    with pytest.raises(ValueError, match=r"kv_block_table\[0, 1\] = 7 is outside the 2 blocks"):
        paged_attention(np.zeros((1, 1, 8), np.float32), cache, cache, np.array([[0, 7]]), [1], [6], 1, 1, True)


def test_more_keys_than_the_table_holds_is_refused():
    cache = np.zeros((2, 1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="more than its 1 blocks hold"):
        paged_attention(np.zeros((1, 1, 8), np.float32), cache, cache, np.array([[0]]), [1], [6], 1, 1, True)


def scattered_cache(kv_lens, hkv, block_size, d, dv, spare):
    """Random key/value caches [blocks, hkv, block_size, d / dv] with `spare` unused blocks, and block tables that
    give each sequence its blocks in a shuffled order."""
    per_seq = max(-(-n // block_size) for n in kv_lens)
    num_blocks = sum(-(-n // block_size) for n in kv_lens) + spare
    ck = rng.standard_normal((num_blocks, hkv, block_size, d)).astype(np.float32)
    cv = rng.standard_normal((num_blocks, hkv, block_size, dv)).astype(np.float32)
    order = rng.permutation(num_blocks)
    tables, used = np.zeros((len(kv_lens), per_seq), np.int64), 0
    for b, n in enumerate(kv_lens):
        need = -(-n // block_size)
        tables[b, :need] = order[used:used + need]
        used += need
    return ck, cv, tables


@pytest.mark.parametrize("threads", [1, 2])
def test_a_step_of_decodes_reads_the_cache_directly(threads):
    """Every sample with one query (a decode step): the direct path (no key-block packing), against NumPy, with
    lengths from 1 to 300 and grouped-query heads."""
    hq, hkv, d, block_size = 6, 2, 16, 8
    kv_lens = [37, 1, 300, 9, 16]
    cache_k, cache_v, tables = scattered_cache(kv_lens, hkv, block_size, d, d, spare=2)
    q_rows = rng.standard_normal((len(kv_lens), hq, d)).astype(np.float32)
    got = paged_attention(q_rows, cache_k, cache_v, tables, [1] * len(kv_lens), kv_lens, hq, hkv, causal=True,
                          threads=threads)
    for b, skv in enumerate(kv_lens):
        k = np.stack([cache_k[tables[b, r // block_size], :, r % block_size] for r in range(skv)], 1)
        v = np.stack([cache_v[tables[b, r // block_size], :, r % block_size] for r in range(skv)], 1)
        want = reference(q_rows[b:b + 1].transpose(1, 0, 2), k, v, causal_from_end=True)
        np.testing.assert_allclose(got[b:b + 1].transpose(1, 0, 2), want, rtol=1e-4, atol=1e-5)


def paged_reference(q_rows, cache_k, cache_v, tables, kv_lens, left_window=-1, softcap=0.0):
    """Per sample: the one query (its last position) against its keys read through the table, float64."""
    bs = cache_k.shape[2]
    hq, d = q_rows.shape[1], q_rows.shape[2]
    out = []
    for b, skv in enumerate(kv_lens):
        k = np.stack([cache_k[tables[b, r // bs], :, r % bs] for r in range(skv)], 1).astype(np.float64)
        v = np.stack([cache_v[tables[b, r // bs], :, r % bs] for r in range(skv)], 1).astype(np.float64)
        group = hq // k.shape[0]
        k, v = np.repeat(k, group, 0), np.repeat(v, group, 0)
        s = np.einsum("hd,hkd->hk", q_rows[b].astype(np.float64), k) / np.sqrt(d)
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if left_window >= 0:
            s[:, :max(0, skv - 1 - left_window)] = -np.inf
        p = np.exp(s - s.max(-1, keepdims=True))
        out.append(np.einsum("hk,hkd->hd", p / p.sum(-1, keepdims=True), v))
    return np.stack(out)


def bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even) and the values they hold."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def int8_rows(x):
    """Rows as int8 codes followed by their float32 scale's 4 bytes (max |x| / 127, round half to even), and the
    values they hold."""
    top = np.abs(x).max(-1, keepdims=True).astype(np.float32)
    inv = np.where(top > 0, np.float32(127) / np.where(top > 0, top, 1), 0).astype(np.float32)
    codes = np.rint(x * inv).astype(np.int8)
    scale = (top / np.float32(127)).astype(np.float32)
    return np.concatenate([codes, scale.view(np.int8)], axis=-1), codes.astype(np.float32) * scale


@pytest.mark.parametrize("hq,hkv,d,dv,block_size", [(20, 2, 80, 48, 32), (4, 4, 64, 64, 16), (24, 3, 128, 128, 5),
                                                    (7, 1, 40, 72, 16), (6, 2, 36, 20, 16)])
@pytest.mark.parametrize("cache", ["float32", "bfloat16", "float16", "int8"])
def test_decode_step_shapes_windows_and_cache_types(hq, hkv, d, dv, block_size, cache):
    """The direct decode path over head groups past 8 (in chunks), head sizes off multiples of 16 (and of 8), blocks shorter
    and longer than its 16-key runs, half-type and int8-row caches, a sliding window and soft-capping."""
    kv_lens = [45, 1, 130, 16]
    ck, cv, tables = scattered_cache(kv_lens, hkv, block_size, d, dv, spare=1)
    q_rows = rng.standard_normal((len(kv_lens), hq, d)).astype(np.float32)
    if cache == "bfloat16":
        (kbits, ck), (vbits, cv) = bf16_bits(ck), bf16_bits(cv)
        kv_elem = 2
    elif cache == "float16":
        kbits, vbits = ck.astype(np.float16), cv.astype(np.float16)
        ck, cv = kbits.astype(np.float32), vbits.astype(np.float32)
        kv_elem = 1
    elif cache == "int8":
        (kbits, ck), (vbits, cv) = int8_rows(ck), int8_rows(cv)
        kv_elem = 3
    else:
        kbits, vbits, kv_elem = ck, cv, 0
    for window, softcap in ((-1, 0.0), (20, 0.0), (-1, 2.0)):
        got = paged_attention(q_rows, kbits, vbits, tables, [1] * len(kv_lens), kv_lens, hq, hkv, causal=True,
                              kv_elem=kv_elem, left_window=window, softcap=softcap)
        want = paged_reference(q_rows, ck, cv, tables, kv_lens, window, softcap)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5, err_msg=f"window {window} softcap {softcap}")


@pytest.mark.parametrize("threads", [1, 2])
def test_decode_heads_of_a_sequence_run_together_across_chunk_edges(threads):
    """A call runs its consecutive (sequence, head) tasks of one sequence block by block together; with 21 sequences of
    3 key/value heads two threads get chunks that start and end inside a sequence's heads."""
    hq, hkv, d, block_size = 6, 3, 32, 8
    kv_lens = rng.integers(1, 90, 21).tolist()
    ck, cv, tables = scattered_cache(kv_lens, hkv, block_size, d, d, spare=2)
    q_rows = rng.standard_normal((len(kv_lens), hq, d)).astype(np.float32)
    got = paged_attention(q_rows, ck, cv, tables, [1] * len(kv_lens), kv_lens, hq, hkv, causal=True, threads=threads)
    np.testing.assert_allclose(got, paged_reference(q_rows, ck, cv, tables, kv_lens), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_decode_kernels_of_lower_isas(isa):
    """The decode tests again in a process capped at `isa` (LITE_CPU_ISA): AVX2's per-key kernels and the portable
    loop, which CPUs without AVX-512 (or without AVX2) run, on this CPU too."""
    if isa == "avx2" and "avx2" not in open("/proc/cpuinfo").read().split():
        pytest.skip("the CPU has no AVX2")
    tests = [f"{__file__}::{name}" for name in ("test_decode_step_shapes_windows_and_cache_types",
                                                 "test_decode_heads_of_a_sequence_run_together_across_chunk_edges",
                                                 "test_a_step_of_decodes_reads_the_cache_directly")]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                          env={**os.environ, "LITE_CPU_ISA": isa}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-500:]


@pytest.mark.parametrize("threads", [1, 2])
def test_decode_step_with_batch_strided_queries(threads):
    """A decode step (one query a sample) given as [batch, 1, heads, dim] with batch strides and no q_lens reads
    sample b's query and writes its output b batch strides on, as TND with q_lens reads and writes row b (the decode
    path once took b * (batch stride + row stride) for both: past the buffer)."""
    hq, hkv, d, bs = 8, 2, 32, 16
    kv_lens = [23, 1, 40]
    per_seq = 3
    cache_k = rng.standard_normal((9, hkv, bs, d)).astype(np.float32)
    cache_v = rng.standard_normal((9, hkv, bs, d)).astype(np.float32)
    tables = rng.permutation(9).reshape(3, per_seq).astype(np.int64)
    q = rng.standard_normal((3, 1, hq, d)).astype(np.float32)
    want = paged_attention(q.reshape(3, hq, d), cache_k, cache_v, tables, [1, 1, 1], kv_lens, hq, hkv, causal=True,
                           threads=threads)
    out = np.full((3, 1, hq, d), np.nan, np.float32)
    spec = dict(batch=3, q_heads=hq, kv_heads=hkv, q_len=1, kv_len=max(kv_lens), head_dim=d, v_dim=d, elem=0,
                scale=1.0 / np.sqrt(d), causal=True, causal_from_end=True,
                q=q.ctypes.data, q_strides=[hq * d, d, hq * d],
                k=cache_k.ctypes.data, k_strides=[hkv * bs * d, bs * d, d],
                v=cache_v.ctypes.data, v_strides=[hkv * bs * d, bs * d, d],
                out=out.ctypes.data, out_strides=[hq * d, d, hq * d],
                kv_lens=kv_lens, kv_block_table=tables.ctypes.data, kv_block_size=bs, kv_blocks_per_seq=per_seq,
                kv_num_blocks=9)
    _lite.attention(spec, threads)
    np.testing.assert_array_equal(out.reshape(3, hq, d), want)
