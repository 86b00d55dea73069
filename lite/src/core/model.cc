// The executor: load -> prepare (shape inference, eager shape sub-graphs, memory plan) -> run.
// Prepared plans are cached per input-shape signature, so alternating between shapes re-plans nothing.
#include "lite/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <mutex>

#include "core/graph.h"
#include "core/kernel.h"
#include "core/bf16_pixel_layout.h"
#include "core/u8_pixel_layout.h"
#include "core/channel_blocked_layout.h"
#include "core/memory_planner.h"
#include "core/model_group_state.h"
#include "core/thread_pool.h"

namespace lite {

namespace {
constexpr size_t kMaxCachedPlans = 8;
}  // namespace

// Everything that depends on the input shapes: kernel instances (they keep per-shape state), each
// tensor's shape and storage, which nodes were evaluated at prepare time, and the arena layout.
struct Plan {
  struct TensorState {
    Shape shape;
    size_t nbytes = 0;
    bool known = false;
    bool channel_blocked = false;   // stored NCHW8c in this plan
    bool bf16_pixels = false;       // stored as pixel-major bf16 rows in this plan
    bool u8_pixels = false;         // uint8 codes stored as pixel-major rows in this plan
    int64_t arena_offset = -1;      // activation in the arena
    std::vector<uint8_t> owned;     // value computed at prepare time
  };
  std::vector<Shape> input_shapes;
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<TensorState> tensors;
  std::vector<char> eager;
  // Graph outputs computed at run time: written straight into per-run buffers handed to the caller
  // (no arena space, no copy).
  std::vector<int> direct_outputs;
  size_t arena_bytes = 0, scratch_offset = 0;
};

struct Model::Impl {
  std::shared_ptr<LoadedModel> m;
  const DeviceBackend* backend = nullptr;
  std::unique_ptr<ThreadPool> pool;
  std::vector<KernelFactory> factories;
  std::vector<KernelIO> ios;
  std::vector<DataType> declared_dtypes;
  std::list<std::unique_ptr<Plan>> plans;   // most recently used first
  Plan* active = nullptr;
  // The activation arena: the model's own, or one shared by a ModelGroup's members (kShareWorkspace), who then run
  // one at a time. The active plan's pointers into it are re-derived when another member has grown it.
  std::shared_ptr<Workspace> workspace = std::make_shared<Workspace>();
  const void* restored_base = nullptr;
  std::shared_ptr<ModelGroupState> group;   // set by ModelGroup::AddModel before the build
  // Some shape depends on input values: shapes are inferred and memory allocated on every run.
  bool data_dependent = false;
  std::vector<Shape> input_shapes;          // shapes of the current plan (or of the last resize)
  std::mutex run_mu;
  bool profiling = false;
  std::vector<NodeProfile> profile;
  std::string compute_precision;
  // A node's KernelIO::bf16 / fp16 from the compute precision (bf16 is set at float16 too: the half kernels share it).
  void SetPrecisionFlags(KernelIO& io) const {
    io.bf16 = compute_precision == "bfloat16" || compute_precision == "float16";
    io.fp16 = compute_precision == "float16";
  }
  bool dynamic_quant = false;

  void Build(const std::string& path, const Context& ctx);
  // Builds on `source`'s weights (ShareWeights): one copy of them for both; own plans, arena and threads.
  void BuildSharing(Impl& source, const Context& ctx);
  void Setup(const Context& ctx);
  // Builds a plan for `shapes`. With `bound` inputs every node is evaluated right away (dynamic mode).
  std::unique_ptr<Plan> MakePlan(const std::vector<Shape>& shapes, const std::vector<TensorView>* bound);
  // Makes the plan for `shapes` current: from the cache, or prepared now. Falls back to dynamic mode
  // when a shape depends on input data.
  void Activate(const std::vector<Shape>& shapes);
  void Restore(Plan& plan);
  void EnsureArena(size_t bytes);
  std::vector<Tensor> Predict(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs);
  void RunProfiled(const KernelContext& kc);
  TensorInfo Info(int idx) const;
  void CheckShapes(const std::vector<Shape>& shapes, const char* what) const;
};

static void CheckContext(const Context& ctx) {
  if (ctx.thread_num < 1 || ctx.thread_num > 1024)
    throw InvalidArgument("Context.thread_num must be in [1, 1024], got " + std::to_string(ctx.thread_num));
  if (ctx.thread_affinity_mode < 0 || ctx.thread_affinity_mode > 2)
    throw InvalidArgument("Context thread_affinity_mode must be 0 (none), 1 or 2, got " +
                          std::to_string(ctx.thread_affinity_mode));
  const std::vector<int> usable = UsableCpus();
  for (int core : ctx.thread_affinity_core_list)
    if (std::find(usable.begin(), usable.end(), core) == usable.end())
      throw InvalidArgument("Context thread_affinity_core_list: core " + std::to_string(core) +
                            " is not one this process may run on");
}

void Model::Impl::Build(const std::string& path, const Context& ctx) {
  CheckContext(ctx);
  GetBackend(ctx.target);   // an unknown target fails before the file is read
  m = LoadModel(path);
  if (group) group->Join(*this->m, workspace);
  Setup(ctx);
}

void Model::Impl::BuildSharing(Impl& source, const Context& ctx) {
  CheckContext(ctx);
  GetBackend(ctx.target);
  {
    std::lock_guard<std::mutex> lock(source.run_mu);   // the source's records must be at rest while they are copied
    m = ShareWeights(source.m);
  }
  Setup(ctx);
}

void Model::Impl::Setup(const Context& ctx) {
  backend = &GetBackend(ctx.target);
  compute_precision = backend->ComputePrecision(ctx.precision_mode);
  dynamic_quant = ctx.dynamic_quant && backend->RunsDynamicQuant();
  pool = std::make_unique<ThreadPool>(ctx.thread_num, ctx.bind_cores,
                                      AffinityCores(ctx.thread_affinity_mode, ctx.thread_affinity_core_list));

  std::string unsupported;
  for (const NodeRec& node : m->nodes) {
    KernelIO io;
    io.node = &node;
    io.backend = backend;
    io.pool = pool.get();
    SetPrecisionFlags(io);
    io.dynamic_quant = dynamic_quant;
    DataType key = DataType::kUnknown;
    for (int idx : node.inputs) {
      io.in.push_back(idx < 0 ? nullptr : &m->tensors[idx]);
      if (key == DataType::kUnknown && idx >= 0) key = m->tensors[idx].dtype;
    }
    for (int idx : node.outputs) io.out.push_back(&m->tensors[idx]);
    KernelFactory f = backend->kernels().Find(node.op, key);
    if (!f)
      unsupported += std::string(unsupported.empty() ? "" : "; ") + OpName(node.op) + "(" + DataTypeName(key) +
                     ") at node '" + node.name + "'";
    factories.push_back(f);
    ios.push_back(std::move(io));
  }
  if (!unsupported.empty())
    throw NotSupported(std::string("no ") + backend->name() + " kernel for: " + unsupported);
  for (const TensorRec& t : m->tensors) declared_dtypes.push_back(t.dtype);

  bool all_static = true;
  for (int idx : m->inputs) {
    input_shapes.push_back(m->tensors[idx].declared_shape);
    for (int64_t d : m->tensors[idx].declared_shape) all_static &= d >= 0;
  }
  if (all_static) {
    std::lock_guard<std::mutex> lock(workspace->mu);
    Activate(input_shapes);
  }
}

std::unique_ptr<Plan> Model::Impl::MakePlan(const std::vector<Shape>& shapes, const std::vector<TensorView>* bound) {
  active = nullptr;
  std::lock_guard<std::mutex> prepare_lock(*m->prepare_mu);   // constants are packed and released meanwhile
  auto plan = std::make_unique<Plan>();
  plan->input_shapes = shapes;
  const int num_nodes = static_cast<int>(m->nodes.size());
  ResetTensors(m->tensors, declared_dtypes);
  PrepareDecodedConstants(*m);
  for (size_t i = 0; i < m->inputs.size(); ++i) {
    TensorRec& t = m->tensors[m->inputs[i]];
    t.shape = shapes[i];
    t.nbytes = ShapeNumel(t.shape) * DataTypeSize(t.dtype);
    t.known = bound != nullptr;
    if (bound) t.data = const_cast<void*>((*bound)[i].data);   // borrowed; kernels never write inputs
  }
  plan->eager.assign(num_nodes, 0);
  std::vector<BufferRequest> requests;
  std::vector<int> request_tensor;
  size_t scratch = 0;
  for (int n = 0; n < num_nodes; ++n) {
    plan->kernels.push_back(factories[n](m->nodes[n]));
    KernelIO& io = ios[n];
    Kernel& k = *plan->kernels.back();
    for (size_t i = 0; i < io.in.size(); ++i)
      if (io.in[i] && k.NeedsDecodedInput(i, *io.in[i])) EnsureDecoded(*io.in[i]);
    SetPrecisionFlags(io);   // (a plan before may have cleared them: Float32Faster below)
    k.Infer(io);
    if ((io.bf16 || io.fp16) && k.Float32Faster(io)) io.bf16 = io.fp16 = false;
    bool all_known = true;
    for (TensorRec* t : io.in) all_known &= (t == nullptr || t->known);
    for (size_t o = 0; o < io.out.size(); ++o) {
      TensorRec& t = *io.out[o];
      const int idx = m->nodes[n].outputs[o];
      if (declared_dtypes[idx] != t.dtype)
        throw ModelFormatError("node '" + m->nodes[n].name + "' (" + OpName(m->nodes[n].op) + ") produces " +
                               DataTypeName(t.dtype) + " for '" + t.name + "' but the file declares " +
                               DataTypeName(declared_dtypes[idx]));
      const int64_t numel = ShapeNumel(t.shape);
      if (numel > (int64_t(1) << 56) / 8 ||
          static_cast<size_t>(numel) * DataTypeSize(t.dtype) > PhysicalMemoryBytes())
        throw OutOfMemory("node '" + m->nodes[n].name + "' (" + OpName(m->nodes[n].op) + "): output '" + t.name +
                          "' of shape " + ShapeToString(t.shape) + " needs more memory than this machine has (" +
                          std::to_string(PhysicalMemoryBytes() >> 20) + " MiB)");
      t.nbytes = numel * DataTypeSize(t.dtype);
    }
    if (all_known || !k.ReadsInputData()) {
      // Shape sub-graphs and other constant work: evaluated once per plan, not per run.
      plan->eager[n] = 1;
      k.Prepare(io);
      try {
        EvaluateNow(k, io, pool.get());
      } catch (const std::bad_alloc&) {
        std::string outs;
        for (const TensorRec* t : io.out)
          outs += (outs.empty() ? "'" : ", '") + t->name + "' " + ShapeToString(t->shape);
        throw OutOfMemory("node '" + m->nodes[n].name + "' (" + OpName(m->nodes[n].op) +
                          "), evaluated while the model is prepared: cannot allocate its output " + outs);
      }
      continue;
    }
    for (size_t o = 0; o < io.out.size(); ++o) {
      const int idx = m->nodes[n].outputs[o];
      TensorRec& t = m->tensors[idx];
      if (std::find(m->outputs.begin(), m->outputs.end(), idx) != m->outputs.end()) {
        if (std::find(plan->direct_outputs.begin(), plan->direct_outputs.end(), idx) == plan->direct_outputs.end())
          plan->direct_outputs.push_back(idx);
        continue;
      }
      const int last = t.last_use < n ? n : t.last_use;
      requests.push_back({t.nbytes, n, last});
      request_tensor.push_back(idx);
    }
  }
  // The other kernels are prepared once every shape is known and the activation layouts are chosen.
  ChooseChannelBlockedLayouts(m->tensors, m->outputs, ios, plan->kernels, plan->eager);
  ChooseBf16PixelTensors(m->tensors, m->outputs, ios, plan->kernels, plan->eager, compute_precision == "bfloat16");
  ChooseU8PixelTensors(m->tensors, m->outputs, ios, plan->kernels, plan->eager);
  for (size_t r = 0; r < requests.size(); ++r) {   // uint8 rows take more than their codes (row stride, padding
    const TensorRec& t = m->tensors[request_tensor[r]];   // row), bf16 rows less than float32
    requests[r].bytes = t.bf16_pixels ? t.nbytes : std::max(requests[r].bytes, t.nbytes);
  }
  for (int n = 0; n < num_nodes; ++n) {
    if (plan->eager[n]) continue;
    plan->kernels[n]->Prepare(ios[n]);
    scratch = std::max(scratch, plan->kernels[n]->ScratchBytes(ios[n]));
  }
  // Outputs that overwrite an input in place (a Conv adding its residual): the planner gives them its buffer where
  // the input has no later reader. The residual's lines are in cache when the result is stored over them, where a
  // separate output took a read for ownership of every line: ResNet-50 bf16's expansions 0.95-0.98x the time.
  std::vector<int> request_of(m->tensors.size(), -1);
  for (size_t r = 0; r < requests.size(); ++r) request_of[request_tensor[r]] = static_cast<int>(r);
  std::vector<InPlaceOffer> in_place;
  for (int n = 0; n < num_nodes; ++n) {
    if (plan->eager[n]) continue;
    const int k = plan->kernels[n]->InPlaceInput(ios[n]);
    const std::vector<int>& inputs = m->nodes[n].inputs;
    if (k < 0 || static_cast<size_t>(k) >= inputs.size() || inputs[k] < 0) continue;
    if (std::count(inputs.begin(), inputs.end(), inputs[k]) != 1) continue;   // read again as another input
    in_place.push_back({n, request_of[inputs[k]], request_of[m->nodes[n].outputs[0]]});
  }
  MemoryPlan layout = PlanMemory(requests, in_place);
  plan->scratch_offset = layout.total;
  plan->arena_bytes = layout.total + (scratch + 63) / 64 * 64;
  if (!m->decoded.empty()) TrimFreedMemory();
  plan->tensors.resize(m->tensors.size());
  for (size_t r = 0; r < requests.size(); ++r)
    plan->tensors[request_tensor[r]].arena_offset = static_cast<int64_t>(layout.offsets[r]);
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    TensorRec& t = m->tensors[i];
    if (t.kind == TensorRec::Kind::kConstant) continue;
    Plan::TensorState& s = plan->tensors[i];
    s.shape = t.shape;
    s.nbytes = t.nbytes;
    s.known = t.known && t.kind != TensorRec::Kind::kInput;
    s.channel_blocked = t.channel_blocked;
    s.bf16_pixels = t.bf16_pixels;
    s.u8_pixels = t.u8_pixels;
    s.owned = std::move(t.owned);   // the heap buffer moves with it: pointers into it stay valid
  }
  return plan;
}

void Model::Impl::EnsureArena(size_t bytes) {   // workspace->mu held
  Workspace& ws = *workspace;
  if (ws.arena && bytes <= ws.capacity) return;
  const size_t capacity = std::max<size_t>({bytes, 64, ws.capacity});
  ws.arena = backend->Allocate(capacity);   // the old one stays if this fails
  ws.capacity = capacity;
}

void Model::Impl::Restore(Plan& plan) {
  try {
    EnsureArena(plan.arena_bytes);
  } catch (const std::bad_alloc&) {   // say what asked for it: the shapes this input makes
    size_t largest = 0;
    for (size_t i = 0; i < plan.tensors.size() && i < m->tensors.size(); ++i)
      if (m->tensors[i].kind != TensorRec::Kind::kConstant && plan.tensors[i].nbytes > plan.tensors[largest].nbytes)
        largest = i;
    std::string what = "cannot allocate the " + std::to_string(plan.arena_bytes) + "-byte activation memory";
    if (largest < m->tensors.size())
      what += "; its largest tensor is '" + m->tensors[largest].name + "' " + ShapeToString(plan.tensors[largest].shape) +
              " (" + std::to_string(plan.tensors[largest].nbytes) + " bytes)";
    throw OutOfMemory(what);
  }
  uint8_t* base = static_cast<uint8_t*>(workspace->arena.get());
  restored_base = base;
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    TensorRec& t = m->tensors[i];
    if (t.kind == TensorRec::Kind::kConstant) continue;
    const Plan::TensorState& s = plan.tensors[i];
    t.shape = s.shape;
    t.nbytes = s.nbytes;
    t.known = s.known;
    t.channel_blocked = s.channel_blocked;
    t.bf16_pixels = s.bf16_pixels;
    t.u8_pixels = s.u8_pixels;
    t.data = s.arena_offset >= 0 ? base + s.arena_offset
                                 : (s.owned.empty() ? nullptr : const_cast<uint8_t*>(s.owned.data()));
  }
  active = &plan;
  input_shapes = plan.input_shapes;
}

void Model::Impl::Activate(const std::vector<Shape>& shapes) {
  if (active && active->input_shapes == shapes) return;
  for (auto it = plans.begin(); it != plans.end(); ++it) {
    if ((*it)->input_shapes == shapes) {
      plans.splice(plans.begin(), plans, it);   // most recently used first
      Restore(*plans.front());
      return;
    }
  }
  std::unique_ptr<Plan> plan;
  try {
    plan = MakePlan(shapes, nullptr);
  } catch (const DataDependentShape&) {
    data_dependent = true;
    plans.clear();
    active = nullptr;
    input_shapes = shapes;
    return;
  }
  plans.push_front(std::move(plan));
  if (plans.size() > kMaxCachedPlans) plans.pop_back();
  Restore(*plans.front());
}

void Model::Impl::CheckShapes(const std::vector<Shape>& shapes, const char* what) const {
  for (size_t i = 0; i < shapes.size(); ++i) {
    const TensorRec& t = m->tensors[m->inputs[i]];
    bool ok = shapes[i].size() == t.declared_shape.size();
    for (size_t d = 0; ok && d < shapes[i].size(); ++d)
      ok = shapes[i][d] >= 0 && (t.declared_shape[d] < 0 || t.declared_shape[d] == shapes[i][d]);
    if (!ok)
      throw InvalidArgument(std::string(what) + " '" + t.name + "': expected shape " + ShapeToString(t.declared_shape) +
                            " (-1 = any), got " + ShapeToString(shapes[i]));
  }
}

// Refuses caller storage for output `t` that is not its dtype and shape.
static void CheckOutputView(const OutputView& v, const TensorRec& t) {
  const bool bf16_bits = t.dtype == DataType::kBFloat16 && v.dtype == DataType::kUInt16;
  if ((v.dtype != t.dtype && !bf16_bits) || v.shape != t.shape)
    throw InvalidArgument("output '" + t.name + "': the storage given is " + DataTypeName(v.dtype) + " " +
                          ShapeToString(v.shape) + ", the result is " + DataTypeName(t.dtype) + " " +
                          ShapeToString(t.shape));
}

std::vector<Tensor> Model::Impl::Predict(const std::vector<TensorView>& inputs,
                                         const std::vector<OutputView>& outputs) {
  std::lock_guard<std::mutex> lock(run_mu);
  if (outputs.size() > m->outputs.size())
    throw InvalidArgument("model has " + std::to_string(m->outputs.size()) + " outputs, got storage for " +
                          std::to_string(outputs.size()));
  auto given = [&](size_t j) { return j < outputs.size() && outputs[j].data ? &outputs[j] : nullptr; };
  std::lock_guard<std::mutex> workspace_lock(workspace->mu);
  if (inputs.size() != m->inputs.size())
    throw InvalidArgument("model expects " + std::to_string(m->inputs.size()) + " inputs, got " +
                          std::to_string(inputs.size()));
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorRec& t = m->tensors[m->inputs[i]];
    const TensorView& v = inputs[i];
    // bfloat16 arrives as its raw bits from languages without the type (NumPy: uint16)
    const bool bf16_bits = t.dtype == DataType::kBFloat16 && v.dtype == DataType::kUInt16;
    if (v.dtype != t.dtype && !bf16_bits)
      throw TypeMismatch("input '" + t.name + "': expected dtype " + DataTypeName(t.dtype) + ", got " +
                         DataTypeName(v.dtype));
    // A scalar input fed as a one-element [1] array is that scalar (ONNX Runtime takes it; voice-activity models
    // are fed their sample rate so).
    shapes.push_back(t.declared_shape.empty() && v.shape == Shape{1} ? Shape{} : v.shape);
  }
  CheckShapes(shapes, "input");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].data == nullptr && ShapeNumel(inputs[i].shape) > 0)
      throw InvalidArgument("input '" + m->tensors[m->inputs[i]].name + "' has no data");
  if (!data_dependent) {
    Activate(shapes);
    if (restored_base != workspace->arena.get()) Restore(*active);   // a group member grew the shared arena
  }
  struct Unbind {   // inputs are borrowed: never keep the pointers past this call
    LoadedModel* m;
    ~Unbind() {
      for (int idx : m->inputs) m->tensors[idx].data = nullptr;
    }
  } unbind{m.get()};
  std::unique_ptr<Plan> dynamic_plan;
  std::map<int, std::shared_ptr<void>> direct;   // output tensor -> the buffer it was computed into
  struct UnbindOutputs {   // the caller owns those buffers now
    LoadedModel* m;
    std::map<int, std::shared_ptr<void>>& direct;
    ~UnbindOutputs() {
      for (auto& [idx, buf] : direct) m->tensors[idx].data = nullptr;
    }
  } unbind_outputs{m.get(), direct};
  if (data_dependent) {
    dynamic_plan = MakePlan(shapes, &inputs);   // evaluates every node with the inputs bound
    input_shapes = shapes;
    for (size_t i = 0; i < m->tensors.size(); ++i) {   // outputs live in the plan's owned buffers
      TensorRec& t = m->tensors[i];
      if (t.kind != TensorRec::Kind::kConstant && !dynamic_plan->tensors[i].owned.empty())
        t.data = dynamic_plan->tensors[i].owned.data();
    }
  } else {
    for (size_t i = 0; i < inputs.size(); ++i)
      m->tensors[m->inputs[i]].data = const_cast<void*>(inputs[i].data);
    for (size_t j = 0; j < m->outputs.size(); ++j) {   // results computed straight into the caller's storage
      const int idx = m->outputs[j];
      if (!given(j) || direct.count(idx) ||
          std::find(active->direct_outputs.begin(), active->direct_outputs.end(), idx) == active->direct_outputs.end())
        continue;
      CheckOutputView(*given(j), m->tensors[idx]);
      direct[idx] = std::shared_ptr<void>(given(j)->data, [](void*) {});
      m->tensors[idx].data = given(j)->data;
    }
    for (int idx : active->direct_outputs) {
      if (direct.count(idx)) continue;
      TensorRec& t = m->tensors[idx];
      direct[idx] = backend->Allocate(std::max<size_t>(t.nbytes, 1));
      t.data = direct[idx].get();
    }
    KernelContext kc{pool.get(), static_cast<uint8_t*>(workspace->arena.get()) + active->scratch_offset};
    if (profiling) {
      RunProfiled(kc);
    } else {
      for (size_t n = 0; n < active->kernels.size(); ++n)
        if (!active->eager[n]) active->kernels[n]->Run(ios[n], kc);
    }
  }
  for (size_t j = 0; j < m->outputs.size(); ++j)
    if (given(j)) CheckOutputView(*given(j), m->tensors[m->outputs[j]]);   // before anything is written there
  std::vector<Tensor> result;
  for (size_t j = 0; j < m->outputs.size(); ++j) {
    const int idx = m->outputs[j];
    const TensorRec& t = m->tensors[idx];
    Tensor out;
    out.info = Info(idx);
    out.info.shape = t.shape;
    out.nbytes = t.nbytes;
    auto it = direct.find(idx);
    if (it != direct.end() && it->second && (!given(j) || it->second.get() == given(j)->data)) {
      out.buffer = std::move(it->second);   // computed in place; a second listing of the name gets a copy
    } else if (given(j)) {   // into the caller's storage
      if (t.nbytes && given(j)->data != t.data) std::memcpy(given(j)->data, t.data, t.nbytes);
      out.buffer = std::shared_ptr<void>(given(j)->data, [](void*) {});
    } else {   // known at prepare, a graph input, or per-run mode: copied
      out.buffer = backend->Allocate(std::max<size_t>(t.nbytes, 1));
      if (t.nbytes) std::memcpy(out.buffer.get(), t.data, t.nbytes);
    }
    result.push_back(std::move(out));
  }
  return result;
}

void Model::Impl::RunProfiled(const KernelContext& kc) {
  using Clock = std::chrono::steady_clock;
  profile.clear();
  const auto t0 = Clock::now();
  for (size_t n = 0; n < active->kernels.size(); ++n) {
    if (active->eager[n]) continue;
    const auto a = Clock::now();
    active->kernels[n]->Run(ios[n], kc);
    const auto b = Clock::now();
    const NodeRec& node = m->nodes[n];
    profile.push_back({node.name, OpName(node.op), std::chrono::duration<double, std::micro>(a - t0).count(),
                       std::chrono::duration<double, std::micro>(b - a).count(), active->kernels[n]->Implementation()});
  }
}

TensorInfo Model::Impl::Info(int idx) const {
  const TensorRec& t = m->tensors[idx];
  TensorInfo info;
  info.name = t.name;
  info.dtype = t.dtype;
  info.format = t.format;
  info.shape = active || t.kind == TensorRec::Kind::kConstant ? t.shape : t.declared_shape;
  return info;
}

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

void Model::BuildFromFile(const std::string& path, const Context& context) {
  auto fresh = std::make_unique<Impl>();
  fresh->group = impl_ ? impl_->group : nullptr;
  fresh->Build(path, context);
  impl_ = std::move(fresh);   // a failed build leaves the previous model untouched
}

bool Model::IsBuilt() const { return impl_ && impl_->m != nullptr; }

static Model::Impl& Built(const std::unique_ptr<Model::Impl>& impl) {
  if (!impl || !impl->m) throw InvalidArgument("model is not built; call build_from_file first");
  return *impl;
}

void Model::BuildOnWeightsOf(Model& source, const Context& context) {
  auto fresh = std::make_unique<Impl>();
  fresh->BuildSharing(Built(source.impl_), context);
  impl_ = std::move(fresh);
}

void ModelGroup::AddModel(Model& model) {
  if (model.IsBuilt())
    throw InvalidArgument("ModelGroup.AddModel: the model is built already; add models to a group before building them");
  if (!model.impl_) model.impl_ = std::make_unique<Model::Impl>();
  if (model.impl_->group == state_) return;
  if (model.impl_->group) throw InvalidArgument("ModelGroup.AddModel: the model is a member of another group");
  model.impl_->group = state_;
  std::lock_guard<std::mutex> lock(state_->mu);
  ++state_->members;
}

std::string Model::ComputePrecision() const { return Built(impl_).compute_precision; }
bool Model::DynamicQuant() const { return Built(impl_).dynamic_quant; }

// The tensors the current plan stores with `flag` set (Plan::TensorState::channel_blocked or bf16_pixels).
static std::vector<std::string> TensorsMarked(const Model::Impl& impl, bool Plan::TensorState::*flag) {
  std::vector<std::string> names;
  if (!impl.active) return names;
  for (size_t i = 0; i < impl.m->tensors.size(); ++i)
    if (impl.active->tensors[i].*flag) names.push_back(impl.m->tensors[i].name);
  return names;
}

std::vector<std::string> Model::ChannelBlockedTensors() const {
  return TensorsMarked(Built(impl_), &Plan::TensorState::channel_blocked);
}

std::vector<std::string> Model::Bf16PixelTensors() const {
  return TensorsMarked(Built(impl_), &Plan::TensorState::bf16_pixels);
}

std::vector<std::string> Model::U8PixelTensors() const {
  return TensorsMarked(Built(impl_), &Plan::TensorState::u8_pixels);
}

std::vector<TensorInfo> Model::GetInputs() const {
  auto& impl = Built(impl_);
  std::vector<TensorInfo> r;
  for (size_t i = 0; i < impl.m->inputs.size(); ++i) {
    TensorInfo info = impl.Info(impl.m->inputs[i]);
    info.shape = impl.input_shapes[i];
    r.push_back(info);
  }
  return r;
}

std::vector<TensorInfo> Model::GetOutputs() const {
  auto& impl = Built(impl_);
  std::vector<TensorInfo> r;
  for (int idx : impl.m->outputs) r.push_back(impl.Info(idx));
  return r;
}

std::map<std::string, std::string> Model::Metadata() const {
  auto& impl = Built(impl_);
  return {impl.m->metadata.begin(), impl.m->metadata.end()};
}

void Model::Resize(const std::vector<Shape>& input_shapes) {
  auto& impl = Built(impl_);
  std::lock_guard<std::mutex> lock(impl.run_mu);
  if (input_shapes.size() != impl.m->inputs.size())
    throw InvalidArgument("resize expects " + std::to_string(impl.m->inputs.size()) + " shapes, got " +
                          std::to_string(input_shapes.size()));
  impl.CheckShapes(input_shapes, "resize of input");
  std::lock_guard<std::mutex> workspace_lock(impl.workspace->mu);
  if (impl.data_dependent) {
    impl.input_shapes = input_shapes;
  } else {
    impl.Activate(input_shapes);
  }
}

std::vector<Tensor> Model::Predict(const std::vector<TensorView>& inputs) { return Built(impl_).Predict(inputs, {}); }

std::vector<Tensor> Model::Predict(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs) {
  return Built(impl_).Predict(inputs, outputs);
}

void Model::SetProfiling(bool enabled) {
  auto& impl = Built(impl_);
  std::lock_guard<std::mutex> lock(impl.run_mu);
  impl.profiling = enabled;
  impl.profile.clear();
}

std::vector<NodeProfile> Model::LastProfile() const {
  auto& impl = Built(impl_);
  std::lock_guard<std::mutex> lock(impl.run_mu);
  return impl.profile;
}

size_t Model::ArenaBytes() const { return impl_ && impl_->active ? impl_->active->arena_bytes : 0; }

}  // namespace lite
