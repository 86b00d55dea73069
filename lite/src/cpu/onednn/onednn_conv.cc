#include "cpu/onednn/onednn_conv.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "cpu/aligned.h"
#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/onednn/onednn_api.h"
#include "cpu/onednn/onednn_library.h"

namespace lite {

#if LITE_WITH_ONEDNN

namespace {

void Check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success)
    throw std::runtime_error(std::string("oneDNN: ") + what + " failed (status " + std::to_string(s) + ")");
}

// Owners of the C API's handles (destroyed through the loaded library).
struct Md {
  const OneDnnApi* api = nullptr;
  dnnl_memory_desc_t md = nullptr;
  Md(const OneDnnApi& a, dnnl_memory_desc_t m) : api(&a), md(m) {}
  Md(Md&& o) noexcept : api(o.api), md(o.md) { o.md = nullptr; }
  Md& operator=(Md&& o) noexcept {
    std::swap(api, o.api);
    std::swap(md, o.md);
    return *this;
  }
  Md(const Md&) = delete;
  ~Md() {
    if (md) api->dnnl_memory_desc_destroy(md);
  }
};

// A dense 4-D descriptor [1, C, rows, W] of `dt` in nhwc: `rows` rows of pixels of C values each (lite's rows).
Md RowsDesc(const OneDnnApi& api, int64_t C, int64_t rows, int64_t W, dnnl_data_type_t dt) {
  const dnnl_dims_t dims = {1, C, rows, W};
  dnnl_memory_desc_t md = nullptr;
  Check(api.dnnl_memory_desc_create_with_tag(&md, 4, dims, dt, dnnl_nhwc), "memory descriptor");
  return Md(api, md);
}

// A sub-block of rows of an NCHW float32 image of H rows: [1, C, rows, W] with the whole image's strides.
Md NchwRowsDesc(const OneDnnApi& api, int64_t C, int64_t H, int64_t rows, int64_t W) {
  const dnnl_dims_t dims = {1, C, rows, W}, strides = {C * H * W, H * W, W, 1};
  dnnl_memory_desc_t md = nullptr;
  Check(api.dnnl_memory_desc_create_with_strides(&md, 4, dims, dnnl_f32, strides), "memory descriptor");
  return Md(api, md);
}

// A primitive argument: (arg, md, pointer); one without a descriptor is left out.
struct Arg {
  int arg;
  const_dnnl_memory_desc_t md;
  const void* data;
};
constexpr int kMaxArgs = 12;

// Memory objects for one primitive's arguments, made at its first run and re-pointed at the next ones
// (dnnl_memory_set_data_handle): made and destroyed at every run, they and their mallocs had been ~3% of a full int8
// ResNet-50 run. A run of a primitive takes a free set of its ArgMemories; a primitive shared by plans running at
// once (a model pool's workers) may find both taken, and then makes its own memories for the call.
class ArgMemories {
 public:
  explicit ArgMemories(const OneDnnApi& api) : api_(api) {}
  ArgMemories(const ArgMemories&) = delete;
  ArgMemories& operator=(const ArgMemories&) = delete;
  ~ArgMemories() {
    for (Set& set : sets_) Destroy(&set);
  }

  void Execute(dnnl_primitive_t prim, std::initializer_list<Arg> args) {
    const OneDnnApi& api = api_;
    if (args.size() > kMaxArgs) throw std::logic_error("oneDNN Execute: too many arguments");
    for (Set& set : sets_) {
      bool free = false;
      if (!set.busy.compare_exchange_strong(free, true, std::memory_order_acquire)) continue;
      const dnnl_status_t s = Bind(api, &set, args);
      const dnnl_status_t e = s == dnnl_success ? api.dnnl_primitive_execute(prim, OneDnnThreadStream(api), set.n,
                                                                             set.args)
                                                : s;
      set.busy.store(false, std::memory_order_release);
      Check(e, "primitive execution");
      return;
    }
    Set once;   // every set taken: memories for this call alone
    dnnl_status_t s = MakeMemories(api, &once, args);
    if (s == dnnl_success) s = api.dnnl_primitive_execute(prim, OneDnnThreadStream(api), once.n, once.args);
    Destroy(&once);
    Check(s, "primitive execution");
  }

 private:
  struct Set {
    std::atomic<bool> busy{false};
    int n = 0;   // memories made (0: none yet)
    dnnl_exec_arg_t args[kMaxArgs];
    const_dnnl_memory_desc_t mds[kMaxArgs];   // what each was made for
  };

  void Destroy(Set* set) {
    for (int i = 0; i < set->n; ++i) api_.dnnl_memory_destroy(set->args[i].memory);
    set->n = 0;
  }

  dnnl_status_t MakeMemories(const OneDnnApi& api, Set* set, std::initializer_list<Arg> args) {
    for (const Arg& a : args) {
      if (!a.md) continue;
      const dnnl_status_t s = api.dnnl_memory_create(&set->args[set->n].memory, a.md, api.engine,
                                                     const_cast<void*>(a.data));
      if (s != dnnl_success) return s;
      set->mds[set->n] = a.md;
      set->args[set->n++].arg = a.arg;
    }
    return dnnl_success;
  }

  // The set's memories pointed at this run's data; made at the set's first use. A primitive's runs pass the same
  // arguments with the same descriptors each time (checked).
  dnnl_status_t Bind(const OneDnnApi& api, Set* set, std::initializer_list<Arg> args) {
    if (set->n == 0) {
      const dnnl_status_t s = MakeMemories(api, set, args);
      if (s != dnnl_success) Destroy(set);
      return s;
    }
    int i = 0;
    for (const Arg& a : args) {
      if (!a.md) continue;
      if (i >= set->n || set->args[i].arg != a.arg || set->mds[i] != a.md)
        throw std::logic_error("oneDNN Execute: a run's arguments differ from the first run's");
      const dnnl_status_t s = api.dnnl_memory_set_data_handle(set->args[i++].memory, const_cast<void*>(a.data));
      if (s != dnnl_success) return s;
    }
    if (i != set->n) throw std::logic_error("oneDNN Execute: a run's arguments differ from the first run's");
    return dnnl_success;
  }

  const OneDnnApi& api_;
  Set sets_[2];
};

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// Attributes asking for a scratchpad the caller passes at each run (dnnl_scratchpad_mode_user). The library's own
// is shared by every primitive of the process in this build, so two threads running primitives at once (a model
// pool's workers) overwrote each other's; lite's plan gives each run, and each part of it, its own.
dnnl_primitive_attr_t UserScratchpadAttr(const OneDnnApi& api) {
  dnnl_primitive_attr_t attr = nullptr;
  Check(api.dnnl_primitive_attr_create(&attr), "attributes");
  const dnnl_status_t s = api.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s != dnnl_success) api.dnnl_primitive_attr_destroy(attr);
  Check(s, "scratchpad mode");
  return attr;
}

// The primitive of pd (destroyed here) and the scratchpad it needs at each run (no descriptor where it needs none).
dnnl_primitive_t MakePrimitive(const OneDnnApi& api, dnnl_primitive_desc_t pd, Md* scratchpad = nullptr) {
  if (scratchpad) {
    const_dnnl_memory_desc_t md = api.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (md && api.dnnl_memory_desc_get_size(md) > 0) {
      dnnl_memory_desc_t copy = nullptr;
      const dnnl_status_t s = api.dnnl_memory_desc_clone(&copy, md);
      if (s != dnnl_success) api.dnnl_primitive_desc_destroy(pd);
      Check(s, "scratchpad descriptor");
      *scratchpad = Md(api, copy);
    }
  }
  dnnl_primitive_t p = nullptr;
  const dnnl_status_t s = api.dnnl_primitive_create(&p, pd);
  api.dnnl_primitive_desc_destroy(pd);
  Check(s, "primitive creation");
  return p;
}

size_t ScratchpadBytes(const OneDnnApi& api, const Md& m) {
  return m.md ? Align64(api.dnnl_memory_desc_get_size(m.md)) : 0;
}

}  // namespace

// Output rows [r0, r1): a primitive over input rows [in0, in0 + in_rows) with its own vertical padding; for an NCHW
// input also the reorder of input rows [x0, x1) into the nhwc copy.
struct OneDnnConv::Part {
  explicit Part(const OneDnnApi& a)
      : api(&a), conv_scratchpad(a, nullptr), reorder_scratchpad(a, nullptr), conv_args(a), reorder_args(a) {}
  const OneDnnApi* api = nullptr;
  int64_t r0 = 0, r1 = 0, in0 = 0, x0 = 0, x1 = 0;
  dnnl_primitive_t conv = nullptr, reorder = nullptr;
  Md conv_scratchpad, reorder_scratchpad;        // what each needs at a run (md null: nothing)
  size_t conv_scratchpad_at = 0, reorder_scratchpad_at = 0;   // their bytes' offsets in the run's scratch
  std::vector<Md> mds;   // src, dst (and residual) of the convolution; the reorder's src and dst
  const_dnnl_memory_desc_t src = nullptr, dst = nullptr, rsrc = nullptr, rdst = nullptr;
  mutable ArgMemories conv_args, reorder_args;   // the primitives' argument memories, kept between runs
  ~Part() {
    if (conv) api->dnnl_primitive_destroy(conv);
    if (reorder) api->dnnl_primitive_destroy(reorder);
  }
};

std::shared_ptr<const OneDnnConv> OneDnnConv::Create(const ConvGeometry& g, const void* w, const float* weight_scales,
                                                     const Options& o, std::string* why) {
  if (!OneDnn()) {
    if (why) *why = OneDnnStatus();
    return nullptr;
  }
  // Kernels fix their thread count when made: made with one OpenMP thread, they run on the calling thread alone.
  if (o.int8 && o.nchw_input) throw std::logic_error("OneDnnConv: an int8 input must be uint8 rows");
  OneDnnSingleThread one(*OneDnn());
  const int parts = static_cast<int>(std::clamp<int64_t>(o.parts, 1, g.OH));
  std::shared_ptr<OneDnnConv> c;
  std::string err;
  for (int n : {parts, 1}) {   // where the parts would not share one weight layout: one part, on one thread
    c = std::make_shared<OneDnnConv>(Key{});
    c->g_ = g;
    c->o_ = o;
    if (o.int8) c->weight_scales_.assign(weight_scales, weight_scales + g.M);
    try {
      err = c->Build(w, n);
    } catch (const std::exception& e) {   // a call the library refused: lite's kernels run the Conv instead
      err = e.what();
    }
    if (err.empty() || n == 1) break;
  }
  // LITE_ONEDNN_VERBOSE=1: each decision on stderr (which kernel oneDNN picked, or why lite's own runs it).
  static const bool verbose = [] {
    const char* v = std::getenv("LITE_ONEDNN_VERBOSE");
    return v && std::string(v) == "1";
  }();
  if (verbose)
    std::fprintf(stderr, "lite oneDNN %s Conv %lldx%lldx%lld -> %lld, %lldx%lld /%lld: %s\n", o.int8 ? "int8" : "bf16",
                 static_cast<long long>(g.C), static_cast<long long>(g.H), static_cast<long long>(g.W),
                 static_cast<long long>(g.M), static_cast<long long>(g.KH), static_cast<long long>(g.KW),
                 static_cast<long long>(g.SH), err.empty() ? c->impl_.c_str() : ("declined: " + err).c_str());
  if (!err.empty()) {
    if (why) *why = err;
    return nullptr;
  }
  CountOneDnnConvolution();
  return c;
}

bool OneDnnConv::Worthwhile(const ConvGeometry& g, int threads, bool int8) {
  if (g.M % 16 != 0) return false;
  if (g.OH >= 8) return true;
  if (threads > 1) return false;
  return int8 || (g.KH > 1 && g.SH == 1 && g.SW == 1);
}

std::string OneDnnConv::Build(const void* w, int parts) {
  const OneDnnApi& api = *OneDnn();
  const ConvGeometry& g = g_;
  const dnnl_data_type_t act_dt = o_.int8 ? dnnl_u8 : dnnl_bf16, wei_dt = o_.int8 ? dnnl_s8 : dnnl_bf16;
  const int64_t ext_h = (g.KH - 1) * g.DH + 1, ext_w = (g.KW - 1) * g.DW + 1;
  const int64_t pad_right = std::max<int64_t>(0, (g.OW - 1) * g.SW + ext_w - g.W - g.pad_left);
  const dnnl_dims_t wdims = {g.M, g.C, g.KH, g.KW}, bdims = {g.M}, one = {1};
  dnnl_memory_desc_t md = nullptr;
  Check(api.dnnl_memory_desc_create_with_tag(&md, 4, wdims, wei_dt, dnnl_format_tag_any), "weights descriptor");
  Md wei_any(api, md);
  Check(api.dnnl_memory_desc_create_with_tag(&bias_md_, 1, bdims, dnnl_f32, dnnl_x), "bias descriptor");
  // int8: scales and zero points are arguments of each run (oneDNN 3's quantisation attributes); a zero point only
  // where it is not 0 (ReLU outputs' is: their kernels are then the brgemm ones, with a zero point the older JIT ones).
  const bool in_zp = o_.int8 && o_.in.zero_point != 0;
  const bool out_zp = o_.int8 && o_.out.zero_point != 0 && !FoldsOutZeroPoint();
  const bool has_bias = o_.bias || FoldsBias();
  if (o_.int8) {
    Check(api.dnnl_memory_desc_create_with_tag(&scalar_md_, 1, one, dnnl_f32, dnnl_x), "scale descriptor");
    Check(api.dnnl_memory_desc_create_with_tag(&scales_md_, 1, bdims, dnnl_f32, dnnl_x), "scales descriptor");
    Check(api.dnnl_memory_desc_create_with_tag(&zp_md_, 1, one, dnnl_s32, dnnl_x), "zero point descriptor");
  }
  for (int p = 0; p < parts; ++p) {
    auto part = std::make_unique<Part>(api);
    part->r0 = g.OH * p / parts;
    part->r1 = g.OH * (p + 1) / parts;
    // Input rows the part reads; the padding rows it reads become its own top / bottom padding.
    const int64_t first = part->r0 * g.SH - g.pad_top, last = (part->r1 - 1) * g.SH - g.pad_top + ext_h - 1;
    part->in0 = std::max<int64_t>(0, first);
    const int64_t in_rows = std::min(g.H, last + 1) - part->in0;
    const int64_t pad_t = part->in0 - first, pad_b = std::max<int64_t>(0, last + 1 - g.H);
    if (in_rows <= 0) return "a part of the output reads no input row";
    part->mds.push_back(RowsDesc(api, g.C, in_rows, g.W, act_dt));
    part->mds.push_back(RowsDesc(api, g.M, part->r1 - part->r0, g.OW, act_dt));
    part->src = part->mds[0].md;
    part->dst = part->mds[1].md;
    // Post-ops: + residual (the sum post-op: what the output holds, the residual copied there unless the plan gave
    // the output the residual's buffer; int8 dequantises its codes), then the activation. (A binary add reading the
    // residual where it lies: ResNet-50 bf16's residual Convs 1.08x the time.)
    dnnl_post_ops_t po = nullptr;
    Check(api.dnnl_post_ops_create(&po), "post-ops");
    dnnl_status_t s = dnnl_success;
    if (o_.residual)
      s = o_.int8 ? api.dnnl_post_ops_append_sum(po, o_.res.scale, FoldsResidualZeroPoint() ? 0 : o_.res.zero_point,
                                                 dnnl_u8)
                  : api.dnnl_post_ops_append_sum(po, 1.f, 0, dnnl_bf16);
    if (s == dnnl_success && o_.act == EpilogueAct::kRelu)
      s = api.dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.f, 0.f);
    if (s == dnnl_success && o_.act == EpilogueAct::kRelu6)
      s = api.dnnl_post_ops_append_eltwise(po, dnnl_eltwise_clip, 0.f, 6.f);
    dnnl_primitive_attr_t attr = nullptr;
    if (s == dnnl_success) s = api.dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = api.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success) s = api.dnnl_primitive_attr_set_post_ops(attr, po);
    api.dnnl_post_ops_destroy(po);
    if (s == dnnl_success && o_.int8) {
      s = api.dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_SRC, 0);
      if (s == dnnl_success) s = api.dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_WEIGHTS, 1);   // per channel
      if (s == dnnl_success) s = api.dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_DST, 0);
      if (s == dnnl_success && in_zp) s = api.dnnl_primitive_attr_set_zero_points_mask(attr, DNNL_ARG_SRC, 0);
      if (s == dnnl_success && out_zp) s = api.dnnl_primitive_attr_set_zero_points_mask(attr, DNNL_ARG_DST, 0);
    }
    dnnl_primitive_desc_t pd = nullptr;
    if (s == dnnl_success) {
      const dnnl_dims_t strides = {g.SH, g.SW}, dilates = {g.DH - 1, g.DW - 1}, pad_l = {pad_t, g.pad_left},
                        pad_r = {pad_b, pad_right};
      s = api.dnnl_convolution_forward_primitive_desc_create(&pd, api.engine, dnnl_forward_inference,
                                                             dnnl_convolution_direct, part->src, wei_any.md,
                                                             has_bias ? bias_md_ : nullptr, part->dst, strides,
                                                             dilates, pad_l, pad_r, attr);
    }
    if (attr) api.dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return "oneDNN declines the convolution (status " + std::to_string(s) + ")";
    const char* impl = nullptr;
    api.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const std::string name = impl ? impl : "";
    // Its AMX kernels only: the others (reference, im2col + GEMM, AVX-512) are what lite's own kernels beat.
    if (name.find("amx") == std::string::npos) {
      api.dnnl_primitive_desc_destroy(pd);
      return "oneDNN offers no AMX kernel for it (" + name + ")";
    }
    const_dnnl_memory_desc_t wmd = api.dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (!weights_md_) {
      impl_ = name;
      Check(api.dnnl_memory_desc_clone(&weights_md_, wmd), "weights layout");
    } else if (!api.dnnl_memory_desc_equal(weights_md_, wmd)) {
      api.dnnl_primitive_desc_destroy(pd);
      return "the parts ask different weight layouts";
    }
    part->conv = MakePrimitive(api, pd, &part->conv_scratchpad);
    parts_.push_back(std::move(part));
  }
  // The weights, once: OIHW float32 (rounded to bf16) or int8 codes (with the compensation oneDNN keeps beside them
  // for a zero point) reordered into the kernel's layout. In huge pages (cpu/weight_pages.h): every inference streams
  // them once; with 4 KB pages ResNet-50's 7x7-plane layers (2-5 MB of weights each) ran 1.4x the time.
  const size_t bytes = api.dnnl_memory_desc_get_size(weights_md_);
  weight_store_.resize(bytes + 64);
  weights_ = AlignTo64(weight_store_.data());
  Check(api.dnnl_memory_desc_create_with_tag(&md, 4, wdims, o_.int8 ? dnnl_s8 : dnnl_f32, dnnl_oihw),
        "weights descriptor");
  Md wsrc(api, md);
  dnnl_primitive_attr_t rattr = UserScratchpadAttr(api);
  dnnl_primitive_desc_t rpd = nullptr;
  const dnnl_status_t rs =
      api.dnnl_reorder_primitive_desc_create(&rpd, wsrc.md, api.engine, weights_md_, api.engine, rattr);
  api.dnnl_primitive_attr_destroy(rattr);
  Check(rs, "weights reorder");
  Md wscratch(api, nullptr);
  dnnl_primitive_t reorder = MakePrimitive(api, rpd, &wscratch);
  std::vector<uint8_t> wscratch_bytes(ScratchpadBytes(api, wscratch) + 64);
  try {
    ArgMemories(api).Execute(reorder, {{DNNL_ARG_FROM, wsrc.md, w},
                                       {DNNL_ARG_TO, weights_md_, weights_},
                                       {DNNL_ARG_SCRATCHPAD, wscratch.md, AlignTo64(wscratch_bytes.data())}});
  } catch (...) {
    api.dnnl_primitive_destroy(reorder);
    throw;
  }
  api.dnnl_primitive_destroy(reorder);
  // An NCHW input: each part rearranges (bf16: and rounds) its share of the input rows into the nhwc copy.
  if (o_.nchw_input) {
    for (int p = 0; p < static_cast<int>(parts_.size()); ++p) {
      Part& part = *parts_[p];
      part.x0 = g.H * p / static_cast<int64_t>(parts_.size());
      part.x1 = g.H * (p + 1) / static_cast<int64_t>(parts_.size());
      if (part.x1 == part.x0 || OwnInputCopy()) continue;
      part.mds.push_back(NchwRowsDesc(api, g.C, g.H, part.x1 - part.x0, g.W));
      part.mds.push_back(RowsDesc(api, g.C, part.x1 - part.x0, g.W, act_dt));
      part.rsrc = part.mds[2].md;
      part.rdst = part.mds[3].md;
      rattr = UserScratchpadAttr(api);
      const dnnl_status_t is =
          api.dnnl_reorder_primitive_desc_create(&rpd, part.rsrc, api.engine, part.rdst, api.engine, rattr);
      api.dnnl_primitive_attr_destroy(rattr);
      Check(is, "input reorder");
      part.reorder = MakePrimitive(api, rpd, &part.reorder_scratchpad);
    }
  }
  // The run's scratch: the nhwc copy of an NCHW input, then each part's scratchpads (the parts run at once).
  scratch_bytes_ = o_.nchw_input ? Align64(static_cast<size_t>(g.C * g.H * g.W) * Value()) : 0;
  for (auto& part : parts_) {
    part->conv_scratchpad_at = scratch_bytes_;
    scratch_bytes_ += ScratchpadBytes(api, part->conv_scratchpad);
    part->reorder_scratchpad_at = scratch_bytes_;
    scratch_bytes_ += ScratchpadBytes(api, part->reorder_scratchpad);
  }
  return "";
}

OneDnnConv::OneDnnConv(Key) {}

OneDnnConv::~OneDnnConv() {
  if (const OneDnnApi* api = OneDnn()) {
    parts_.clear();
    for (dnnl_memory_desc* md : {weights_md_, bias_md_, scalar_md_, scales_md_, zp_md_})
      if (md) api->dnnl_memory_desc_destroy(md);
  }
}

std::vector<float> OneDnnConv::RunBias(const float* bias) const {
  if (!FoldsBias()) return {};
  std::vector<float> b(static_cast<size_t>(g_.M), 0.f);
  const float shift = (FoldsOutZeroPoint() ? static_cast<float>(o_.out.zero_point) * o_.out.scale : 0.f) -
                      (FoldsResidualZeroPoint() ? static_cast<float>(o_.res.zero_point) * o_.res.scale : 0.f);
  for (int64_t m = 0; m < g_.M; ++m) b[m] = (bias ? bias[m] : 0.f) + shift;
  return b;
}

size_t OneDnnConv::ScratchBytes() const { return scratch_bytes_; }

void OneDnnConv::Run(const void* x, const float* bias, const void* residual, void* y, void* scratch,
                     ThreadPool* pool) const {
  const OneDnnApi& api = *OneDnn();
  const ConvGeometry& g = g_;
  const int64_t n = static_cast<int64_t>(parts_.size()), v = static_cast<int64_t>(Value());
  auto each_part = [&](auto&& fn) {
    auto range = [&](int64_t b, int64_t e) {
      OneDnnSingleThread one(api);
      for (int64_t p = b; p < e; ++p) fn(*parts_[p]);
    };
    if (pool && n > 1) pool->ParallelFor(n, 1, range);
    else range(0, n);
  };
  const char* xr = static_cast<const char*>(x);
  char* scratch_bytes = static_cast<char*>(scratch);
  if (o_.nchw_input) {
    char* copy = scratch_bytes;
    each_part([&](const Part& p) {
      if (OwnInputCopy() && p.x1 > p.x0)
        FewChannelsToNhwcBf16(static_cast<const float*>(x), g.C, g.H, g.W, p.x0, p.x1,
                              reinterpret_cast<uint16_t*>(copy + p.x0 * g.W * g.C * v));
      else if (p.reorder)
        p.reorder_args.Execute(p.reorder,
                               {{DNNL_ARG_FROM, p.rsrc, xr + p.x0 * g.W * static_cast<int64_t>(sizeof(float))},
                                {DNNL_ARG_TO, p.rdst, copy + p.x0 * g.W * g.C * v},
                                {DNNL_ARG_SCRATCHPAD, p.reorder_scratchpad.md,
                                 scratch_bytes + p.reorder_scratchpad_at}});
    });
    xr = copy;
  }
  char* yr = static_cast<char*>(y);
  const char* res = static_cast<const char*>(residual);
  const float in_scale = o_.in.scale, out_scale = o_.out.scale;
  const int32_t in_zp = o_.in.zero_point, out_zp = o_.out.zero_point;
  const bool q = o_.int8, out_zp_arg = q && out_zp && !FoldsOutZeroPoint();
  if (FoldsBias() && !bias) throw std::logic_error("OneDnnConv: the folded bias (RunBias) must be passed");
  each_part([&](const Part& p) {
    const int64_t out0 = p.r0 * g.OW * g.M * v;
    // The sum post-op adds what the output holds: the residual, copied there unless it is the output.
    if (o_.residual && res != yr)
      std::memcpy(yr + out0, res + out0, static_cast<size_t>((p.r1 - p.r0) * g.OW * g.M * v));
    p.conv_args.Execute(p.conv,
                        {{DNNL_ARG_SRC, p.src, xr + p.in0 * g.W * g.C * v},
                         {DNNL_ARG_WEIGHTS, weights_md_, weights_},
                         {DNNL_ARG_BIAS, o_.bias || FoldsBias() ? bias_md_ : nullptr, bias},
                         {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, q ? scalar_md_ : nullptr, &in_scale},
                         {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, q ? scales_md_ : nullptr, weight_scales_.data()},
                         {DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, q ? scalar_md_ : nullptr, &out_scale},
                         {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, q && in_zp ? zp_md_ : nullptr, &in_zp},
                         {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, out_zp_arg ? zp_md_ : nullptr, &out_zp},
                         {DNNL_ARG_SCRATCHPAD, p.conv_scratchpad.md, scratch_bytes + p.conv_scratchpad_at},
                         {DNNL_ARG_DST, p.dst, yr + out0}});
  });
  // The row after the pixels, which the next Conv's padding taps read: zeros (bf16) or the zero point (codes).
  std::memset(yr + g.OH * g.OW * g.M * v, q ? out_zp : 0, static_cast<size_t>(g.M * v));
}

#else  // built without oneDNN

struct OneDnnConv::Part {};
std::shared_ptr<const OneDnnConv> OneDnnConv::Create(const ConvGeometry&, const void*, const float*, const Options&,
                                                     std::string* why) {
  if (why) *why = OneDnnStatus();
  return nullptr;
}
OneDnnConv::OneDnnConv(Key) {}
OneDnnConv::~OneDnnConv() = default;
size_t OneDnnConv::ScratchBytes() const { return 0; }
std::vector<float> OneDnnConv::RunBias(const float*) const { return {}; }
void OneDnnConv::Run(const void*, const float*, const void*, void*, void*, ThreadPool*) const {
  throw std::logic_error("OneDnnConv: built without oneDNN");
}
std::string OneDnnConv::Build(const void*, int) { return "not built in"; }
bool OneDnnConv::Worthwhile(const ConvGeometry&, int, bool) { return false; }

#endif

}  // namespace lite
