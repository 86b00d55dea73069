"""`sparse_attention`: RainFusion 2.0 (`sparse_type="rf_v2"`) block-sparse attention for video DiTs, or dense
attention through the backend chooser (`sparse_type=None`).

The sequence is the video's latent tokens (frame-major, then rows, then columns: t x h x w) followed by
`txt_len` text tokens. rf_v2 runs five stages:

1. reorder: each frame's h x w grid is cut into 8 x 8 spatial tiles (the last row/column of tiles is smaller
   when h or w is not a multiple of 8); tokens go frame by frame, tile by tile (tiles row-major), row-major
   inside a tile, so a block of consecutive tokens is a compact patch. The image segment is then padded to a
   multiple of the block size so the text blocks stay aligned; padded keys are masked out.
2. pool: queries and keys are mean-pooled per block (over real tokens only).
   (sparsity 0 keeps every tile: that is dense attention, run as such without stages 1-3 and 5.)
3. select: per sample, head and query block, a softmax over the pooled scores keeps the top
   ceil(KB * (1 - sparsity)) key blocks; always kept: the first frame's blocks and the text blocks (as keys
   for every query block, and every key block for text query blocks), the first block (`keep_sink`) and the
   query block's own block (`keep_recent`).
4. attend: `rain_fusion_attention` over the selected tiles.
5. inverse reorder (and padding removed).
"""
from __future__ import annotations

import math
import time
from typing import Optional

import torch
from torch import Tensor

from .flash_attention import flash_attention, from_bsnd, to_bsnd
from .rain_fusion import rain_fusion_attention

TILE = 8


def tile_order(t: int, h: int, w: int) -> Tensor:
    """Permutation `perm` with reordered[i] = original[perm[i]] for a t x h x w latent grid (8 x 8 tiles)."""
    rows = torch.arange(h)
    cols = torch.arange(w)
    tile_r, tile_c = rows // TILE, cols // TILE
    # Sort key per (row, col): (tile row, tile col, row, col) -> one frame's order.
    key = ((tile_r[:, None] * math.ceil(w / TILE) + tile_c[None, :]) * (h * w) + rows[:, None] * w + cols[None, :])
    frame = torch.argsort(key.flatten())
    return (torch.arange(t)[:, None] * (h * w) + frame[None, :]).flatten()


def _pad_and_reorder(x: Tensor, perm: Tensor, img: int, img_padded: int, txt_len: int, total: int) -> Tensor:
    """[B, N, S, D] -> [B, N, total, D]: reordered image tokens, zeros up to img_padded, text, zeros."""
    out = x.new_zeros(x.shape[0], x.shape[1], total, x.shape[3])
    out[:, :, :img] = x[:, :, perm]
    out[:, :, img_padded:img_padded + txt_len] = x[:, :, img:img + txt_len]
    return out


def _pool(x: Tensor, valid: Tensor, block: int) -> Tensor:
    """Mean of the valid tokens of each block: [B, N, S, D] -> [B, N, S / block, D] (float32)."""
    b, n, s, d = x.shape
    xs = (x.float() * valid[:, None]).view(b, n, s // block, block, d).sum(3)
    count = valid.view(s // block, block).sum(1).clamp(min=1)
    return xs / count[:, None]


def select_blocks(q_pool: Tensor, k_pool: Tensor, sparsity: float, forced_cols: Tensor, forced_rows: Tensor,
                  valid_cols: Tensor, keep_sink: bool, keep_recent: bool, scale: float):
    """Per (sample, head, query block): the kept key blocks as (select_idx [B*QB, N, KB], select_num [B*QB, N],
    kept bool [B, N, QB, KB])."""
    b, n, qb, _ = q_pool.shape
    kb = k_pool.shape[2]
    scores = (q_pool @ k_pool.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~valid_cols, float("-inf"))
    probs = torch.softmax(scores, -1)
    keep = min(kb, max(1, math.ceil(kb * (1.0 - sparsity) - 1e-9)))
    top = torch.topk(probs, keep, dim=-1).indices
    kept = torch.zeros(b, n, qb, kb, dtype=torch.bool, device=q_pool.device)
    kept.scatter_(-1, top, True)
    kept |= forced_cols
    kept |= forced_rows[:, None]   # every key block for these query blocks (a broadcast: no device sync)
    if keep_sink:
        kept[..., 0] = True
    if keep_recent:
        diag = torch.arange(min(qb, kb), device=q_pool.device)
        kept[:, :, diag, diag] = True
    kept &= valid_cols
    num = kept.sum(-1)
    order = torch.argsort((~kept).to(torch.int8), dim=-1, stable=True)    # kept blocks first, ascending
    idx = torch.where(torch.arange(kb, device=q_pool.device) < num[..., None], order, torch.full_like(order, -1))
    return (idx.permute(0, 2, 1, 3).reshape(b * qb, n, kb).contiguous(),
            num.permute(0, 2, 1).reshape(b * qb, n).contiguous(), kept)


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor] = None, scale: Optional[float] = None,
                     is_causal: bool = False, head_num: Optional[int] = None, input_layout: str = "BNSD",
                     sparse_type: Optional[str] = None, txt_len: int = 0, block_size: int = 128,
                     latent_shape_q: Optional[tuple[int, int, int]] = None,
                     latent_shape_k: Optional[tuple[int, int, int]] = None, keep_sink: bool = True,
                     keep_recent: bool = True, sparsity: float = 0.0, stats: Optional[dict] = None) -> Tensor:
    """Attention over q, k, v (BNSD, BSND or BSH with head_num), dense or RainFusion 2.0 block-sparse.

    stats, when given, receives `density` (kept tiles / tiles), the selection (`select_idx`, `select_num_idx`,
    `kept`, `perm`: the token order the blocks refer to) and the time of each stage (`seconds`)."""
    if sparse_type is None:
        return flash_attention(q, k, v, attn_mask=attn_mask, scale=scale, is_causal=is_causal, head_num=head_num,
                               input_layout=input_layout)
    if sparse_type != "rf_v2":
        raise ValueError(f"sparse_type must be None or 'rf_v2', got {sparse_type!r}")
    if is_causal or attn_mask is not None:
        raise ValueError("rf_v2 selects its own tiles: is_causal and attn_mask are not supported with it")
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    if latent_shape_q is None:
        raise ValueError("rf_v2 needs latent_shape_q = (frames, height, width) of the image tokens")
    latent_shape_k = latent_shape_k or latent_shape_q
    if tuple(latent_shape_k) != tuple(latent_shape_q):
        raise NotImplementedError("rf_v2 with different query and key latent shapes (cross-attention)")
    t_start = time.perf_counter()
    qb_, kb_, vb_ = (to_bsnd(x, input_layout, head_num).transpose(1, 2) for x in (q, k, v))
    b, n, s, d = qb_.shape
    t, h, w = (int(x) for x in latent_shape_q)
    img = t * h * w
    if img + txt_len != s or kb_.shape[2] != s:
        raise ValueError(f"latent shape {latent_shape_q} ({img} tokens) + txt_len {txt_len} != sequence {s}")
    if sparsity == 0.0:   # every tile kept: exactly dense attention, without reordering anything
        if stats is not None:
            stats.update(density=1.0, seconds={"reorder_pool_select": 0.0, "inverse_reorder": 0.0})
        return flash_attention(q, k, v, scale=scale, head_num=head_num, input_layout=input_layout)
    block = int(block_size)
    img_padded = math.ceil(img / block) * block
    total = img_padded + math.ceil(txt_len / block) * block
    perm = tile_order(t, h, w).to(qb_.device)
    qr, kr, vr = (_pad_and_reorder(x, perm, img, img_padded, txt_len, total) for x in (qb_, kb_, vb_))
    valid = torch.zeros(total, dtype=torch.bool, device=qb_.device)
    valid[:img] = True
    valid[img_padded:img_padded + txt_len] = True
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)

    nblk = total // block
    q_pool, k_pool = _pool(qr, valid, block), _pool(kr, valid, block)
    block_valid = valid.view(nblk, block).any(1)
    blocks = torch.arange(nblk, device=qb_.device)
    first_frame_blocks = blocks < math.ceil(h * w / block)
    text_blocks = blocks >= img_padded // block
    forced_cols = (first_frame_blocks | text_blocks)
    idx, num, kept = select_blocks(q_pool, k_pool, sparsity, forced_cols, text_blocks, block_valid, keep_sink,
                                   keep_recent, scale)
    t_attend = time.perf_counter()
    padded = img_padded > img or total > img_padded + txt_len   # known on the host: no device sync
    padding = ~valid if padded else None   # padded keys excluded; no mask when nothing is padded
    out, _ = rain_fusion_attention(qr, kr, vr, idx, num, block_shape=(block, block), attn_mask=padding,
                                   scale_value=scale)
    t_restore = time.perf_counter()
    result = torch.empty_like(qb_)
    result[:, :, perm] = out[:, :, :img]
    result[:, :, img:] = out[:, :, img_padded:img_padded + txt_len]
    t_end = time.perf_counter()
    if stats is not None:
        rows = block_valid[None, None, :, None] & block_valid[None, None, None, :]
        stats.update(density=float(kept.sum() / (rows.sum() * b * n)), select_idx=idx, select_num_idx=num,
                     kept=kept, perm=perm, block_valid=block_valid,
                     seconds={"reorder_pool_select": t_attend - t_start, "attend": t_restore - t_attend,
                              "inverse_reorder": t_end - t_restore})
    return from_bsnd(result.transpose(1, 2), input_layout)
