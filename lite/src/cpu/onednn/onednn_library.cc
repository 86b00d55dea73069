#include "cpu/onednn/onednn_library.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "cpu/onednn/onednn_api.h"

#if LITE_WITH_ONEDNN
#include <dlfcn.h>
#endif

namespace lite {

namespace {
std::atomic<long> g_convolutions{0};
}  // namespace

long OneDnnConvolutionsCreated() { return g_convolutions.load(); }
void CountOneDnnConvolution() { ++g_convolutions; }

#if LITE_WITH_ONEDNN

namespace {

struct Loaded {
  OneDnnApi api;
  bool ok = false;
  std::string status;
};

// The library's candidates in order (onednn_library.h).
std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("LITE_ONEDNN_LIBRARY"); p && *p) out.emplace_back(p);
#ifdef LITE_ONEDNN_DEFAULT_LIBRARY
  out.emplace_back(LITE_ONEDNN_DEFAULT_LIBRARY);
#endif
  out.emplace_back("libdnnl.so.3");
  return out;
}

Loaded Load() {
  Loaded l;
  if (const char* v = std::getenv("LITE_ONEDNN"); v && std::string(v) == "0") {
    l.status = "LITE_ONEDNN=0";
    return l;
  }
  void* handle = nullptr;
  std::string path, errors;
  for (const std::string& c : Candidates()) {
    // RTLD_LOCAL: its symbols (and its OpenMP's) stay out of the global namespace of the host process.
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      path = c;
      break;
    }
    const char* e = dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e ? e : c.c_str());
  }
  if (!handle) {
    l.status = "no libdnnl.so.3 (" + errors + ")";
    return l;
  }
  // dlsym on the library's handle also searches its dependencies: OpenMP's entry points are libgomp's.
  auto resolve = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn && l.status.empty()) l.status = path + " lacks " + name;
  };
#define LITE_ONEDNN_RESOLVE(name) resolve(#name, l.api.name);
  LITE_ONEDNN_FUNCTIONS(LITE_ONEDNN_RESOLVE)
#undef LITE_ONEDNN_RESOLVE
  resolve("omp_get_max_threads", l.api.omp_get_max_threads);
  resolve("omp_set_num_threads", l.api.omp_set_num_threads);
  if (!l.status.empty()) return l;   // a symbol missing: the handle stays open, unused
  const dnnl_version_t* v = l.api.dnnl_version();
  if (v->major != DNNL_VERSION_MAJOR) {
    l.status = path + " is oneDNN " + std::to_string(v->major) + ", built against " +
               std::to_string(DNNL_VERSION_MAJOR);
    return l;
  }
  if (l.api.dnnl_engine_create(&l.api.engine, dnnl_cpu, 0) != dnnl_success) {
    l.status = path + ": no CPU engine";
    return l;
  }
  l.ok = true;
  l.status = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
             " (" + path + ")";
  return l;
}

const Loaded& Library() {
  static const Loaded loaded = Load();
  return loaded;
}

// Destroys the thread's stream when the thread ends (the library is never unloaded).
struct ThreadStream {
  const OneDnnApi* api = nullptr;
  dnnl_stream_t stream = nullptr;
  ~ThreadStream() {
    if (stream) api->dnnl_stream_destroy(stream);
  }
};

}  // namespace

const OneDnnApi* OneDnn() {
  const Loaded& l = Library();
  return l.ok ? &l.api : nullptr;
}

std::string OneDnnStatus() { return Library().status; }

dnnl_stream_t OneDnnThreadStream(const OneDnnApi& api) {
  thread_local ThreadStream ts;
  if (!ts.stream) {
    if (api.dnnl_stream_create(&ts.stream, api.engine, dnnl_stream_default_flags) != dnnl_success)
      throw std::runtime_error("oneDNN: cannot create a stream on the CPU engine");
    ts.api = &api;
  }
  return ts.stream;
}

#else  // built without oneDNN's header

const OneDnnApi* OneDnn() { return nullptr; }
std::string OneDnnStatus() { return "not built in (no oneapi/dnnl/dnnl.h at build time)"; }

#endif

}  // namespace lite
