// ModelParallelRunner: workers built on one model's weights, handed to callers in the order they asked.
#include "lite/model_parallel_runner.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "lite/errors.h"
#include "lite/model.h"
#include "core/thread_pool.h"

namespace lite {

struct ModelParallelRunner::Impl {
  std::vector<std::unique_ptr<Model>> workers;
  std::vector<TensorInfo> inputs, outputs;
  std::mutex mu;
  std::condition_variable freed;
  std::deque<int> idle;                       // workers waiting for a request
  uint64_t next_ticket = 0, now_serving = 0;  // callers are served in the order they arrived

  int Acquire() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t ticket = next_ticket++;
    freed.wait(lock, [&] { return ticket == now_serving && !idle.empty(); });
    ++now_serving;
    const int w = idle.front();
    idle.pop_front();
    lock.unlock();
    freed.notify_all();   // the next ticket may find another idle worker
    return w;
  }

  void Release(int w) {
    {
      std::lock_guard<std::mutex> lock(mu);
      idle.push_back(w);
    }
    freed.notify_all();
  }
};

ModelParallelRunner::ModelParallelRunner() = default;
ModelParallelRunner::~ModelParallelRunner() = default;

void ModelParallelRunner::Init(const std::string& path, const RunnerConfig& config) {
  if (config.workers_num < 0 || config.workers_num > 1024)
    throw InvalidArgument("RunnerConfig.workers_num must be in [0, 1024] (0: as many as the CPUs allow), got " +
                          std::to_string(config.workers_num));
  if (config.context.thread_num < 1)
    throw InvalidArgument("Context.thread_num must be at least 1, got " + std::to_string(config.context.thread_num));
  const int workers = config.workers_num > 0 ? config.workers_num
                                             : std::max<int>(1, UsableCpus().size() / config.context.thread_num);
  // Pinned workers get cores of their own: worker k's threads start thread_num * k places along the list.
  const std::vector<int> cores =
      AffinityCores(config.context.thread_affinity_mode, config.context.thread_affinity_core_list);
  auto context_of = [&](int k) {
    Context c = config.context;
    if (!cores.empty()) {
      c.thread_affinity_core_list.clear();
      for (size_t i = 0; i < cores.size(); ++i)
        c.thread_affinity_core_list.push_back(cores[(i + static_cast<size_t>(k) * c.thread_num) % cores.size()]);
    }
    return c;
  };
  auto fresh = std::make_unique<Impl>();
  auto first = std::make_unique<Model>();
  first->BuildFromFile(path, context_of(0));
  fresh->inputs = first->GetInputs();
  fresh->outputs = first->GetOutputs();
  fresh->workers.push_back(std::move(first));
  for (int w = 1; w < workers; ++w) {
    auto worker = std::make_unique<Model>();
    worker->BuildOnWeightsOf(*fresh->workers.front(), context_of(w));
    fresh->workers.push_back(std::move(worker));
  }
  for (int w = 0; w < workers; ++w) fresh->idle.push_back(w);
  impl_ = std::move(fresh);   // a failed Init leaves the runner as it was
}

bool ModelParallelRunner::IsBuilt() const { return impl_ != nullptr; }

static ModelParallelRunner::Impl* Require(const std::unique_ptr<ModelParallelRunner::Impl>& impl) {
  if (!impl) throw InvalidArgument("the runner is not built; call Init (build_from_file) first");
  return impl.get();
}

int ModelParallelRunner::WorkersNum() const { return static_cast<int>(Require(impl_)->workers.size()); }
std::vector<TensorInfo> ModelParallelRunner::GetInputs() const { return Require(impl_)->inputs; }
std::vector<TensorInfo> ModelParallelRunner::GetOutputs() const { return Require(impl_)->outputs; }

std::vector<Tensor> ModelParallelRunner::Predict(const std::vector<TensorView>& inputs) { return Predict(inputs, {}); }

std::vector<Tensor> ModelParallelRunner::Predict(const std::vector<TensorView>& inputs,
                                                 const std::vector<OutputView>& outputs) {
  Impl& impl = *Require(impl_);
  const int w = impl.Acquire();
  struct Return {   // the worker goes back to the pool whatever the run threw
    Impl& impl;
    int w;
    ~Return() { impl.Release(w); }
  } give_back{impl, w};
  return impl.workers[w]->Predict(inputs, outputs);
}

}  // namespace lite
