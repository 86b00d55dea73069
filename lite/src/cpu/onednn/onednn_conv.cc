#include "cpu/onednn/onednn_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/aligned.h"
#include "cpu/onednn/onednn_api.h"
#include "cpu/onednn/onednn_library.h"

namespace lite {

#if LITE_WITH_ONEDNN

namespace {

void Check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) throw std::runtime_error(std::string("oneDNN: ") + what + " failed (status " + std::to_string(s) + ")");
}

// Owners of the C API's handles (destroyed through the loaded library).
struct Md {
  const OneDnnApi* api = nullptr;
  dnnl_memory_desc_t md = nullptr;
  Md(const OneDnnApi& a, dnnl_memory_desc_t m) : api(&a), md(m) {}
  Md(Md&& o) noexcept : api(o.api), md(o.md) { o.md = nullptr; }
  Md(const Md&) = delete;
  ~Md() {
    if (md) api->dnnl_memory_desc_destroy(md);
  }
};

// A dense 4-D descriptor [1, C, rows, W] of `dt` in nhwc (pixel-major: bf16 rows with stride C) or nchw.
Md Desc(const OneDnnApi& api, int64_t C, int64_t rows, int64_t W, dnnl_data_type_t dt, bool nhwc) {
  const dnnl_dims_t dims = {1, C, rows, W};
  dnnl_memory_desc_t md = nullptr;
  Check(api.dnnl_memory_desc_create_with_tag(&md, 4, dims, dt, nhwc ? dnnl_nhwc : dnnl_nchw), "memory descriptor");
  return Md(api, md);
}

// A sub-block of rows of an NCHW float32 image of H rows: [1, C, rows, W] with the whole image's strides.
Md NchwRowsDesc(const OneDnnApi& api, int64_t C, int64_t H, int64_t rows, int64_t W) {
  const dnnl_dims_t dims = {1, C, rows, W}, strides = {C * H * W, H * W, W, 1};
  dnnl_memory_desc_t md = nullptr;
  Check(api.dnnl_memory_desc_create_with_strides(&md, 4, dims, dnnl_f32, strides), "memory descriptor");
  return Md(api, md);
}

// Runs `prim` on this thread's stream with (arg, md, pointer) memories made for the call.
struct Arg {
  int arg;
  const_dnnl_memory_desc_t md;
  const void* data;
};
void Execute(const OneDnnApi& api, dnnl_primitive_t prim, std::initializer_list<Arg> args) {
  dnnl_exec_arg_t ea[6];
  int n = 0;
  for (const Arg& a : args) {
    if (!a.md) continue;
    Check(api.dnnl_memory_create(&ea[n].memory, a.md, api.engine, const_cast<void*>(a.data)), "memory");
    ea[n++].arg = a.arg;
  }
  const dnnl_status_t s = api.dnnl_primitive_execute(prim, OneDnnThreadStream(api), n, ea);
  for (int i = 0; i < n; ++i) api.dnnl_memory_destroy(ea[i].memory);
  Check(s, "primitive execution");
}

dnnl_primitive_t MakePrimitive(const OneDnnApi& api, dnnl_primitive_desc_t pd) {
  dnnl_primitive_t p = nullptr;
  const dnnl_status_t s = api.dnnl_primitive_create(&p, pd);
  api.dnnl_primitive_desc_destroy(pd);
  Check(s, "primitive creation");
  return p;
}

}  // namespace

// Output rows [r0, r1): a primitive over input rows [in0, in0 + in_rows) with its own vertical padding; for an NCHW
// input also the reorder of input rows [x0, x1) into the bf16 copy.
struct OneDnnConv::Part {
  const OneDnnApi* api = nullptr;
  int64_t r0 = 0, r1 = 0, in0 = 0, x0 = 0, x1 = 0;
  dnnl_primitive_t conv = nullptr, reorder = nullptr;
  std::vector<Md> mds;   // src, dst (and residual) of the convolution; the reorder's src and dst
  const_dnnl_memory_desc_t src = nullptr, dst = nullptr, rsrc = nullptr, rdst = nullptr;
  ~Part() {
    if (conv) api->dnnl_primitive_destroy(conv);
    if (reorder) api->dnnl_primitive_destroy(reorder);
  }
};

std::shared_ptr<const OneDnnConv> OneDnnConv::Create(const ConvGeometry& g, const float* w, const Options& o,
                                                     std::string* why) {
  if (!OneDnn()) {
    if (why) *why = OneDnnStatus();
    return nullptr;
  }
  // Kernels fix their thread count when made: made with one OpenMP thread, they run on the calling thread alone.
  OneDnnSingleThread one(*OneDnn());
  std::shared_ptr<OneDnnConv> c(new OneDnnConv());
  c->g_ = g;
  c->o_ = o;
  const int parts = static_cast<int>(std::clamp<int64_t>(o.parts, 1, g.OH));
  std::string err = c->Build(w, parts);
  if (!err.empty() && parts > 1) {   // the parts would not share one weight layout: one part, on one thread
    c.reset(new OneDnnConv());
    c->g_ = g;
    c->o_ = o;
    err = c->Build(w, 1);
  }
  if (!err.empty()) {
    if (why) *why = err;
    return nullptr;
  }
  CountOneDnnConvolution();
  return c;
}

std::string OneDnnConv::Build(const float* w, int parts) {
  const OneDnnApi& api = *OneDnn();
  const ConvGeometry& g = g_;
  const int64_t ext_h = (g.KH - 1) * g.DH + 1, ext_w = (g.KW - 1) * g.DW + 1;
  const int64_t pad_right = std::max<int64_t>(0, (g.OW - 1) * g.SW + ext_w - g.W - g.pad_left);
  const dnnl_dims_t wdims = {g.M, g.C, g.KH, g.KW}, bdims = {g.M};
  dnnl_memory_desc_t md = nullptr;
  Check(api.dnnl_memory_desc_create_with_tag(&md, 4, wdims, dnnl_bf16, dnnl_format_tag_any), "weights descriptor");
  Md wei_any(api, md);
  Check(api.dnnl_memory_desc_create_with_tag(&md, 1, bdims, dnnl_f32, dnnl_x), "bias descriptor");
  bias_md_ = md;
  for (int p = 0; p < parts; ++p) {
    auto part = std::make_unique<Part>();
    part->api = &api;
    part->r0 = g.OH * p / parts;
    part->r1 = g.OH * (p + 1) / parts;
    // Input rows the part reads; the padding rows it reads become its own top / bottom padding.
    const int64_t first = part->r0 * g.SH - g.pad_top, last = (part->r1 - 1) * g.SH - g.pad_top + ext_h - 1;
    part->in0 = std::max<int64_t>(0, first);
    const int64_t in_rows = std::min(g.H, last + 1) - part->in0;
    const int64_t pad_t = part->in0 - first, pad_b = std::max<int64_t>(0, last + 1 - g.H);
    if (in_rows <= 0) return "a part of the output reads no input row";
    part->mds.push_back(Desc(api, g.C, in_rows, g.W, dnnl_bf16, true));
    part->mds.push_back(Desc(api, g.M, part->r1 - part->r0, g.OW, dnnl_bf16, true));
    part->src = part->mds[0].md;
    part->dst = part->mds[1].md;
    // Post-ops: + residual (binary add in the output's own layout), then the activation.
    dnnl_post_ops_t po = nullptr;
    Check(api.dnnl_post_ops_create(&po), "post-ops");
    dnnl_status_t s = dnnl_success;
    if (o_.residual) s = api.dnnl_post_ops_append_binary(po, dnnl_binary_add, part->dst);
    if (s == dnnl_success && o_.act == EpilogueAct::kRelu) s = api.dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.f, 0.f);
    if (s == dnnl_success && o_.act == EpilogueAct::kRelu6) s = api.dnnl_post_ops_append_eltwise(po, dnnl_eltwise_clip, 0.f, 6.f);
    dnnl_primitive_attr_t attr = nullptr;
    if (s == dnnl_success) s = api.dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = api.dnnl_primitive_attr_set_post_ops(attr, po);
    api.dnnl_post_ops_destroy(po);
    dnnl_primitive_desc_t pd = nullptr;
    if (s == dnnl_success) {
      const dnnl_dims_t strides = {g.SH, g.SW}, dilates = {g.DH - 1, g.DW - 1}, pad_l = {pad_t, g.pad_left},
                        pad_r = {pad_b, pad_right};
      s = api.dnnl_convolution_forward_primitive_desc_create(&pd, api.engine, dnnl_forward_inference,
                                                             dnnl_convolution_direct, part->src, wei_any.md,
                                                             o_.bias ? bias_md_ : nullptr, part->dst, strides,
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
    part->conv = MakePrimitive(api, pd);
    parts_.push_back(std::move(part));
  }
  // The weights, once: float32 OIHW reordered (and rounded to bf16) into the kernel's layout.
  const size_t bytes = api.dnnl_memory_desc_get_size(weights_md_);
  // In huge pages (cpu/weight_pages.h): every inference streams them once; with 4 KB pages ResNet-50's 7x7-plane
  // layers (2-5 MB of weights each) ran 1.4x the time.
  weight_store_.resize(bytes + 64);
  weights_ = AlignTo64(weight_store_.data());
  Check(api.dnnl_memory_desc_create_with_tag(&md, 4, wdims, dnnl_f32, dnnl_oihw), "weights descriptor");
  Md wsrc(api, md);
  dnnl_primitive_desc_t rpd = nullptr;
  Check(api.dnnl_reorder_primitive_desc_create(&rpd, wsrc.md, api.engine,
                                               weights_md_, api.engine, nullptr),
        "weights reorder");
  dnnl_primitive_t reorder = MakePrimitive(api, rpd);
  Execute(api, reorder, {{DNNL_ARG_FROM, wsrc.md, w}, {DNNL_ARG_TO, weights_md_, weights_}});
  api.dnnl_primitive_destroy(reorder);
  // An NCHW float32 input: each part rounds its share of the input rows into the bf16 nhwc copy.
  if (o_.nchw_input) {
    for (int p = 0; p < static_cast<int>(parts_.size()); ++p) {
      Part& part = *parts_[p];
      part.x0 = g.H * p / static_cast<int64_t>(parts_.size());
      part.x1 = g.H * (p + 1) / static_cast<int64_t>(parts_.size());
      if (part.x1 == part.x0) continue;
      part.mds.push_back(NchwRowsDesc(api, g.C, g.H, part.x1 - part.x0, g.W));
      part.mds.push_back(Desc(api, g.C, part.x1 - part.x0, g.W, dnnl_bf16, true));
      part.rsrc = part.mds[2].md;
      part.rdst = part.mds[3].md;
      Check(api.dnnl_reorder_primitive_desc_create(&rpd, part.rsrc, api.engine, part.rdst, api.engine, nullptr),
            "input reorder");
      part.reorder = MakePrimitive(api, rpd);
    }
  }
  return "";
}

OneDnnConv::~OneDnnConv() {
  if (const OneDnnApi* api = OneDnn()) {
    parts_.clear();
    if (weights_md_) api->dnnl_memory_desc_destroy(weights_md_);
    if (bias_md_) api->dnnl_memory_desc_destroy(bias_md_);
  }
}

size_t OneDnnConv::ScratchBytes() const {
  return o_.nchw_input ? static_cast<size_t>(g_.C * g_.H * g_.W) * sizeof(uint16_t) : 0;
}

void OneDnnConv::Run(const void* x, const float* bias, const uint16_t* residual, uint16_t* y, void* scratch,
                     ThreadPool* pool) const {
  const OneDnnApi& api = *OneDnn();
  const ConvGeometry& g = g_;
  const int64_t n = static_cast<int64_t>(parts_.size());
  auto each_part = [&](auto&& fn) {
    auto range = [&](int64_t b, int64_t e) {
      OneDnnSingleThread one(api);
      for (int64_t p = b; p < e; ++p) fn(*parts_[p]);
    };
    if (pool && n > 1) pool->ParallelFor(n, 1, range);
    else range(0, n);
  };
  const uint16_t* x16 = static_cast<const uint16_t*>(x);
  if (o_.nchw_input) {
    uint16_t* copy = static_cast<uint16_t*>(scratch);
    each_part([&](const Part& p) {
      if (p.reorder)
        Execute(api, p.reorder, {{DNNL_ARG_FROM, p.rsrc, static_cast<const float*>(x) + p.x0 * g.W},
                                 {DNNL_ARG_TO, p.rdst, copy + p.x0 * g.W * g.C}});
    });
    x16 = copy;
  }
  const auto wmd = weights_md_;
  each_part([&](const Part& p) {
    const int64_t out0 = p.r0 * g.OW * g.M;
    Execute(api, p.conv, {{DNNL_ARG_SRC, p.src, x16 + p.in0 * g.W * g.C},
                          {DNNL_ARG_WEIGHTS, wmd, weights_},
                          {DNNL_ARG_BIAS, o_.bias ? bias_md_ : nullptr, bias},
                          {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, o_.residual ? p.dst : nullptr,
                           residual ? residual + out0 : nullptr},
                          {DNNL_ARG_DST, p.dst, y + out0}});
  });
  // The row of zeros after the pixels, which the next Conv's padding taps read.
  std::memset(y + g.OH * g.OW * g.M, 0, static_cast<size_t>(g.M) * sizeof(uint16_t));
}

#else  // built without oneDNN

struct OneDnnConv::Part {};
std::shared_ptr<const OneDnnConv> OneDnnConv::Create(const ConvGeometry&, const float*, const Options&,
                                                     std::string* why) {
  if (why) *why = OneDnnStatus();
  return nullptr;
}
OneDnnConv::~OneDnnConv() = default;
size_t OneDnnConv::ScratchBytes() const { return 0; }
void OneDnnConv::Run(const void*, const float*, const uint16_t*, uint16_t*, void*, ThreadPool*) const {
  throw std::logic_error("OneDnnConv: built without oneDNN");
}
std::string OneDnnConv::Build(const float*, int) { return "not built in"; }

#endif

}  // namespace lite
