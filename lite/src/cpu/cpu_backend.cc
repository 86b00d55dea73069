// The CPU backend: aligned host memory and the CPU kernel registry.
#include <cstdlib>

#include "core/kernel.h"
#include "kernels/register.h"

namespace lite {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  CpuBackend() {
    RegisterElementwiseKernels(registry_);
    RegisterLinearKernels(registry_);
    RegisterConvKernels(registry_);
    RegisterConvTransposeKernels(registry_);
    RegisterResizeKernels(registry_);
    RegisterPoolKernels(registry_);
    RegisterNormKernels(registry_);
    RegisterShapeKernels(registry_);
    RegisterIndexKernels(registry_);
    RegisterMiscKernels(registry_);
    RegisterRecurrentKernels(registry_);
    RegisterSpectralKernels(registry_);
    RegisterControlFlowKernels(registry_);
  }
  const char* name() const override { return "CPU"; }
  const KernelRegistry& kernels() const override { return registry_; }
  std::shared_ptr<void> Allocate(size_t bytes) const override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }

 private:
  KernelRegistry registry_;
};

}  // namespace

const DeviceBackend& GetBackend(const std::string& target) {
  static const CpuBackend cpu;
  if (target == "cpu" || target == "CPU") return cpu;
  throw NotSupported("device target '" + target + "' is not available in this build (available: cpu)");
}

}  // namespace lite
