// A pool of workers serving one model to many threads (MindSpore Lite's ModelParallelRunner): Predict may be called
// from any number of threads at once; each call waits for a free worker (first come, first served) and runs on it.
// The workers share one copy of the weights (the file mapping and every packed weight); each has its own activation
// arena and Context::thread_num threads (the calling thread counts as one of them).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lite/context.h"
#include "lite/tensor.h"

namespace lite {

struct RunnerConfig {
  Context context;       // each worker's settings (thread_num threads per worker)
  int workers_num = 0;   // 0: the CPUs this process may use / thread_num, at least 1
};

class ModelParallelRunner {
 public:
  ModelParallelRunner();
  ~ModelParallelRunner();
  ModelParallelRunner(const ModelParallelRunner&) = delete;
  ModelParallelRunner& operator=(const ModelParallelRunner&) = delete;

  // Loads `path` once and builds config.workers_num workers on its weights. Throws as Model::BuildFromFile does.
  void Init(const std::string& path, const RunnerConfig& config = RunnerConfig());

  bool IsBuilt() const;
  int WorkersNum() const;
  std::vector<TensorInfo> GetInputs() const;    // as declared by the file (-1 = any)
  std::vector<TensorInfo> GetOutputs() const;

  // Thread safe. Runs on the first worker free; the inputs are the caller's until it returns.
  std::vector<Tensor> Predict(const std::vector<TensorView>& inputs);
  std::vector<Tensor> Predict(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lite
