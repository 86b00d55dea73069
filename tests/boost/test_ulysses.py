"""Ulysses sequence parallelism on CPU with the gloo backend, in spawned processes (world size 2 and 4): the
all-to-all pair is the identity, sharded attention equals single-process attention (divisible and padded
sequences, grouped-query heads, the RainFusion kernel), four all-to-alls per self-attention, clear errors."""
from __future__ import annotations

import contextlib
import os
import sys
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lite_boost.parallel import gather_sequence, heads_to_seq, seq_to_heads, shard_sequence, ulysses_attention


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ranks fork from one forkserver that imported torch, diffusers and the test's module once (a fresh interpreter per
# rank spent ~3 s of each test importing them). The server has run no torch op, so it holds no OpenMP threads to fork.
_PRELOADED = ["torch", "torch.distributed", "diffusers", "transformers", "lite_boost", "lite_boost.parallel"]


def spawn(fn, world: int, *args) -> None:
    context = mp.get_context("forkserver")
    if fn.__module__ not in _PRELOADED:   # honoured until the server starts: at the first spawn of the session
        _PRELOADED.append(fn.__module__)
        context.set_forkserver_preload(_PRELOADED)
    mp.start_processes(_entry, args=(world, free_port(), fn, args), nprocs=world, join=True,
                       start_method="forkserver")


def _entry(rank: int, world: int, port: int, fn, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()
    # Passed: leave without the interpreter's teardown, where gloo's threads have occasionally aborted a
    # finished rank ("terminate called without an active exception", 2 of ~5 CI runs) after its checks passed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def count_all_to_all():
    """Records each dist.all_to_all_single call (a list that grows) while the block runs."""
    calls = []
    real = dist.all_to_all_single

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    dist.all_to_all_single = counted
    try:
        yield calls
    finally:
        dist.all_to_all_single = real


def _round_trip(rank, world):
    torch.manual_seed(rank)
    x = torch.randn(2, 5, 4 * world, 8)
    y = seq_to_heads(x)
    assert y.shape == (2, 5 * world, 4, 8)
    torch.testing.assert_close(heads_to_seq(y), x, rtol=0, atol=0)


def _attention_matches(rank, world, seq, hq, hkv, sparse):
    torch.manual_seed(0)   # the same full tensors on every rank; each keeps its shard
    q, k, v = torch.randn(1, seq, hq, 16), torch.randn(1, seq, hkv, 16), torch.randn(1, seq, hkv, 16)
    want = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                            enable_gqa=hq != hkv).transpose(1, 2)
    (qs, length), (ks, _), (vs, _) = (shard_sequence(t) for t in (q, k, v))
    with count_all_to_all() as calls:
        attention = None
        if sparse:   # every tile of the full sequence through the RainFusion kernel
            from lite_boost.ops import rain_fusion_attention

            def attention(q_, k_, v_):
                blocks = -(-q_.shape[1] // 64)
                idx = torch.arange(blocks).expand(blocks, q_.shape[2], blocks).contiguous()
                out, _ = rain_fusion_attention(q_, k_, v_, idx, torch.full((blocks, q_.shape[2]), blocks),
                                               block_shape=(64, 64), q_input_layout="BSND")
                return out
        out = ulysses_attention(qs, ks, vs, length=length, attention=attention)
    assert len(calls) == 4
    torch.testing.assert_close(gather_sequence(out, length), want, atol=1e-5, rtol=1e-5)


def _bad_heads(rank, world):
    with pytest.raises(ValueError, match="divide by the world size"):
        ulysses_attention(torch.randn(1, 4, 2 * world + 1, 8), torch.randn(1, 4, 2 * world + 1, 8),
                          torch.randn(1, 4, 2 * world + 1, 8))


def _one_rank_fails(rank, world):
    if rank == 1:
        raise RuntimeError("rank 1 broke")
    seq_to_heads(torch.randn(1, 2, 2 * world, 4))   # would wait for rank 1 forever


# Process start-up (torch import) dominates: each world size runs its cases in one spawn.
CASES = {2: [(96, 4, 4, False), (97, 4, 2, False), (150, 4, 4, True)], 4: [(130, 8, 4, False)]}


def _all_cases(rank, world):
    _round_trip(rank, world)
    for case in CASES[world]:
        _attention_matches(rank, world, *case)
    _bad_heads(rank, world)


@pytest.mark.parametrize("world", [2, 4])
def test_round_trip_and_sharded_attention_equal_single_process(world):
    """Divisible (96) and padded (97, 130, 150) sequences, grouped-query heads, dense and RainFusion kernels."""
    spawn(_all_cases, world)


def test_a_failing_rank_fails_the_run_without_hanging():
    """Whichever process the launcher reports first: rank 1's own error, or rank 0's collective failing because
    its peer is gone. Either way the run ends instead of waiting forever."""
    with pytest.raises(Exception, match="rank 1 broke|Connection reset|Connection closed|peer"):
        spawn(_one_rank_fails, 2)
