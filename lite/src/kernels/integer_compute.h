// Kernels for nodes marked for integer arithmetic (format 1.8, Node.int8); see integer_compute.cc.
#pragma once
#include <memory>

#include "core/kernel.h"

namespace lite {

std::unique_ptr<Kernel> MakeIntegerLinearKernel(const NodeRec& node);   // MatMul, Gemm
std::unique_ptr<Kernel> MakeIntegerConvKernel(const NodeRec& node);

// A node the converter marked for integer arithmetic.
inline bool IsIntegerCompute(const NodeRec& node) { return node.fb != nullptr && node.fb->int8() != nullptr; }

}  // namespace lite
