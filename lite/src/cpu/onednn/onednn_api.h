// The oneDNN C entry points lite calls, resolved from the library loaded at run time (onednn_library.h). Included
// only by the oneDNN sources, and only where the build found oneDNN's header (LITE_WITH_ONEDNN).
#pragma once
#if LITE_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>

namespace lite {

#define LITE_ONEDNN_FUNCTIONS(X)                                                                              \
  X(dnnl_version) X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_wait) X(dnnl_stream_destroy)      \
  X(dnnl_memory_desc_create_with_tag) X(dnnl_memory_desc_create_with_strides) X(dnnl_memory_desc_destroy)     \
  X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size) X(dnnl_memory_desc_clone) X(dnnl_memory_create)      \
  X(dnnl_memory_set_data_handle) X(dnnl_memory_destroy) X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)                         \
  X(dnnl_primitive_attr_set_post_ops) X(dnnl_primitive_attr_set_scales_mask)                                  \
  X(dnnl_primitive_attr_set_scratchpad_mode)                                                                  \
  X(dnnl_primitive_attr_set_zero_points_mask) X(dnnl_post_ops_create) X(dnnl_post_ops_destroy)                \
  X(dnnl_post_ops_append_eltwise) X(dnnl_post_ops_append_sum)                                               \
  X(dnnl_convolution_forward_primitive_desc_create) X(dnnl_reorder_primitive_desc_create)                     \
  X(dnnl_primitive_desc_query) X(dnnl_primitive_desc_query_md) X(dnnl_primitive_desc_destroy)                 \
  X(dnnl_primitive_create) X(dnnl_primitive_destroy) X(dnnl_primitive_execute)

struct OneDnnApi {
#define LITE_ONEDNN_MEMBER(name) decltype(&::name) name = nullptr;
  LITE_ONEDNN_FUNCTIONS(LITE_ONEDNN_MEMBER)
#undef LITE_ONEDNN_MEMBER
  // OpenMP's (libgomp, the library's dependency): each call runs with one OpenMP thread (OneDnnSingleThread).
  int (*omp_get_max_threads)() = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;
  dnnl_engine_t engine = nullptr;   // the CPU engine, for the process's lifetime
};

// The calling thread's stream on the CPU engine (oneDNN streams are not shared between threads).
dnnl_stream_t OneDnnThreadStream(const OneDnnApi& api);

// For its lifetime, oneDNN primitives called on this thread run on it alone (OpenMP's thread count 1, restored after:
// the caller may be the user's thread).
class OneDnnSingleThread {
 public:
  explicit OneDnnSingleThread(const OneDnnApi& api) : api_(api), saved_(api.omp_get_max_threads()) {
    if (saved_ != 1) api_.omp_set_num_threads(1);
  }
  ~OneDnnSingleThread() {
    if (saved_ != 1) api_.omp_set_num_threads(saved_);
  }
  OneDnnSingleThread(const OneDnnSingleThread&) = delete;
  OneDnnSingleThread& operator=(const OneDnnSingleThread&) = delete;

 private:
  const OneDnnApi& api_;
  int saved_;
};

}  // namespace lite
#endif  // LITE_WITH_ONEDNN
