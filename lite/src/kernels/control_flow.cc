// If, Loop and Scan: bodies are sub-graphs of the model, run node by node with every value known.
// Their outputs' shapes depend on data (the branch taken, the trip count), so these nodes are evaluated
// during prepare: the main graph runs them in per-run mode unless all their inputs are constant.
#include <algorithm>
#include <cstring>

#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

constexpr int64_t kMaxIterations = int64_t(1) << 26;

// A value passed into or out of a body: shape, dtype and bytes (owned, so it outlives the body's run).
struct Value {
  Shape shape;
  DataType dtype = DataType::kUnknown;
  std::vector<uint8_t> bytes;

  static Value Of(const TensorRec& t) {
    Value v;
    v.shape = t.shape;
    v.dtype = t.dtype;
    const auto* p = static_cast<const uint8_t*>(t.data);
    v.bytes.assign(p, p + t.nbytes);
    return v;
  }
  template <typename T>
  static Value Scalar(DataType dtype, T x) {
    Value v;
    v.dtype = dtype;
    v.bytes.resize(sizeof(T));
    std::memcpy(v.bytes.data(), &x, sizeof(T));
    return v;
  }
};

// Runs one sub-graph: binds the inputs, then infers and evaluates each node in order.
class SubgraphRunner {
 public:
  SubgraphRunner(LoadedGraph& graph, const DeviceBackend& backend, ThreadPool* pool) : g_(graph), pool_(pool) {
    std::string unsupported;
    for (NodeRec& node : g_.nodes) {
      KernelIO io;
      io.node = &node;
      io.backend = &backend;
      io.pool = pool;
      DataType key = DataType::kUnknown;
      for (int idx : node.inputs) {
        io.in.push_back(idx < 0 ? nullptr : &g_.tensors[idx]);
        if (key == DataType::kUnknown && idx >= 0) key = g_.tensors[idx].dtype;
      }
      for (int idx : node.outputs) io.out.push_back(&g_.tensors[idx]);
      KernelFactory f = backend.kernels().Find(node.op, key);
      if (!f) {
        unsupported += std::string(unsupported.empty() ? "" : "; ") + OpName(node.op) + " at node '" + node.name + "'";
        continue;
      }
      kernels_.push_back(f(node));
      ios_.push_back(std::move(io));
    }
    if (!unsupported.empty()) throw NotSupported(std::string("no kernel in a control-flow body for: ") + unsupported);
    for (const TensorRec& t : g_.tensors) declared_.push_back(t.dtype);
  }

  size_t num_inputs() const { return g_.inputs.size(); }
  size_t num_outputs() const { return g_.outputs.size(); }

  std::vector<Value> Run(const std::vector<const Value*>& inputs) {
    if (inputs.size() != g_.inputs.size())
      throw InvalidArgument("control-flow body expects " + std::to_string(g_.inputs.size()) + " inputs, got " +
                            std::to_string(inputs.size()));
    ResetTensors(g_.tensors, declared_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      TensorRec& t = g_.tensors[g_.inputs[i]];
      if (inputs[i]->dtype != t.dtype)
        throw TypeMismatch("control-flow body input '" + t.name + "': expected " + DataTypeName(t.dtype) + ", got " +
                           DataTypeName(inputs[i]->dtype));
      t.shape = inputs[i]->shape;
      t.nbytes = inputs[i]->bytes.size();
      if (static_cast<int64_t>(t.nbytes) != ShapeNumel(t.shape) * static_cast<int64_t>(DataTypeSize(t.dtype)))
        throw InvalidArgument("control-flow body input '" + t.name + "' has inconsistent size");
      t.data = const_cast<uint8_t*>(inputs[i]->bytes.data());
      t.known = true;
    }
    for (size_t n = 0; n < kernels_.size(); ++n) {
      KernelIO& io = ios_[n];
      kernels_[n]->Infer(io);
      kernels_[n]->Prepare(io);
      EvaluateNow(*kernels_[n], io, pool_);
    }
    std::vector<Value> out;
    for (int idx : g_.outputs) out.push_back(Value::Of(g_.tensors[idx]));
    return out;
  }

 private:
  LoadedGraph& g_;
  ThreadPool* pool_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<KernelIO> ios_;
  std::vector<DataType> declared_;
};

// Shared by the three operators: inputs must be known (they run during prepare), results are kept
// between Infer (which runs the body to learn the output shapes) and Run (which copies them out).
class ControlFlowKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Run(KernelIO& io, const KernelContext&) override {
    for (size_t i = 0; i < io.out.size() && i < results_.size(); ++i)
      if (!results_[i].bytes.empty()) std::memcpy(io.out[i]->data, results_[i].bytes.data(), results_[i].bytes.size());
  }

 protected:
  SubgraphRunner& Runner(KernelIO& io, int graph, std::unique_ptr<SubgraphRunner>& slot) {
    if (!slot) {
      Require(io.backend != nullptr, "no backend to run the body on");
      auto& model = const_cast<LoadedModel&>(*node_.model);
      slot = std::make_unique<SubgraphRunner>(model.Graph(graph), *io.backend, io.pool);
    }
    return *slot;
  }
  std::vector<Value> KnownInputs(const KernelIO& io, size_t from) const {
    std::vector<Value> v;
    for (size_t i = from; i < io.in.size(); ++i) v.push_back(Value::Of(RequireValue(io, i, "body input")));
    return v;
  }
  void Publish(KernelIO& io) {
    Require(results_.size() >= io.out.size(), "body produced fewer values than the node has outputs");
    for (size_t i = 0; i < io.out.size(); ++i) {
      io.out[i]->shape = results_[i].shape;
      io.out[i]->dtype = results_[i].dtype;
    }
  }
  static bool Truth(const Value& v) {
    return !v.bytes.empty() && std::any_of(v.bytes.begin(), v.bytes.begin() + DataTypeSize(v.dtype), [](uint8_t b) { return b != 0; });
  }

  std::vector<Value> results_;
};

class IfKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  void Infer(KernelIO& io) override {
    const TensorRec& cond = RequireValue(io, 0, "cond");
    Require(cond.numel() == 1, "cond must hold one value");
    const auto* a = node_.fb->attr_as_IfAttr();
    const bool take_then = Truth(Value::Of(cond));
    SubgraphRunner& r = take_then ? Runner(io, a->then_graph(), then_) : Runner(io, a->else_graph(), else_);
    const std::vector<Value> captures = KnownInputs(io, 1);
    std::vector<const Value*> in;
    for (const Value& v : captures) in.push_back(&v);
    results_ = r.Run(in);
    Publish(io);
  }

 private:
  std::unique_ptr<SubgraphRunner> then_, else_;
};

class LoopKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  void Infer(KernelIO& io) override {
    const auto* a = node_.fb->attr_as_LoopAttr();
    const int64_t carried = a->num_carried();
    Require(carried >= 0 && static_cast<int64_t>(io.in.size()) >= 2 + carried, "inputs do not match num_carried");
    SubgraphRunner& body = Runner(io, a->body(), body_);
    Require(body.num_inputs() == io.in.size() && body.num_outputs() >= static_cast<size_t>(1 + carried),
            "body signature does not match the node");
    int64_t trip = kMaxIterations;
    if (io.has(0)) trip = ReadInts(RequireValue(io, 0, "M"))[0];
    bool cond = true;
    if (io.has(1)) cond = Truth(Value::Of(RequireValue(io, 1, "cond")));
    std::vector<Value> state = KnownInputs(io, 2);   // carried values, then captures
    const size_t scans = body.num_outputs() - 1 - carried;
    std::vector<std::vector<Value>> scan_steps(scans);
    int64_t i = 0;
    for (; i < trip && cond; ++i) {
      Require(i < kMaxIterations, "loop runs more than 2^26 iterations");
      Value iter = Value::Scalar<int64_t>(DataType::kInt64, i), c = Value::Scalar<bool>(DataType::kBool, cond);
      std::vector<const Value*> in = {&iter, &c};
      for (const Value& v : state) in.push_back(&v);
      std::vector<Value> out = body.Run(in);
      cond = Truth(out[0]);
      for (int64_t k = 0; k < carried; ++k) state[k] = std::move(out[1 + k]);
      for (size_t k = 0; k < scans; ++k) scan_steps[k].push_back(std::move(out[1 + carried + k]));
    }
    results_.assign(state.begin(), state.begin() + carried);
    for (size_t k = 0; k < scans; ++k) results_.push_back(Stack(scan_steps[k], k));
    Publish(io);
  }

 private:
  Value Stack(const std::vector<Value>& steps, size_t k) const {
    Value v;
    v.dtype = steps.empty() ? DataType::kFloat32 : steps[0].dtype;
    v.shape = {static_cast<int64_t>(steps.size())};
    if (!steps.empty()) v.shape.insert(v.shape.end(), steps[0].shape.begin(), steps[0].shape.end());
    for (const Value& s : steps) {
      Require(s.shape == steps[0].shape && s.dtype == v.dtype, "scan output " + std::to_string(k) + " changes shape across iterations");
      v.bytes.insert(v.bytes.end(), s.bytes.begin(), s.bytes.end());
    }
    return v;
  }
  std::unique_ptr<SubgraphRunner> body_;
};

class ScanKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  void Infer(KernelIO& io) override {
    const auto* a = node_.fb->attr_as_ScanAttr();
    const int64_t states = a->num_states(), scans_in = a->num_scan_inputs();
    Require(states >= 0 && scans_in >= 1 && static_cast<int64_t>(io.in.size()) >= states + scans_in,
            "inputs do not match num_states/num_scan_inputs");
    SubgraphRunner& body = Runner(io, a->body(), body_);
    Require(body.num_inputs() == io.in.size() && body.num_outputs() >= static_cast<size_t>(states),
            "body signature does not match the node");
    std::vector<Value> inputs = KnownInputs(io, 0);
    auto axis_of = [](const flatbuffers::Vector<int64_t>* v, size_t i) { return v && i < v->size() ? v->Get(i) : 0; };
    int64_t len = -1;
    std::vector<int64_t> in_axes(scans_in);
    for (int64_t j = 0; j < scans_in; ++j) {
      const Shape& s = inputs[states + j].shape;
      int64_t ax = axis_of(a->scan_input_axes(), j);
      Require(NormalizeAxis(ax, static_cast<int64_t>(s.size())), "scan input axis out of range");
      in_axes[j] = ax;
      Require(len < 0 || s[ax] == len, "scan inputs differ in sequence length");
      len = s[ax];
    }
    const size_t scans_out = body.num_outputs() - states;
    std::vector<std::vector<Value>> steps(scans_out);
    std::vector<Value> state(inputs.begin(), inputs.begin() + states);
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Value> slices;
      for (int64_t j = 0; j < scans_in; ++j) {
        const int64_t at = axis_of(a->scan_input_directions(), j) ? len - 1 - t : t;
        slices.push_back(Take(inputs[states + j], in_axes[j], at));
      }
      std::vector<const Value*> in;
      for (const Value& v : state) in.push_back(&v);
      for (const Value& v : slices) in.push_back(&v);
      for (size_t c = states + scans_in; c < inputs.size(); ++c) in.push_back(&inputs[c]);
      std::vector<Value> out = body.Run(in);
      for (int64_t k = 0; k < states; ++k) state[k] = std::move(out[k]);
      for (size_t k = 0; k < scans_out; ++k) steps[k].push_back(std::move(out[states + k]));
    }
    results_ = state;
    for (size_t k = 0; k < scans_out; ++k) {
      const int64_t rank = steps[k].empty() ? 0 : static_cast<int64_t>(steps[k][0].shape.size());
      int64_t ax = axis_of(a->scan_output_axes(), k);
      Require(NormalizeAxis(ax, rank + 1), "scan output axis out of range");
      results_.push_back(Put(steps[k], ax, axis_of(a->scan_output_directions(), k) != 0));
    }
    Publish(io);
  }

 private:
  // The slice at index `at` along `axis` (that axis removed).
  static Value Take(const Value& v, int64_t axis, int64_t at) {
    const size_t es = DataTypeSize(v.dtype);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= v.shape[i];
    for (size_t i = axis + 1; i < v.shape.size(); ++i) inner *= v.shape[i];
    const int64_t len = v.shape[axis];
    Value s;
    s.dtype = v.dtype;
    s.shape = v.shape;
    s.shape.erase(s.shape.begin() + axis);
    s.bytes.resize(outer * inner * es);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(&s.bytes[o * inner * es], &v.bytes[(o * len + at) * inner * es], inner * es);
    return s;
  }
  // Stacks per-step slices along `axis` (reversed when `reverse`).
  Value Put(const std::vector<Value>& steps, int64_t axis, bool reverse) const {
    Value v;
    v.dtype = steps.empty() ? DataType::kFloat32 : steps[0].dtype;
    const int64_t len = static_cast<int64_t>(steps.size());
    v.shape = steps.empty() ? Shape{0} : steps[0].shape;
    if (!steps.empty()) v.shape.insert(v.shape.begin() + axis, len);
    const size_t es = DataTypeSize(v.dtype);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis && !steps.empty(); ++i) outer *= steps[0].shape[i];
    for (size_t i = axis; !steps.empty() && i < steps[0].shape.size(); ++i) inner *= steps[0].shape[i];
    v.bytes.resize(outer * len * inner * es);
    for (int64_t t = 0; t < len; ++t) {
      const Value& s = steps[reverse ? len - 1 - t : t];
      Require(s.shape == steps[0].shape, "scan output changes shape across iterations");
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(&v.bytes[((o * len) + t) * inner * es], &s.bytes[o * inner * es], inner * es);
    }
    return v;
  }
  std::unique_ptr<SubgraphRunner> body_;
};

}  // namespace

void RegisterControlFlowKernels(KernelRegistry& r) {
  r.Register(OpType::If, DataType::kUnknown, MakeKernel<IfKernel>);
  r.Register(OpType::Loop, DataType::kUnknown, MakeKernel<LoopKernel>);
  r.Register(OpType::Scan, DataType::kUnknown, MakeKernel<ScanKernel>);
}

}  // namespace lite
