// oneDNN, loaded at run time (issue 36: "if a maintained library does a primitive better, measure it and use it
// behind the backend interface where it wins"). Its AMX convolutions run ResNet-50's bf16 Convs in 0.74x lite's own
// tiles' time (benchmarks/results/onednn_xeon.md), so the CPU backend hands them such Convs where the library is
// present (cpu/onednn/onednn_conv.h). The library is never linked: a build needs only its C API header (PyPI
// onednn-devel-cpu-gomp; without it the runtime is built without this path), and a process without the shared library
// (PyPI onednn-cpu-gomp, or a system libdnnl.so.3) keeps lite's kernels.
//
// Where the library is looked for, first found wins: $LITE_ONEDNN_LIBRARY, the build's Python prefix
// (<prefix>/lib/libdnnl.so.3, where pip puts onednn-cpu-gomp), then the loader's search path. LITE_ONEDNN=0 in the
// environment keeps it unloaded (for comparisons).
//
// Threads: the PyPI build runs its primitives on OpenMP (libgomp), and a kernel fixes its thread count when it is
// made. lite makes and calls each primitive with OpenMP's thread count set to 1 on the calling thread
// (OneDnnSingleThread), from its own pool's threads, so no second thread runtime ever starts beside lite's pool on the
// same cores; the work is split between lite's threads by output rows.
#pragma once
#include <string>

namespace lite {

struct OneDnnApi;   // the library's C entry points (onednn_library.cc)

// The loaded library, or nullptr where the build has no oneDNN support, LITE_ONEDNN=0, or no library loads (the
// reason in OneDnnStatus). Loaded once, on first use; never unloaded.
const OneDnnApi* OneDnn();

// "oneDNN 3.2.0 (<path>)" where loaded, else why not ("not built in", "LITE_ONEDNN=0", "no libdnnl.so.3: ...").
std::string OneDnnStatus();

// How many convolution primitives lite has created on oneDNN in this process (tests check the path was taken).
long OneDnnConvolutionsCreated();
void CountOneDnnConvolution();

}  // namespace lite
