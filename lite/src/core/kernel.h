// The operator kernel interface, and the registry keyed by (operator, dtype); each DeviceBackend owns one,
// so a kernel is found by (operator, dtype, backend).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/graph.h"
#include "core/thread_pool.h"
#include "lite/errors.h"

namespace lite {

class DeviceBackend;

struct KernelIO {
  const NodeRec* node = nullptr;
  const DeviceBackend* backend = nullptr;   // the backend running this graph (control flow runs bodies on it)
  ThreadPool* pool = nullptr;
  std::vector<TensorRec*> in;    // nullptr for an omitted optional input
  std::vector<TensorRec*> out;
  // Model compute precision "bfloat16" (Context precision_mode preferred_bf16 on a CPU with bf16 dot products):
  // products with constant float32 weights (MatMul, Gemm, Conv) may round both operands to bf16, and so may
  // Attention's two products (its softmax stays float32).
  bool bf16 = false;
  // With bf16: compute precision "float16" (preferred_fp16 on an ARM64 CPU with FP16 arithmetic or an x86 one with
  // AVX512-FP16): those products' halves are IEEE float16 (HalfFormat::kFp16, cpu/gemm/bf16_gemm.h) in place of
  // bfloat16; the bf16-only kernels (bf16 pixel layouts and Convs, bf16 attention, the blocked pointwise bf16 tiles)
  // must check this flag and stay out (float32 there).
  bool fp16 = false;
  // Context dynamic_quant on a CPU that runs it: products with int8/int4-stored weights may quantise their
  // activations to int8 (cpu/gemm/dynamic_quant_gemm.h).
  bool dynamic_quant = false;

  bool has(size_t i) const { return i < in.size() && in[i] != nullptr; }
};

struct KernelContext {
  ThreadPool* pool = nullptr;
  void* scratch = nullptr;       // ScratchBytes() bytes, 64-byte aligned, valid during Run only
};

class Kernel {
 public:
  explicit Kernel(const NodeRec& node) : node_(node) {}
  virtual ~Kernel() = default;

  // Sets each output's shape and dtype. May read the data of an input only where that input
  // is `known` (constant or evaluated at prepare); RequireValue() enforces this.
  virtual void Infer(KernelIO& io) = 0;
  // False for operators that look only at input shapes (Shape), so they can run at prepare.
  virtual bool ReadsInputData() const { return true; }
  // Whether Infer/Prepare/Run read input i's (tensor t's) float32 values; false lets a compressed constant stay
  // undecoded (a Gather reads its table's rows straight from the codes, a MatMul packs its weight from them).
  virtual bool NeedsDecodedInput(size_t i, const TensorRec& t) const { return true; }
  // Workspace for Run, planned with the activations.
  virtual size_t ScratchBytes(const KernelIO& io) const { return 0; }
  // At a reduced compute precision (io.bf16 / io.fp16 set from the context's precision_mode), whether this node runs
  // faster in float32 on this CPU, its shapes known (asked right after Infer): the plan then clears both flags for it,
  // and its layouts and kernels are chosen as at float32. The default: never.
  virtual bool Float32Faster(const KernelIO& io) const { return false; }
  // Whether the kernel can run with the layouts its tensors have now (TensorRec::channel_blocked, see
  // core/channel_blocked_layout.h). Asked after Infer, before Prepare; the default knows only NCHW.
  virtual bool AcceptsLayouts(const KernelIO& io) const;
  // Whether the kernel can run with the tensors marked TensorRec::bf16_pixels now (core/bf16_pixel_layout.h). Asked
  // after AcceptsLayouts' choice, before Prepare; the default takes none.
  virtual bool AcceptsBf16Pixels(const KernelIO& io) const;
  // Whether the kernel can run with the uint8 tensors marked TensorRec::u8_pixels now (core/u8_pixel_layout.h).
  virtual bool AcceptsU8Pixels(const KernelIO& io) const;
  // Called after Infer when shapes are final and layouts chosen (e.g. to pre-pack weights).
  virtual void Prepare(KernelIO& io) {}
  // An input whose buffer output 0 may take over (-1: none): Run reads each element of it before it writes the same
  // element of the output, and no other element of the output from it, so the two can be one buffer where nothing
  // reads the input after this node (the memory plan decides: core/memory_planner.h). Asked after Prepare.
  virtual int InPlaceInput(const KernelIO& io) const { return -1; }
  virtual void Run(KernelIO& io, const KernelContext& ctx) = 0;
  // Which implementation Run takes with the plan's choices (e.g. "winograd_f4x4", "onednn:brgconv:avx512_core_amx"; ""
  // where the operator has one), for profiles (Model::LastProfile) next to other engines' per-layer kernel names.
  // Asked after Run; it reports Prepare's choices and the kernel objects it made, in Run's order of precedence.
  virtual std::string Implementation() const { return {}; }

  const NodeRec& node() const { return node_; }

 protected:
  [[noreturn]] void Fail(const std::string& msg) const;
  void Require(bool ok, const std::string& msg) const {
    if (!ok) Fail(msg);
  }
  // Throws unless input i exists and its value is known at prepare time.
  const TensorRec& RequireValue(const KernelIO& io, size_t i, const char* what) const;
  // Throws unless input i exists.
  TensorRec& In(KernelIO& io, size_t i) const;
  // Reads a known INT64/INT32 tensor as int64 values.
  std::vector<int64_t> ReadInts(const TensorRec& t) const;

  const NodeRec& node_;
};

// Thrown by RequireValue when a shape depends on data only known at run time; the executor then
// switches the model to per-run shape inference.
class DataDependentShape : public NotSupported {
 public:
  using NotSupported::NotSupported;
};

using KernelFactory = std::unique_ptr<Kernel> (*)(const NodeRec&);

// Whether a tensor of the node has a storage flag (TensorRec::channel_blocked, TensorRec::bf16_pixels) set.
bool AnyTensorMarked(const KernelIO& io, bool TensorRec::*flag);

// The shared start of the storage passes (below): sets `flag` on every output of a node run per inference that is an
// activation not known at prepare, not a graph output, and that `eligible` takes.
void MarkRunTimeActivations(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                            const std::vector<KernelIO>& ios, const std::vector<char>& evaluated_at_prepare,
                            bool TensorRec::*flag, const std::function<bool(const TensorRec&)>& eligible);

// The shared end of the storage passes (core/channel_blocked_layout.h, core/bf16_pixel_layout.h): until nothing
// changes, clears `flag` on every tensor of a node that has one marked and whose kernel does not accept it
// (accepts(node index) false). A node evaluated at prepare time can have a marked tensor only as the input whose
// shape it reads (Shape, Size: they accept any storage); its other tensors are known, never marked. Only ever
// removes, so it ends.
void RetractRefusedMarks(const std::vector<KernelIO>& ios, const std::vector<char>& evaluated_at_prepare,
                         bool TensorRec::*flag, const std::function<bool(size_t node)>& accepts);

// Clears the per-run state of every non-constant tensor (shapes, storage, known flags) and restores the
// dtypes the file declares; used before a graph is prepared again.
void ResetTensors(std::vector<TensorRec>& tensors, const std::vector<DataType>& declared_dtypes);

// Evaluates an inferred node right away: gives each output its own storage, runs the kernel with a
// temporary workspace, and marks the outputs known. For prepare-time work and control-flow bodies.
void EvaluateNow(Kernel& kernel, KernelIO& io, ThreadPool* pool);

// For a constant a kernel has re-packed and will not read again: drops its pages of the file mapping
// from this process's resident set (a later read, e.g. a re-prepare for new shapes, faults them back in
// from the file). Keeps peak memory at one copy of each weight. For a constant decoded from compressed
// storage: counts the reader, and frees the float32 copy once every reader has called this (EnsureDecoded
// decodes it again for the next plan). No-op for other constants.
void ReleaseMappedPages(TensorRec& t);
// Drops the whole pages of a read-only file-mapped range from memory (they fault back from the file).
void DropMappedRange(const void* data, size_t nbytes);
// Maps the pages of a read-only file-mapped range into the process now, for a table read a few rows at a time (an
// embedding): each row's first read otherwise faulted its page in during a run (a 512-token prompt's float32
// embedding rows: ~16 ms on a VM, 1.5% of the prompt).
void PopulateMappedRange(const void* data, size_t nbytes);

// Before a plan is prepared: the pack counts of decoded constants restart.
void PrepareDecodedConstants(LoadedGraph& g);
// Decodes a compressed constant that is not decoded now (never yet, or freed after packing), just before a node
// that reads it is prepared: one weight at a time, so loading never holds every weight decoded at once.
void EnsureDecoded(TensorRec& t);
// After a plan is prepared, when a decoded copy was freed: returns the freed heap pages to the system.
void TrimFreedMemory();

// This machine's physical memory in bytes: no tensor or table larger than it can ever be allocated, so a shape that
// asks for more is refused when it is inferred rather than when the allocation fails (or the system's OOM killer acts).
size_t PhysicalMemoryBytes();

class KernelRegistry {
 public:
  // dtype kUnknown registers a kernel for any dtype of the keying input.
  void Register(ms_schema::OpType op, DataType dtype, KernelFactory factory);
  KernelFactory Find(ms_schema::OpType op, DataType dtype) const;
  // Every registered (operator, dtype) pair; dtype kUnknown means "any".
  std::vector<std::pair<ms_schema::OpType, DataType>> Entries() const;

 private:
  std::map<std::pair<int, int>, KernelFactory> table_;
};

template <class K>
std::unique_ptr<Kernel> MakeKernel(const NodeRec& node) {
  return std::make_unique<K>(node);
}

// A device: memory plus kernels. The executor goes through this interface only.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;
  virtual const KernelRegistry& kernels() const = 0;
  virtual std::shared_ptr<void> Allocate(size_t bytes) const = 0;   // 64-byte aligned
  // The arithmetic this backend computes float models in for Context::precision_mode; throws InvalidArgument for
  // an unknown mode and NotSupported for a precision it cannot provide.
  virtual std::string ComputePrecision(const std::string& precision_mode) const = 0;
  // Whether Context::dynamic_quant, when asked for, takes effect on this backend and machine.
  virtual bool RunsDynamicQuant() const = 0;
  bool Supports(ms_schema::OpType op, DataType dtype) const { return kernels().Find(op, dtype) != nullptr; }
};

const DeviceBackend& GetBackend(const std::string& target);   // throws NotSupported for unknown targets

}  // namespace lite
