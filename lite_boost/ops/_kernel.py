"""Describes torch tensors to the lite runtime's fused attention kernel (`lite._lite.attention`): addresses and
element strides, so the kernel reads them in place."""
from __future__ import annotations

import torch

ELEM = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def rows_view(t: torch.Tensor, layout: str) -> tuple[int, int, int, tuple[int, int, int]]:
    """(batch, heads, rows, (batch, head, row) element strides) of a BNSD, BSND or TND operand."""
    if layout == "BNSD":
        return t.shape[0], t.shape[1], t.shape[2], (t.stride(0), t.stride(1), t.stride(2))
    if layout == "BSND":
        return t.shape[0], t.shape[2], t.shape[1], (t.stride(0), t.stride(2), t.stride(1))
    return 1, t.shape[1], t.shape[0], (0, t.stride(1), t.stride(0))   # TND: samples by lengths, not strides


def _native():
    # Imported on first use: GPU-only processes (the Triton kernels) need not build the runtime's extension.
    from lite import _lite
    return _lite


def run(spec: dict, threads: int | None = None) -> None:
    _native().attention(spec, threads or torch.get_num_threads())


def rotary(spec: dict, threads: int | None = None) -> None:
    _native().rotary(spec, threads or torch.get_num_threads())
