// The CPU backend: aligned host memory and the CPU kernel registry.
#include <cstdlib>

#include "cpu/precision.h"
#include "core/kernel.h"
#include "cpu/buffer_cache.h"
#include "cpu/gemm/dynamic_quant_gemm.h"
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
    RegisterAttentionKernels(registry_);
    RegisterRotaryKernels(registry_);
    RegisterMoEKernels(registry_);
    RegisterLinearAttentionKernels(registry_);
    RegisterDetectionKernels(registry_);
  }
  const char* name() const override { return "CPU"; }
  const KernelRegistry& kernels() const override { return registry_; }
  std::string ComputePrecision(const std::string& mode) const override { return ResolveComputePrecision(mode); }
  bool RunsDynamicQuant() const override { return DqGemmAvailable(); }
  std::shared_ptr<void> Allocate(size_t bytes) const override { return buffers_.Get(bytes); }

 private:
  KernelRegistry registry_;
  mutable BufferCache buffers_;
};

}  // namespace

const DeviceBackend& GetBackend(const std::string& target) {
  static const CpuBackend cpu;
  if (target == "cpu" || target == "CPU") return cpu;
  throw NotSupported("device target '" + target + "' is not available in this build (available: cpu)");
}

}  // namespace lite
