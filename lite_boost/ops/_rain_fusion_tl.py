"""The Triton kernels of `rain_fusion_triton` (imported on first use: Triton fixes interpreter or compiled mode
when a kernel is defined, from TRITON_INTERPRET)."""
import os

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def tile(q, m_i, l_i, acc, i, sel_row, k_base, v_base, MASK, b, h, rows, row_ok, dq, dv, kv_base, kv_len,
         sk_s, sv_s, sm_b, sm_h, sm_s, sm_l, block_kv, qk_scale, D: tl.constexpr, DV: tl.constexpr,
         BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr, HAS_MASK: tl.constexpr, IEEE: tl.constexpr):
    """One chunk of BLOCK_N keys of the (i // CHUNKS)-th selected key block, folded into the online softmax."""
    kb = tl.load(sel_row + i // CHUNKS)
    start = kb * block_kv + (i % CHUNKS) * BLOCK_N
    end = tl.minimum(kb * block_kv + block_kv, kv_len)
    cols = start + tl.arange(0, BLOCK_N)
    col_ok = cols < end
    k = tl.load(k_base + (kv_base + cols)[None, :] * sk_s + dq[:, None],
                mask=col_ok[None, :] & (dq[:, None] < D), other=0.0)
    if IEEE:
        s = tl.dot(q, k, input_precision="ieee")
    else:
        s = tl.dot(q, k)
    s = s * qk_scale
    keep = row_ok[:, None] & col_ok[None, :]
    if HAS_MASK:
        excluded = tl.load(MASK + b * sm_b + h * sm_h + rows[:, None] * sm_s + cols[None, :] * sm_l,
                           mask=keep, other=1)
        keep = keep & (excluded == 0)
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows with nothing yet: no NaN from -inf - -inf
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + (kv_base + cols)[:, None] * sv_s + dv[None, :],
                mask=col_ok[:, None] & (dv[None, :] < DV), other=0.0)
    if IEEE:
        pv = tl.dot(p, v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv

@triton.jit
def fwd(Q, K, V, O, LSE, SEL, NUM, MASK, TABLE,
        sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, so_b, so_h, so_s, sl_b, sl_h, sl_s,
        sm_b, sm_h, sm_s, sm_l, heads, group, max_sel, block_q, block_kv, qk_scale,
        D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, CHUNKS: tl.constexpr, HAS_MASK: tl.constexpr,
        IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    g = tl.program_id(0)
    sub = tl.program_id(1)
    h = tl.program_id(2)
    # Block table row: sample, first token row of the sample, [lo, hi) query rows of the block (sample-local),
    # first key row of the sample, keys in the sample.
    b = tl.load(TABLE + g * 6)
    q_base = tl.load(TABLE + g * 6 + 1)
    q_lo = tl.load(TABLE + g * 6 + 2)
    q_hi = tl.load(TABLE + g * 6 + 3)
    kv_base = tl.load(TABLE + g * 6 + 4)
    kv_len = tl.load(TABLE + g * 6 + 5)
    hk = h // group
    rows = q_lo + sub * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < q_hi
    dq = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + b * sq_b + h * sq_h + (q_base + rows)[:, None] * sq_s + dq[None, :],
                mask=row_ok[:, None] & (dq[None, :] < D), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    sel_row = SEL + (g * heads + h) * max_sel
    n_iter = tl.load(NUM + g * heads + h) * CHUNKS
    k_base = K + b * sk_b + hk * sk_h
    v_base = V + b * sv_b + hk * sv_h
    if INTERPRET:   # the interpreter cannot take a loaded scalar as a range bound (NumPy >= 2.4)
        i = 0
        while i < n_iter:
            m_i, l_i, acc = tile(q, m_i, l_i, acc, i, sel_row, k_base, v_base, MASK, b, h, rows, row_ok, dq, dv,
                                 kv_base, kv_len, sk_s, sv_s, sm_b, sm_h, sm_s, sm_l, block_kv, qk_scale,
                                 D, DV, BLOCK_N, CHUNKS, HAS_MASK, IEEE)
            i += 1
    else:   # a counted loop, which Triton software-pipelines
        for i in range(0, n_iter):
            m_i, l_i, acc = tile(q, m_i, l_i, acc, i, sel_row, k_base, v_base, MASK, b, h, rows, row_ok, dq, dv,
                                 kv_base, kv_len, sk_s, sv_s, sm_b, sm_h, sm_s, sm_l, block_kv, qk_scale,
                                 D, DV, BLOCK_N, CHUNKS, HAS_MASK, IEEE)
    attended = l_i > 0
    out = acc / tl.where(attended, l_i, 1.0)[:, None]
    out = tl.where(attended[:, None], out, 0.0)
    tl.store(O + b * so_b + h * so_h + (q_base + rows)[:, None] * so_s + dv[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & (dv[None, :] < DV))
    lse = tl.where(attended, (m_i + tl.log2(tl.where(attended, l_i, 1.0))) / 1.4426950408889634, float("-inf"))
    tl.store(LSE + b * sl_b + h * sl_h + (q_base + rows) * sl_s, lse, mask=row_ok)
