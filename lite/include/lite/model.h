// Load a .ms file and run it.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lite/context.h"
#include "lite/errors.h"
#include "lite/tensor.h"
#include "lite/types.h"

namespace lite {

// Time one node took in the last profiled run (see Model::SetProfiling).
struct NodeProfile {
  std::string name;
  std::string op;
  double start_us = 0;      // from the start of the run
  double duration_us = 0;
  std::string kernel;       // the implementation the node ran, e.g. "winograd_f4x4" ("" where the operator has one)
};

class Model {
 public:
  Model();
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // mmaps and verifies the file, creates kernels; prepares at once when all input shapes are static.
  // Throws ModelFormatError for a bad file, NotSupported for an operator/dtype without a kernel.
  void BuildFromFile(const std::string& path, const Context& context = Context());

  bool IsBuilt() const;
  std::vector<TensorInfo> GetInputs() const;   // current shapes (after Resize)
  std::vector<TensorInfo> GetOutputs() const;  // current shapes; -1 where not yet known
  std::map<std::string, std::string> Metadata() const;

  // Re-infers shapes and re-plans memory for new input shapes (in input order).
  void Resize(const std::vector<Shape>& input_shapes);

  // Runs the model. Inputs in GetInputs() order; a new shape triggers Resize automatically.
  std::vector<Tensor> Predict(const std::vector<TensorView>& inputs);
  // The same, with results written into caller storage: outputs[i] for the i-th output (an entry without data, or a
  // shorter list, leaves that output to a buffer of the runtime's). Those results' buffers alias the caller's storage.
  std::vector<Tensor> Predict(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs);

  // With profiling on, every Predict records how long each node took (a clock read per node: off by default).
  void SetProfiling(bool enabled);
  // Per-node times of the last Predict run while profiling was on, in execution order. Nodes evaluated
  // once at prepare time (shape sub-graphs, constant work) do not appear.
  std::vector<NodeProfile> LastProfile() const;

  // Bytes of the activation arena after planning (0 before the first prepare).
  size_t ArenaBytes() const;

  // The arithmetic float models compute in ("float32" or "bfloat16"), from Context::precision_mode and the CPU.
  std::string ComputePrecision() const;
  // Whether products with int8/int4-stored weights run on dynamically quantised activations (Context::dynamic_quant
  // on a CPU with AVX512-VNNI).
  bool DynamicQuant() const;

  // Diagnostics: the intermediate tensors the current plan stores channel-blocked (NCHW8c) instead of NCHW.
  // Inputs and outputs never are; empty before the first prepare.
  std::vector<std::string> ChannelBlockedTensors() const;
  // Activations stored as pixel-major bf16 rows in the current plan (compute precision bfloat16).
  std::vector<std::string> Bf16PixelTensors() const;
  // The uint8 activations the current plan stores as pixel-major rows (core/u8_pixel_layout.h).
  std::vector<std::string> U8PixelTensors() const;

  struct Impl;

 private:
  friend class ModelGroup;            // joins the model to a group before its build
  friend class ModelParallelRunner;   // builds workers on one model's weights
  // Builds this model on `source`'s weights (source built): one copy of the file mapping, decoded constants and packed
  // weights for both; its own plans, activation arena and `context.thread_num` threads.
  void BuildOnWeightsOf(Model& source, const Context& context);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lite
