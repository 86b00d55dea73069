// Attention (format 1.6): fused scaled dot-product attention over operands in BNSD, BSND (3-D or 4-D) or, for K,
// transposed BNDS layout, so the converter can drop the head transposes around it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/attention/attention.h"
#include "cpu/attention/paged_decode_attention.h"
#include "cpu/simd/float16.h"
#include "cpu/attention/kv_cache_rows.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::AttentionLayout;
using ms_schema::OpType;

// Sizes and strides of one operand as [batch, heads, rows, cols].
struct OperandGeometry {
  int64_t batch = 0, heads = 0, rows = 0, cols = 0;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

class AttentionKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_AttentionAttr();
    paged_ = attr->paged();
    if (paged_) {
      InferPaged(io, attr);
      planned_scratch_ = AttentionScratchBytes(args_);
      return;
    }
    OperandGeometry q, k, v;
    k_offset_ = v_offset_ = 0;
    if (!io.has(1) && !io.has(2)) {
      PackedGeometry(In(io, 0), attr, q, k, v);
    } else {
      for (size_t i = 0; i < 3; ++i)
        Require(In(io, i).dtype == DataType::kFloat32, std::string("Q, K and V must be float32; ") + "QKV"[i] +
                                                           " is " + DataTypeName(io.in[i]->dtype));
      q = Geometry(*io.in[0], attr->q_layout(), attr->q_num_heads(), "Q");
      k = Geometry(*io.in[1], attr->k_layout(), attr->kv_num_heads(), "K");
      v = Geometry(*io.in[2], attr->v_layout(), attr->kv_num_heads(), "V");
    }
    const bool k_transposed = attr->k_layout() == AttentionLayout::BNDS;
    const int64_t kv_len = k_transposed ? k.cols : k.rows, k_dim = k_transposed ? k.rows : k.cols;
    const std::string shapes = io.has(1) ? " (Q " + ShapeToString(io.in[0]->shape) + ", K " +
                                               ShapeToString(io.in[1]->shape) + ", V " + ShapeToString(io.in[2]->shape) + ")"
                                         : " (packed QKV " + ShapeToString(io.in[0]->shape) + ")";
    Require(q.batch == k.batch && q.batch == v.batch, "Q, K and V differ in batch size" + shapes);
    Require(k.heads == v.heads, "K and V differ in head count" + shapes);
    Require(k.heads > 0 && q.heads % k.heads == 0,
            "the query heads (" + std::to_string(q.heads) + ") are not a multiple of the key/value heads (" +
                std::to_string(k.heads) + ")" + shapes);
    Require(k_dim == q.cols, "Q and K differ in head size" + shapes);
    Require(v.rows == kv_len, "K and V differ in sequence length" + shapes);

    // A KV cache (ONNX opset 23+): past_key/past_value [B, kv_heads, P, D] before this call's keys, and
    // present_key/present_value [B, kv_heads, P + L, D] written out; attention then reads the presents, and query
    // i sits at position P + i (causal masks and windows are bottom-right aligned).
    cache_ = io.has(4) || io.has(5) || (io.out.size() > 1 && io.out[1]) || (io.out.size() > 2 && io.out[2]);
    past_len_ = 0;
    if (cache_) {
      Require(io.has(1) && io.has(2) && !k_transposed, "a KV cache needs separate K and V in BNSD or BSND layout");
      Require(io.has(4) == io.has(5), "past_key and past_value come together");
      Require(io.out.size() > 2 && io.out[1] && io.out[2], "a KV cache needs both present_key and present_value");
      if (io.has(4)) {
        const TensorRec& pk = *io.in[4];
        const TensorRec& pv = *io.in[5];
        Require(pk.dtype == DataType::kFloat32 && pv.dtype == DataType::kFloat32, "past_key/past_value must be float32");
        Require(pk.shape.size() == 4 && pv.shape.size() == 4 && pk.shape[0] == k.batch && pk.shape[1] == k.heads &&
                    pk.shape[3] == k.cols && pv.shape[0] == v.batch && pv.shape[1] == v.heads &&
                    pv.shape[3] == v.cols && pv.shape[2] == pk.shape[2],
                "past_key " + ShapeToString(pk.shape) + " / past_value " + ShapeToString(pv.shape) +
                    " must be [batch, kv_heads, past, head_size] matching K and V" + shapes);
        past_len_ = pk.shape[2];
      }
      k_geom_ = k;
      v_geom_ = v;
      const int64_t total = past_len_ + kv_len;
      io.out[1]->shape = {k.batch, k.heads, total, k.cols};
      io.out[2]->shape = {v.batch, v.heads, total, v.cols};
      io.out[1]->dtype = io.out[2]->dtype = DataType::kFloat32;
      k = {k.batch, k.heads, total, k.cols, k.heads * total * k.cols, total * k.cols, k.cols};
      v = {v.batch, v.heads, total, v.cols, v.heads * total * v.cols, total * v.cols, v.cols};
    }

    AttentionArgs& a = args_;
    a = AttentionArgs{};
    a.batch = q.batch;
    a.q_heads = q.heads;
    a.kv_heads = k.heads;
    a.q_len = q.rows;
    a.kv_len = cache_ ? past_len_ + kv_len : kv_len;
    a.causal_offset = past_len_;
    a.softcap = attr->softcap();
    Require(a.softcap >= 0.f && std::isfinite(a.softcap), "softcap must be a finite value >= 0");
    a.head_dim = q.cols;
    a.v_dim = v.cols;
    a.q = {nullptr, q.batch_stride, q.head_stride, q.row_stride};
    a.k = {nullptr, k.batch_stride, k.head_stride, k.row_stride};
    a.v = {nullptr, v.batch_stride, v.head_stride, v.row_stride};
    a.k_transposed = k_transposed;
    a.scale = attr->scale() != 0.f ? attr->scale() : 1.f / std::sqrt(static_cast<float>(std::max<int64_t>(1, a.head_dim)));
    a.causal = attr->is_causal();
    a.zero_masked_rows = attr->zero_masked_rows();
    a.left_window = attr->left_window_size();
    a.right_window = attr->right_window_size();
    Require(a.left_window >= -1 && a.right_window >= -1, "window sizes must be -1 (unbounded) or nonnegative");

    Shape out;
    if (attr->out_layout() == AttentionLayout::BNSD) {
      out = {a.batch, a.q_heads, a.q_len, a.v_dim};
      a.out_batch_stride = a.q_heads * a.q_len * a.v_dim;
      a.out_head_stride = a.q_len * a.v_dim;
      a.out_row_stride = a.v_dim;
    } else {
      Require(attr->out_layout() == AttentionLayout::BSND, "the output layout must be BNSD or BSND");
      out = io.in[0]->shape.size() == 3 ? Shape{a.batch, a.q_len, a.q_heads * a.v_dim}
                                        : Shape{a.batch, a.q_len, a.q_heads, a.v_dim};
      a.out_batch_stride = a.q_len * a.q_heads * a.v_dim;
      a.out_head_stride = a.v_dim;
      a.out_row_stride = a.q_heads * a.v_dim;
    }

    mask_kind_ = DataType::kUnknown;
    if (io.has(3)) {
      const TensorRec& m = *io.in[3];
      Require(m.dtype == DataType::kFloat32 || m.dtype == DataType::kBool,
              std::string("the mask must be bool or float32, got ") + DataTypeName(m.dtype));
      const Shape full{a.batch, a.q_heads, a.q_len, a.kv_len};
      Shape b;
      Require(m.shape.size() <= 4 && BroadcastShapes({&m.shape, &full}, b) && b == full,
              "mask " + ShapeToString(m.shape) + " does not broadcast to [batch, q_heads, q_len, kv_len] = " +
                  ShapeToString(full));
      // Strides over [B, Hq, S, L] with 0 on broadcast dims.
      const std::vector<int64_t> st = Strides(m.shape);
      int64_t ms[4] = {0, 0, 0, 0};
      const size_t shift = 4 - m.shape.size();
      for (size_t d = 0; d < m.shape.size(); ++d) ms[d + shift] = m.shape[d] == 1 ? 0 : st[d];
      a.mask.batch_stride = ms[0];
      a.mask.head_stride = ms[1];
      a.mask.row_stride = ms[2];
      a.mask.col_stride = ms[3];
      mask_kind_ = m.dtype;
    }
    InferBlockMask(io, attr);
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
    planned_scratch_ = AttentionScratchBytes(args_);
  }

  size_t ScratchBytes(const KernelIO&) const override { return planned_scratch_; }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    if (paged_) return RunPaged(io, ctx);
    AttentionArgs a = args_;
    const float* q = io.in[0]->as<float>();
    a.q.data = q;
    a.k.data = io.has(1) ? io.in[1]->as<float>() : q + k_offset_;
    a.v.data = io.has(2) ? io.in[2]->as<float>() : q + v_offset_;
    if (cache_) {   // the presents: past rows then this call's, per (batch, head); attention reads them
      float* pk = io.out[1]->as<float>();
      float* pv = io.out[2]->as<float>();
      AppendToCache(io.has(4) ? io.in[4]->as<float>() : nullptr, io.in[1]->as<float>(), k_geom_, pk);
      AppendToCache(io.has(5) ? io.in[5]->as<float>() : nullptr, io.in[2]->as<float>(), v_geom_, pv);
      a.k.data = pk;
      a.v.data = pv;
    }
    a.out = io.out[0]->as<float>();
    if (mask_kind_ == DataType::kFloat32) a.mask.add = io.in[3]->as<float>();
    if (mask_kind_ == DataType::kBool) a.mask.keep = io.in[3]->as<uint8_t>();
    if (block_size_ > 0) SelectBlocks(io.in[9]->as<uint8_t>(), a);
    // precision bfloat16: both products on bf16 dot products where the CPU has them (float16: float32 here)
    a.bf16_products = io.bf16 && !io.fp16;
    run_args_ = a;
    RunAttention(a, ctx.scratch, ctx.pool);
  }

  // (Asked right after Run, while the run's lengths and selections are still in place.)
  std::string Implementation() const override {
    if (paged_) return "attention_paged_decode";
    return AttentionImplementation(run_args_) + (block_size_ > 0 ? "_block_sparse" : "");
  }

 private:
  // Block sparsity (AttentionAttr.block_size, input 9): the kernel's per-(query block, head) key-block lists are
  // rebuilt from the mask at every run (the mask is data: NABLA computes it from the queries and keys).
  void InferBlockMask(KernelIO& io, const ms_schema::AttentionAttr* attr) {
    block_size_ = attr->block_size();
    const bool has_mask = io.in.size() > 9 && io.has(9);
    Require(block_size_ >= 0, "block_size must be nonnegative");
    Require(has_mask == (block_size_ > 0), "a block mask (input 9) and block_size > 0 come together");
    if (!has_mask) return;
    Require(!cache_, "a block mask does not combine with a KV cache");
    AttentionArgs& a = args_;
    q_blocks_ = (a.q_len + block_size_ - 1) / block_size_;
    k_blocks_ = (a.kv_len + block_size_ - 1) / block_size_;
    const TensorRec& m = *io.in[9];
    const Shape want{a.batch, a.q_heads, q_blocks_, k_blocks_};
    Require(m.dtype == DataType::kBool && m.shape == want,
            "the block mask must be bool " + ShapeToString(want) + " ([batch, q_heads, query blocks, key blocks] of " +
                std::to_string(block_size_) + "), got " + DataTypeName(m.dtype) + " " + ShapeToString(m.shape));
    a.key_block = a.query_block = block_size_;
    a.max_selected = k_blocks_;
    select_idx_.assign(static_cast<size_t>(a.batch * q_blocks_ * a.q_heads * k_blocks_), 0);
    select_num_.assign(static_cast<size_t>(a.batch * q_blocks_ * a.q_heads), 0);
  }

  // The kernel numbers query blocks across the batch (g = b * q_blocks + i) and lists key blocks per (g, head).
  void SelectBlocks(const uint8_t* mask, AttentionArgs& a) {
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t h = 0; h < a.q_heads; ++h)
        for (int64_t i = 0; i < q_blocks_; ++i) {
          const uint8_t* row = mask + ((b * a.q_heads + h) * q_blocks_ + i) * k_blocks_;
          const int64_t g = (b * q_blocks_ + i) * a.q_heads + h;
          int64_t* out = select_idx_.data() + g * k_blocks_;
          int64_t n = 0;
          for (int64_t j = 0; j < k_blocks_; ++j)
            if (row[j]) out[n++] = j;
          select_num_[g] = n;
        }
    a.select_idx = select_idx_.data();
    a.select_num = select_num_.data();
  }

  // The paged form (AttentionAttr.paged): shapes here; the values of block_tables, seq_lens and query_lens are
  // checked at each run.
  void InferPaged(KernelIO& io, const ms_schema::AttentionAttr* attr) {
    const int64_t hq = attr->q_num_heads(), hkv = attr->kv_num_heads();
    const char* names[] = {"q", "k", "v", "mask", "key_cache", "value_cache", "block_tables", "seq_lens", "query_lens"};
    Require(!io.has(3), "the paged form takes no mask (it is causal)");
    for (size_t i : {0, 1, 2, 4, 5, 6, 7, 8}) Require(io.has(i), std::string("the paged form needs ") + names[i]);
    for (size_t i : {0, 1, 2})
      Require(io.in[i]->dtype == DataType::kFloat32, std::string(names[i]) + " must be float32");
    // The cache: float32, bfloat16 / float16 (half the memory; each key and value rounded when written), or int8
    // rows with a float32 scale each (a quarter plus 4 bytes a row: head_size + 4 int8 per row).
    const DataType cache = io.in[4]->dtype;
    Require(io.in[5]->dtype == cache && (cache == DataType::kFloat32 || cache == DataType::kBFloat16 ||
                                         cache == DataType::kFloat16 || cache == DataType::kInt8),
            "key_cache and value_cache must both be float32, bfloat16, float16 or int8");
    const AttentionElem elem = cache == DataType::kBFloat16 ? AttentionElem::kBFloat16
                             : cache == DataType::kFloat16  ? AttentionElem::kFloat16
                             : cache == DataType::kInt8     ? AttentionElem::kInt8Rows
                                                            : AttentionElem::kFloat32;
    for (size_t i : {6, 7, 8}) Require(io.in[i]->dtype == DataType::kInt64, std::string(names[i]) + " must be int64");
    const Shape &q = io.in[0]->shape, &k = io.in[1]->shape, &v = io.in[2]->shape;
    const Shape &kc = io.in[4]->shape, &vc = io.in[5]->shape, &bt = io.in[6]->shape;
    Require(hq > 0 && hkv > 0 && hq % hkv == 0, "q_num_heads must be a multiple of kv_num_heads, both > 0");
    Require(q.size() == 2 && k.size() == 2 && v.size() == 2 && k[0] == q[0] && v[0] == q[0] && q[1] % hq == 0 &&
                k[1] % hkv == 0 && v[1] % hkv == 0,
            "q, k, v must be [tokens, heads * head_size] with the same tokens, got " + ShapeToString(q) + ", " +
                ShapeToString(k) + ", " + ShapeToString(v));
    const int64_t d = q[1] / hq, dv = v[1] / hkv;
    Require(k[1] / hkv == d, "q and k differ in head size");
    Require(kc.size() == 4 && vc.size() == 4 && kc[1] == hkv && kc[3] == CacheRowElems(d, elem) && vc[1] == hkv &&
                vc[3] == CacheRowElems(dv, elem) && vc[0] == kc[0] && vc[2] == kc[2] && kc[2] > 0,
            "key_cache " + ShapeToString(kc) + " / value_cache " + ShapeToString(vc) +
                " must be [num_blocks, kv_heads, block_size, head_size" +
                (elem == AttentionElem::kInt8Rows ? " + 4 (int8 codes, then the row's float32 scale)]" : "]"));
    Require(bt.size() == 2 && bt[1] > 0, "block_tables must be [batch, max_blocks], got " + ShapeToString(bt));
    Require(io.in[7]->shape == Shape{bt[0]} && io.in[8]->shape == Shape{bt[0]},
            "seq_lens and query_lens must be [batch] = [" + std::to_string(bt[0]) + "]");
    AttentionArgs& a = args_;
    a = AttentionArgs{};
    a.batch = bt[0];
    a.q_heads = hq;
    a.kv_heads = hkv;
    a.q_len = q[0];
    a.kv_len = bt[1] * kc[2];   // the most keys a table can name: sizes the scratch
    a.head_dim = d;
    a.v_dim = dv;
    a.q = {nullptr, 0, d, q[1]};
    a.k = {nullptr, kc[1] * kc[2] * kc[3], kc[2] * kc[3], kc[3]};
    a.v = {nullptr, vc[1] * vc[2] * vc[3], vc[2] * vc[3], vc[3]};
    a.out_batch_stride = 0;
    a.out_head_stride = dv;
    a.out_row_stride = hq * dv;
    a.scale = attr->scale() != 0.f ? attr->scale() : 1.f / std::sqrt(static_cast<float>(d));
    a.causal = true;
    a.causal_from_end = true;
    a.zero_masked_rows = true;
    a.left_window = attr->left_window_size();
    a.right_window = attr->right_window_size();
    a.softcap = attr->softcap();
    a.kv_block_size = kc[2];
    a.kv_blocks_per_seq = bt[1];
    a.kv_num_blocks = kc[0];
    a.kv_elem = elem;
    io.out[0]->shape = {q[0], hq * dv};
    io.out[0]->dtype = DataType::kFloat32;
  }

  void RunPaged(KernelIO& io, const KernelContext& ctx) {
    AttentionArgs a = args_;
    const int64_t* tables = io.in[6]->as<int64_t>();
    const int64_t* seq_lens = io.in[7]->as<int64_t>();
    const int64_t* query_lens = io.in[8]->as<int64_t>();
    const int64_t tokens = io.in[0]->shape[0];
    int64_t total = 0, longest = 0;
    for (int64_t b = 0; b < a.batch; ++b) {
      Require(query_lens[b] >= 0 && seq_lens[b] >= query_lens[b] && seq_lens[b] <= a.kv_len,
              "sequence " + std::to_string(b) + ": query_lens " + std::to_string(query_lens[b]) + " and seq_lens " +
                  std::to_string(seq_lens[b]) + " must satisfy 0 <= query_lens <= seq_lens <= max_blocks * block_size");
      total += query_lens[b];
      longest = std::max(longest, seq_lens[b]);
    }
    Require(total == tokens, "query_lens add up to " + std::to_string(total) + " tokens, q holds " + std::to_string(tokens));
    a.q_lens = query_lens;
    a.kv_lens = seq_lens;
    a.kv_len = longest;
    a.q_len = 0;
    for (int64_t b = 0; b < a.batch; ++b) a.q_len = std::max(a.q_len, query_lens[b]);
    a.kv_block_table = tables;
    ValidateAttention(a);   // block numbers inside the cache, lengths within each table
    // The step's keys and values into their slots: sequence b's token i sits at position seq_lens[b] - query_lens[b] + i.
    void* kc = io.in[4]->data;
    void* vc = io.in[5]->data;
    const float* k = io.in[1]->as<float>();
    const float* v = io.in[2]->as<float>();
    const int64_t bs = a.kv_block_size, d = a.head_dim, dv = a.v_dim, hkv = a.kv_heads;
    const int64_t eb = CacheElemBytes(a.kv_elem);
    int64_t row = 0;
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t i = 0; i < query_lens[b]; ++i, ++row) {
        const int64_t pos = seq_lens[b] - query_lens[b] + i, block = tables[b * a.kv_blocks_per_seq + pos / bs];
        for (int64_t h = 0; h < hkv; ++h) {
          StoreCacheRow(k + row * hkv * d + h * d, d, a.kv_elem,
                        static_cast<char*>(kc) + (block * a.k.batch_stride + h * a.k.head_stride + (pos % bs) * a.k.row_stride) * eb);
          StoreCacheRow(v + row * hkv * dv + h * dv, dv, a.kv_elem,
                        static_cast<char*>(vc) + (block * a.v.batch_stride + h * a.v.head_stride + (pos % bs) * a.v.row_stride) * eb);
        }
      }
    a.q.data = io.in[0]->as<float>();
    a.k.data = kc;
    a.v.data = vc;
    a.out = io.out[0]->as<float>();
    a.bf16_products = io.bf16 && !io.fp16;
    // The scratch was sized when the graph was planned, before the lengths were known; a run whose tiles would not
    // fit it is refused, never written past.
    Require(IsPagedDecodeStep(a) || AttentionScratchBytes(a) <= planned_scratch_,
            "internal error: this step's attention tiles do not fit the scratch planned for it");
    RunAttention(a, ctx.scratch, ctx.pool);
  }

  // present[b, h] = past[b, h] ([past_len_, cols], contiguous BNSD) followed by the new rows of `g`'s operand.
  void AppendToCache(const float* past, const float* fresh, const OperandGeometry& g, float* present) const {
    const int64_t total = past_len_ + g.rows;
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t h = 0; h < g.heads; ++h) {
        float* dst = present + (b * g.heads + h) * total * g.cols;
        if (past_len_) {
          const float* src = past + (b * g.heads + h) * past_len_ * g.cols;
          std::copy(src, src + past_len_ * g.cols, dst);
        }
        for (int64_t r = 0; r < g.rows; ++r) {
          const float* row = fresh + b * g.batch_stride + h * g.head_stride + r * g.row_stride;
          std::copy(row, row + g.cols, dst + (past_len_ + r) * g.cols);
        }
      }
  }

  // K and V omitted: input 0 is [B, S, (q_heads + 2 kv_heads) * D], the Q, K and V projections side by side
  // (one merged GEMM's output), read in place with a row stride of the whole width.
  void PackedGeometry(TensorRec& x, const ms_schema::AttentionAttr* attr, OperandGeometry& q, OperandGeometry& k,
                      OperandGeometry& v) {
    const Shape& s = x.shape;
    const int64_t hq = attr->q_num_heads(), hkv = attr->kv_num_heads();
    Require(x.dtype == DataType::kFloat32, std::string("packed QKV must be float32, got ") + DataTypeName(x.dtype));
    Require(s.size() == 3 && attr->q_layout() == AttentionLayout::BSND,
            "packed QKV (K and V omitted) must be 3-D [batch, seq, (q_heads + 2 * kv_heads) * head_dim], got " +
                ShapeToString(s));
    Require(hq > 0 && hkv > 0 && s[2] % (hq + 2 * hkv) == 0,
            "packed QKV width " + std::to_string(s[2]) + " does not split into " + std::to_string(hq) + " + 2 x " +
                std::to_string(hkv) + " heads");
    const int64_t d = s[2] / (hq + 2 * hkv), width = s[2];
    q = {s[0], hq, s[1], d, s[1] * width, d, width};
    k = {s[0], hkv, s[1], d, s[1] * width, d, width};
    v = k;
    k_offset_ = hq * d;
    v_offset_ = (hq + hkv) * d;
  }

  // Reads an operand's [batch, heads, rows, cols] view from its shape and layout.
  OperandGeometry Geometry(const TensorRec& t, AttentionLayout layout, int64_t num_heads, const char* name) const {
    const Shape& s = t.shape;
    const std::string what = std::string(name) + " " + ShapeToString(s);
    OperandGeometry g;
    if (s.size() == 3) {
      Require(layout == AttentionLayout::BSND, what + ": a 3-D operand must be in BSND layout");
      Require(num_heads > 0 && s[2] % num_heads == 0,
              what + ": the last dim does not split into " + std::to_string(num_heads) + " heads");
      g = {s[0], num_heads, s[1], s[2] / num_heads, s[1] * s[2], s[2] / num_heads, s[2]};
      return g;
    }
    Require(s.size() == 4, what + ": must be 3-D or 4-D");
    switch (layout) {
      case AttentionLayout::BNSD:
        return {s[0], s[1], s[2], s[3], s[1] * s[2] * s[3], s[2] * s[3], s[3]};
      case AttentionLayout::BSND:
        return {s[0], s[2], s[1], s[3], s[1] * s[2] * s[3], s[3], s[2] * s[3]};
      case AttentionLayout::BNDS:   // K^T: rows are the features, cols the keys
        Require(std::string(name) == "K", what + ": only K may be in BNDS layout");
        return {s[0], s[1], s[2], s[3], s[1] * s[2] * s[3], s[2] * s[3], s[3]};
      default:
        Fail(what + ": unknown layout");
    }
  }

  AttentionArgs args_;
  int64_t k_offset_ = 0, v_offset_ = 0;   // packed QKV: where K and V start in a row
  bool cache_ = false;                    // past inputs and/or present outputs
  size_t planned_scratch_ = 0;   // AttentionScratchBytes of the planned shapes: the scratch each run gets
  bool paged_ = false;                    // AttentionAttr.paged: the engine's block-table form
  AttentionArgs run_args_;                // the last Run's (Implementation)
  int64_t past_len_ = 0;
  OperandGeometry k_geom_, v_geom_;       // this call's K and V as given (before the cache)
  DataType mask_kind_ = DataType::kUnknown;
  int64_t block_size_ = 0, q_blocks_ = 0, k_blocks_ = 0;   // block sparsity
  std::vector<int64_t> select_idx_, select_num_;
};

}  // namespace

void RegisterAttentionKernels(KernelRegistry& r) {
  r.Register(OpType::Attention, DataType::kFloat32, MakeKernel<AttentionKernel>);
}

}  // namespace lite
