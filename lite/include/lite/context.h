// Execution settings for a Model.
#pragma once
#include <string>

namespace lite {

struct Context {
  std::string target = "cpu";   // only "cpu" exists today; device backends plug in behind it
  int thread_num = 1;           // worker threads including the caller; exactly this many run kernels
  bool bind_cores = false;      // pin workers to cores (Linux only; ignored elsewhere)
};

}  // namespace lite
