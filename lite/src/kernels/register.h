// Registration entry points of the CPU kernel families (explicit: static libraries drop self-registration).
#pragma once
#include "core/kernel.h"

namespace lite {
void RegisterElementwiseKernels(KernelRegistry& r);
void RegisterLinearKernels(KernelRegistry& r);
void RegisterConvKernels(KernelRegistry& r);
void RegisterConvTransposeKernels(KernelRegistry& r);
void RegisterResizeKernels(KernelRegistry& r);
void RegisterPoolKernels(KernelRegistry& r);
void RegisterNormKernels(KernelRegistry& r);
void RegisterShapeKernels(KernelRegistry& r);
void RegisterIndexKernels(KernelRegistry& r);
void RegisterMiscKernels(KernelRegistry& r);
void RegisterRecurrentKernels(KernelRegistry& r);
void RegisterSpectralKernels(KernelRegistry& r);
void RegisterControlFlowKernels(KernelRegistry& r);
void RegisterAttentionKernels(KernelRegistry& r);
void RegisterRotaryKernels(KernelRegistry& r);
void RegisterMoEKernels(KernelRegistry& r);
void RegisterLinearAttentionKernels(KernelRegistry& r);
void RegisterDetectionKernels(KernelRegistry& r);
}  // namespace lite
