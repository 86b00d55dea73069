// Einsum, Compress, ReverseSequence, LRN, LpPool, MaxUnpool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "kernels/common.h"
#include "kernels/register.h"
#include "kernels/spatial.h"

namespace lite {
namespace {

using ms_schema::OpType;

// Einsum by direct summation over every index letter: exact for any equation (ellipsis included),
// O(product of all index sizes).
class EinsumKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const auto* a = node_.fb->attr_as_EinsumAttr();
    Require(a->equation() != nullptr, "equation is required");
    std::string eq;
    for (char c : a->equation()->str())
      if (c != ' ') eq += c;
    const size_t arrow = eq.find("->");
    std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> terms;
    for (size_t p = 0;;) {
      const size_t c = lhs.find(',', p);
      terms.push_back(lhs.substr(p, c == std::string::npos ? std::string::npos : c - p));
      if (c == std::string::npos) break;
      p = c + 1;
    }
    Require(terms.size() == io.in.size(), "equation has " + std::to_string(terms.size()) + " operands, node has " +
                                              std::to_string(io.in.size()));
    // Ellipsis becomes upper-case letters ('A'..), as many as the largest broadcast rank needs.
    int64_t ell_rank = 0;
    for (size_t i = 0; i < terms.size(); ++i) {
      TensorRec& t = In(io, i);
      Require(t.dtype == DataType::kFloat32, "only float32 is supported");
      const size_t e = terms[i].find("...");
      const int64_t letters = static_cast<int64_t>(terms[i].size()) - (e == std::string::npos ? 0 : 3);
      if (e != std::string::npos) ell_rank = std::max(ell_rank, static_cast<int64_t>(t.shape.size()) - letters);
    }
    Require(ell_rank <= 26, "ellipsis covers too many dims");
    auto expand = [&](const std::string& term, int64_t rank) {
      const size_t e = term.find("...");
      if (e == std::string::npos) return term;
      const int64_t n = rank - (static_cast<int64_t>(term.size()) - 3);
      std::string ell;
      for (int64_t k = ell_rank - n; k < ell_rank; ++k) ell += static_cast<char>('A' + k);
      return term.substr(0, e) + ell + term.substr(e + 3);
    };
    std::map<char, int64_t> size;
    operands_.clear();
    for (size_t i = 0; i < terms.size(); ++i) {
      const Shape& s = io.in[i]->shape;
      std::string t = expand(terms[i], static_cast<int64_t>(s.size()));
      Require(t.size() == s.size(), "term '" + terms[i] + "' does not match rank " + std::to_string(s.size()));
      for (size_t d = 0; d < t.size(); ++d) {
        const char c = t[d];
        Require(std::isalpha(static_cast<unsigned char>(c)), "bad character in equation");
        auto it = size.find(c);
        if (it == size.end() || it->second == 1) {
          size[c] = s[d];
        } else {
          Require(s[d] == it->second || s[d] == 1, std::string("dim of '") + c + "' differs between operands");
        }
      }
      operands_.push_back(t);
    }
    std::string out;
    if (arrow != std::string::npos) {
      std::string rhs = eq.substr(arrow + 2);
      std::string ell;
      for (int64_t k = 0; k < ell_rank; ++k) ell += static_cast<char>('A' + k);
      const size_t e = rhs.find("...");
      out = e == std::string::npos ? rhs : rhs.substr(0, e) + ell + rhs.substr(e + 3);
    } else {   // implicit: ellipsis dims, then letters used exactly once, alphabetically
      std::map<char, int> count;
      for (const auto& t : operands_)
        for (char c : t) count[c]++;
      for (int64_t k = 0; k < ell_rank; ++k) out += static_cast<char>('A' + k);
      for (const auto& [c, n] : count)
        if (n == 1 && std::islower(static_cast<unsigned char>(c))) out += c;
    }
    letters_.clear();
    for (const auto& [c, n] : size) letters_.push_back(c);
    sizes_.clear();
    for (char c : letters_) sizes_.push_back(size[c]);
    Shape oshape;
    for (char c : out) {
      Require(size.count(c), std::string("output letter '") + c + "' is not in any input");
      oshape.push_back(size[c]);
    }
    // Per operand, the stride each letter contributes (0 where absent or broadcast).
    strides_.assign(operands_.size(), std::vector<int64_t>(letters_.size(), 0));
    for (size_t i = 0; i < operands_.size(); ++i) {
      const Shape& s = io.in[i]->shape;
      const auto st = Strides(s);
      for (size_t d = 0; d < operands_[i].size(); ++d) {
        const size_t l = letters_.find(operands_[i][d]);
        if (s[d] != 1) strides_[i][l] += st[d];
      }
    }
    out_strides_.assign(letters_.size(), 0);
    const auto ost = Strides(oshape);
    for (size_t d = 0; d < out.size(); ++d) out_strides_[letters_.find(out[d])] += ost[d];
    io.out[0]->shape = oshape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    float* y = io.out[0]->as<float>();
    std::fill(y, y + io.out[0]->numel(), 0.f);
    int64_t total = 1;
    for (int64_t s : sizes_) total *= s;
    if (total == 0) return;
    const size_t nl = letters_.size(), nops = operands_.size();
    std::vector<int64_t> idx(nl, 0), off(nops, 0);
    int64_t yo = 0;
    for (int64_t it = 0; it < total; ++it) {
      float prod = 1.f;
      for (size_t i = 0; i < nops; ++i) prod *= io.in[i]->as<float>()[off[i]];
      y[yo] += prod;
      for (size_t l = nl; l-- > 0;) {   // odometer increment, updating offsets incrementally
        ++idx[l];
        for (size_t i = 0; i < nops; ++i) off[i] += strides_[i][l];
        yo += out_strides_[l];
        if (idx[l] < sizes_[l]) break;
        for (size_t i = 0; i < nops; ++i) off[i] -= strides_[i][l] * sizes_[l];
        yo -= out_strides_[l] * sizes_[l];
        idx[l] = 0;
      }
    }
  }

 private:
  std::vector<std::string> operands_;
  std::string letters_;
  std::vector<int64_t> sizes_, out_strides_;
  std::vector<std::vector<int64_t>> strides_;
};

// Compress: keeps slices whose condition is true. Output size depends on the condition's values.
class CompressKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const TensorRec& c = RequireValue(io, 1, "condition");
    Require(c.dtype == DataType::kBool && c.shape.size() == 1, "condition must be a 1-D bool tensor");
    const auto* a = node_.fb->attr_as_CompressAttr();
    flat_ = !a->has_axis();
    axis_ = a->axis();
    const int64_t len = flat_ ? x.numel() : (NormalizeAxis(axis_, static_cast<int64_t>(x.shape.size())) ? x.shape[axis_] : -1);
    Require(len >= 0, "axis out of range");
    keep_.clear();
    for (int64_t i = 0; i < std::min(len, c.numel()); ++i)
      if (c.as<bool>()[i]) keep_.push_back(i);
    Shape out = flat_ ? Shape{static_cast<int64_t>(keep_.size())} : x.shape;
    if (!flat_) out[axis_] = static_cast<int64_t>(keep_.size());
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& s = io.in[0]->shape;
    const size_t es = DataTypeSize(io.in[0]->dtype);
    int64_t outer = 1, inner = 1, len = io.in[0]->numel();
    if (!flat_) {
      len = s[axis_];
      for (int64_t i = 0; i < axis_; ++i) outer *= s[i];
      for (size_t i = axis_ + 1; i < s.size(); ++i) inner *= s[i];
    }
    const auto* x = static_cast<const uint8_t*>(io.in[0]->data);
    auto* y = static_cast<uint8_t*>(io.out[0]->data);
    const int64_t k = static_cast<int64_t>(keep_.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        std::memcpy(y + (o * k + j) * inner * es, x + (o * len + keep_[j]) * inner * es, inner * es);
  }

 private:
  bool flat_ = true;
  int64_t axis_ = 0;
  std::vector<int64_t> keep_;
};

class ReverseSequenceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    TensorRec& lens = In(io, 1);
    const auto* a = node_.fb->attr_as_ReverseSequenceAttr();
    batch_ = a->batch_axis();
    time_ = a->time_axis();
    Require(x.shape.size() >= 2 && (batch_ == 0 || batch_ == 1) && (time_ == 0 || time_ == 1) && batch_ != time_,
            "batch_axis and time_axis must be 0 and 1");
    Require(lens.shape.size() == 1 && lens.shape[0] == x.shape[batch_], "sequence_lens must hold one length per batch");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& s = io.in[0]->shape;
    const std::vector<int64_t> lens = ReadInts(*io.in[1]);
    const size_t es = DataTypeSize(io.in[0]->dtype);
    int64_t inner = 1;
    for (size_t i = 2; i < s.size(); ++i) inner *= s[i];
    const int64_t B = s[batch_], T = s[time_];
    const auto* x = static_cast<const uint8_t*>(io.in[0]->data);
    auto* y = static_cast<uint8_t*>(io.out[0]->data);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = lens[b];
      if (len < 0 || len > T) Fail("sequence length " + std::to_string(len) + " outside [0, " + std::to_string(T) + "]");
      for (int64_t t = 0; t < T; ++t) {
        const int64_t src = t < len ? len - 1 - t : t;
        auto pos = [&](int64_t tt) { return batch_ == 0 ? b * T + tt : tt * B + b; };
        std::memcpy(y + pos(t) * inner * es, x + pos(src) * inner * es, inner * es);
      }
    }
  }

 private:
  int64_t batch_ = 1, time_ = 0;
};

class LRNKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32 && x.shape.size() >= 3, "input must be float32 with rank >= 3");
    Require(node_.fb->attr_as_LRNAttr()->size() >= 1, "size must be positive");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const auto* a = node_.fb->attr_as_LRNAttr();
    const Shape& s = io.in[0]->shape;
    const int64_t N = s[0], C = s[1], area = C ? io.in[0]->numel() / (N * C) : 0, size = a->size();
    const int64_t lo = (size - 1) / 2, hi = (size - 1) - lo;   // floor / ceil halves
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < area; ++i) {
          float sq = 0.f;
          for (int64_t k = std::max<int64_t>(0, c - lo); k <= std::min(C - 1, c + hi); ++k) {
            const float v = x[(n * C + k) * area + i];
            sq += v * v;
          }
          const int64_t o = (n * C + c) * area + i;
          y[o] = x[o] / std::pow(a->bias() + a->alpha() / size * sq, a->beta());
        }
  }
};

// LpPool: (sum |x|^p)^(1/p) over each window (padding counts as zeros).
class LpPoolKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_PoolAttr();
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32 && x.shape.size() >= 3 && x.shape.size() <= 5, "input must be 3-D to 5-D float32");
    std::vector<int64_t> in_dims(x.shape.begin() + 2, x.shape.end());
    Require(attr->kernel_shape() && attr->kernel_shape()->size() == in_dims.size(), "kernel_shape is required");
    std::vector<int64_t> kernel(attr->kernel_shape()->begin(), attr->kernel_shape()->end());
    const std::string err = ResolveSpatial(in_dims, kernel, attr->strides(), attr->pads(), attr->dilations(),
                                           attr->auto_pad(), attr->ceil_mode(), sp_);
    Require(err.empty(), err);
    Require(attr->p() >= 1, "p must be positive");
    in_dims_ = in_dims;
    Shape out = {x.shape[0], x.shape[1]};
    out.insert(out.end(), sp_.out.begin(), sp_.out.end());
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const float p = static_cast<float>(node_.fb->attr_as_PoolAttr()->p());
    const Shape& s = io.in[0]->shape;
    const int64_t planes = s[0] * s[1];
    const int64_t in_plane = ShapeNumel(in_dims_), out_plane = ShapeNumel(sp_.out);
    const size_t nd = in_dims_.size();
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    std::vector<int64_t> o(nd), k(nd);
    const int64_t kn = ShapeNumel(sp_.kernel);
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t op = 0; op < out_plane; ++op) {
        int64_t rem = op;
        for (size_t d = nd; d-- > 0;) {
          o[d] = rem % sp_.out[d];
          rem /= sp_.out[d];
        }
        float acc = 0.f;
        for (int64_t kk = 0; kk < kn; ++kk) {
          int64_t r = kk, off = 0, stride = 1;
          bool inside = true;
          for (size_t d = nd; d-- > 0;) {
            k[d] = r % sp_.kernel[d];
            r /= sp_.kernel[d];
          }
          for (size_t d = nd; d-- > 0;) {
            const int64_t i = o[d] * sp_.strides[d] - sp_.pad_begin[d] + k[d] * sp_.dilations[d];
            inside &= i >= 0 && i < in_dims_[d];
            off += i * stride;
            stride *= in_dims_[d];
          }
          if (inside) acc += std::pow(std::fabs(x[pl * in_plane + off]), p);
        }
        y[pl * out_plane + op] = std::pow(acc, 1.f / p);
      }
  }

 private:
  SpatialParams sp_;
  std::vector<int64_t> in_dims_;
};

// MaxUnpool: scatters values to the flat positions MaxPool's Indices recorded.
class MaxUnpoolKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_PoolAttr();
    TensorRec& x = In(io, 0);
    TensorRec& idx = In(io, 1);
    Require(x.dtype == DataType::kFloat32 && idx.dtype == DataType::kInt64 && idx.shape == x.shape,
            "X must be float32 and I int64 of the same shape");
    Require(x.shape.size() >= 3 && attr->kernel_shape() && attr->kernel_shape()->size() == x.shape.size() - 2,
            "kernel_shape is required");
    Shape out = {x.shape[0], x.shape[1]};
    if (io.has(2)) {
      out = ReadInts(RequireValue(io, 2, "output_shape"));
      Require(out.size() == x.shape.size(), "output_shape rank differs from X");
    } else {
      const size_t nd = x.shape.size() - 2;
      for (size_t d = 0; d < nd; ++d) {
        const int64_t k = attr->kernel_shape()->Get(d);
        const int64_t st = attr->strides() && attr->strides()->size() == nd ? attr->strides()->Get(d) : 1;
        const int64_t pb = attr->pads() && attr->pads()->size() == 2 * nd ? attr->pads()->Get(d) : 0;
        const int64_t pe = attr->pads() && attr->pads()->size() == 2 * nd ? attr->pads()->Get(d + nd) : 0;
        out.push_back((x.shape[d + 2] - 1) * st + k - pb - pe);
        Require(out.back() >= 0, "negative output size");
      }
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    float* y = io.out[0]->as<float>();
    const int64_t total = io.out[0]->numel();
    std::fill(y, y + total, 0.f);
    const float* x = io.in[0]->as<float>();
    const int64_t* idx = io.in[1]->as<int64_t>();
    for (int64_t i = 0, n = io.in[0]->numel(); i < n; ++i) {
      if (idx[i] < 0 || idx[i] >= total) Fail("index " + std::to_string(idx[i]) + " outside the output");
      y[idx[i]] = x[i];
    }
  }
};

}  // namespace

void RegisterMiscKernels(KernelRegistry& r) {
  r.Register(OpType::Einsum, DataType::kFloat32, MakeKernel<EinsumKernel>);
  r.Register(OpType::Compress, DataType::kUnknown, MakeKernel<CompressKernel>);
  r.Register(OpType::ReverseSequence, DataType::kUnknown, MakeKernel<ReverseSequenceKernel>);
  r.Register(OpType::LRN, DataType::kFloat32, MakeKernel<LRNKernel>);
  r.Register(OpType::LpPool, DataType::kFloat32, MakeKernel<LpPoolKernel>);
  r.Register(OpType::MaxUnpool, DataType::kFloat32, MakeKernel<MaxUnpoolKernel>);
}

}  // namespace lite
