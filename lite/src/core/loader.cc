#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "core/graph.h"
#include "core/kernel.h"
#include "format/weight_storage.h"
#include "lite/errors.h"

namespace lite {

const char* OpName(ms_schema::OpType op) {
  if (op < ms_schema::OpType::MIN || op > ms_schema::OpType::MAX) return "<unknown op>";
  return ms_schema::EnumNameOpType(op);
}

namespace {

using ms_schema::Attribute;
using ms_schema::OpType;

// An attribute table an operator may carry or omit (format 1.4: MatMul's fused epilogue).
Attribute OptionalAttribute(OpType op) { return op == OpType::MatMul ? Attribute::MatMulAttr : Attribute::NONE; }

// The attribute table each operator carries (NONE: the operator has no attributes).
Attribute ExpectedAttribute(OpType op) {
  switch (op) {
    case OpType::Conv: return Attribute::ConvAttr;
    case OpType::MaxPool:
    case OpType::AveragePool: return Attribute::PoolAttr;
    case OpType::Gemm: return Attribute::GemmAttr;
    case OpType::Concat:
    case OpType::Flatten:
    case OpType::Gather: return Attribute::AxisAttr;
    case OpType::Softmax: return Attribute::SoftmaxAttr;
    case OpType::Attention: return Attribute::AttentionAttr;
    case OpType::RotaryEmbedding: return Attribute::RotaryAttr;
    case OpType::MoE: return Attribute::MoEAttr;
    case OpType::CausalConv1D: return Attribute::CausalConvAttr;
    case OpType::GatedDeltaRule: return Attribute::GatedDeltaAttr;
    case OpType::NonMaxSuppression: return Attribute::NmsAttr;
    case OpType::LayerNormalization:
    case OpType::RMSNormalization:
    case OpType::BatchNormalization: return Attribute::NormAttr;
    case OpType::ReduceMean: return Attribute::ReduceAttr;
    case OpType::Transpose: return Attribute::TransposeAttr;
    case OpType::Split: return Attribute::SplitAttr;
    case OpType::Cast: return Attribute::CastAttr;
    case OpType::Clip: return Attribute::ClipAttr;
    case OpType::LeakyRelu: return Attribute::AlphaAttr;
    case OpType::Shape: return Attribute::ShapeAttr;
    case OpType::Reshape: return Attribute::ReshapeAttr;
    case OpType::Elu:
    case OpType::Selu:
    case OpType::Celu:
    case OpType::HardSigmoid:
    case OpType::ThresholdedRelu: return Attribute::ActivationAttr;
    case OpType::Gelu: return Attribute::GeluAttr;
    case OpType::Mod: return Attribute::ModAttr;
    case OpType::BitShift: return Attribute::BitShiftAttr;
    case OpType::IsInf: return Attribute::IsInfAttr;
    case OpType::ArgMax:
    case OpType::ArgMin: return Attribute::ArgAttr;
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceProd:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::ReduceLogSumExp:
    case OpType::ReduceSumSquare: return Attribute::ReduceAttr;
    case OpType::Trilu: return Attribute::TriluAttr;
    case OpType::CumSum: return Attribute::CumSumAttr;
    case OpType::Pad: return Attribute::PadAttr;
    case OpType::LogSoftmax:
    case OpType::Hardmax: return Attribute::SoftmaxAttr;
    case OpType::DepthToSpace:
    case OpType::SpaceToDepth: return Attribute::DepthSpaceAttr;
    case OpType::GatherElements:
    case OpType::OneHot: return Attribute::AxisAttr;
    case OpType::GatherND: return Attribute::BatchDimsAttr;
    case OpType::ScatterElements:
    case OpType::ScatterND: return Attribute::ScatterAttr;
    case OpType::TopK: return Attribute::TopKAttr;
    case OpType::InstanceNormalization: return Attribute::NormAttr;
    case OpType::GroupNormalization: return Attribute::GroupNormAttr;
    case OpType::LpNormalization: return Attribute::LpNormAttr;
    case OpType::ConvTranspose: return Attribute::ConvTransposeAttr;
    case OpType::Resize: return Attribute::ResizeAttr;
    case OpType::Einsum: return Attribute::EinsumAttr;
    case OpType::Compress: return Attribute::CompressAttr;
    case OpType::ReverseSequence: return Attribute::ReverseSequenceAttr;
    case OpType::LRN: return Attribute::LRNAttr;
    case OpType::LpPool:
    case OpType::MaxUnpool: return Attribute::PoolAttr;
    case OpType::LSTM:
    case OpType::GRU:
    case OpType::RNN: return Attribute::RecurrentAttr;
    case OpType::DFT:
    case OpType::STFT: return Attribute::DftAttr;
    case OpType::If: return Attribute::IfAttr;
    case OpType::Loop: return Attribute::LoopAttr;
    case OpType::Scan: return Attribute::ScanAttr;
    default: return Attribute::NONE;
  }
}

std::vector<int> SubgraphIndices(const NodeRec& node) {
  switch (node.op) {
    case OpType::If: return {node.fb->attr_as_IfAttr()->then_graph(), node.fb->attr_as_IfAttr()->else_graph()};
    case OpType::Loop: return {node.fb->attr_as_LoopAttr()->body()};
    case OpType::Scan: return {node.fb->attr_as_ScanAttr()->body()};
    default: return {};
  }
}

class Checker {
 public:
  explicit Checker(const std::string& path) : path_(path) {}
  [[noreturn]] void Fail(const std::string& why) const {
    throw ModelFormatError("invalid .ms file '" + path_ + "': " + why);
  }
  void Require(bool ok, const std::string& why) const {
    if (!ok) Fail(why);
  }

 private:
  std::string path_;
};

// Verifies and decodes graph `graph_index` of the model into `lg`.
void LoadGraph(const LoadedModel& model, int graph_index, const Checker& check, LoadedGraph& lg) {
  const MsHeader& h = model.header;
  const uint8_t* base = model.file->data();
  const ms_schema::Graph* g = model.fb->graphs()->Get(graph_index);
  check.Require(g->tensors() != nullptr, "graph has no tensor table");
  const auto* fts = g->tensors();
  const int num_tensors = static_cast<int>(fts->size());
  check.Require(fts->size() < (1u << 30), "too many tensors");

  lg.tensors.resize(num_tensors);
  for (int i = 0; i < num_tensors; ++i) {
    const ms_schema::Tensor* ft = fts->Get(i);
    TensorRec& t = lg.tensors[i];
    t.name = ft->name() ? ft->name()->str() : "tensor_" + std::to_string(i);
    auto dt = ft->dtype();
    check.Require(dt > ms_schema::DataType::UNKNOWN && dt <= ms_schema::DataType::MAX,
                  "tensor '" + t.name + "' has an unknown dtype " + std::to_string(static_cast<int>(dt)));
    t.dtype = static_cast<DataType>(dt);
    auto fmt = ft->format();
    check.Require(fmt >= ms_schema::Format::MIN && fmt <= ms_schema::Format::MAX,
                  "tensor '" + t.name + "' has an unknown format");
    t.format = static_cast<Format>(fmt);
    if (ft->shape()) {
      check.Require(ft->shape()->size() <= 16, "tensor '" + t.name + "' has rank above 16");
      for (int64_t d : *ft->shape()) {
        check.Require(d >= -1, "tensor '" + t.name + "' has an invalid dim " + std::to_string(d));
        t.declared_shape.push_back(d);
      }
    }
    if (!ft->has_data() && ft->quant() && t.dtype == DataType::kUInt8) {   // quantised activation (1.11)
      const auto* q = ft->quant();
      check.Require(q->scale() && q->scale()->size() == 1 && q->zero_point() && q->zero_point()->size() == 1,
                    "uint8 activation '" + t.name + "' needs one scale and one zero point");
      const float scale = q->scale()->Get(0);
      const int64_t zp = q->zero_point()->Get(0);
      check.Require(scale > 0.f && std::isfinite(scale) && zp >= 0 && zp <= 255,
                    "uint8 activation '" + t.name + "' has scale " + std::to_string(scale) + " and zero point " +
                        std::to_string(zp) + " (needs a finite scale > 0 and a zero point in [0, 255])");
      t.act_scale = scale;
      t.act_zero_point = static_cast<int32_t>(zp);
    }
    if (ft->has_data()) {
      t.kind = TensorRec::Kind::kConstant;
      t.packed = std::make_shared<PackedForms>();
      const uint64_t off = ft->data_offset(), len = ft->data_length();
      check.Require(off % kMsWeightAlignment == 0, "weight of '" + t.name + "' is not 64-byte aligned");
      check.Require(off <= h.weights_size && len <= h.weights_size - off,
                    "weight of '" + t.name + "' [" + std::to_string(off) + ", +" + std::to_string(len) +
                        ") lies outside the weight section");
      for (int64_t d : t.declared_shape)
        check.Require(d >= 0, "constant '" + t.name + "' has a dynamic dim");
      int64_t numel = 1;
      for (int64_t d : t.declared_shape) {
        check.Require(d == 0 || numel <= (int64_t(1) << 50) / d, "constant '" + t.name + "' is too large");
        numel *= d;
      }
      t.shape = t.declared_shape;
      t.known = true;
      const auto storage = ft->storage();
      if (storage != ms_schema::DataType::UNKNOWN && storage != dt) {
        // Stored compressed (fp16, bf16, int8/int4 codes): decoded to float32 here, once.
        check.Require(t.dtype == DataType::kFloat32, "constant '" + t.name + "' of dtype " + DataTypeName(t.dtype) +
                                                         " has a storage type (only float32 constants may)");
        // Checked now, decoded to float32 later: just before the first node reading it is prepared (main
        // graph), or below once the graph is read (control-flow bodies, graph outputs).
        DecodedConstant& d = lg.decoded.emplace_back();
        d.record = StoredWeight{storage, ft->quant(), t.declared_shape, base + h.weights_offset + off, len};
        const std::string err = ValidateStoredWeight(d.record);
        check.Require(err.empty(), "constant '" + t.name + "' " + err);
        d.tensor = i;
        d.releasable = graph_index == 0;
        d.released = true;   // not decoded yet
        t.nbytes = static_cast<size_t>(numel) * sizeof(float);
        t.data = nullptr;
        t.mapped = false;
        t.decoded = &d;
        continue;
      }
      check.Require(static_cast<uint64_t>(numel) * DataTypeSize(t.dtype) == len,
                    "constant '" + t.name + "' holds " + std::to_string(len) + " bytes, its shape needs " +
                        std::to_string(numel * DataTypeSize(t.dtype)));
      t.nbytes = len;
      t.data = const_cast<uint8_t*>(base + h.weights_offset + off);   // read-only mapping; kernels never write constants
      t.mapped = true;
    }
  }

  auto check_index = [&](int idx, const std::string& what) {
    check.Require(idx >= 0 && idx < num_tensors, what + " refers to tensor index " + std::to_string(idx) +
                                                     " (graph has " + std::to_string(num_tensors) + ")");
  };
  std::vector<char> available(num_tensors, 0);
  std::vector<char> is_input(num_tensors, 0);
  for (int i = 0; i < num_tensors; ++i) available[i] = lg.tensors[i].kind == TensorRec::Kind::kConstant;

  check.Require(g->inputs() != nullptr && g->outputs() != nullptr, "graph lacks input or output list");
  for (int idx : *g->inputs()) {
    check_index(idx, "graph input");
    TensorRec& t = lg.tensors[idx];
    check.Require(t.kind != TensorRec::Kind::kConstant && !is_input[idx], "graph input '" + t.name + "' is invalid");
    t.kind = TensorRec::Kind::kInput;
    is_input[idx] = available[idx] = 1;
    lg.inputs.push_back(idx);
  }

  const auto* fnodes = g->nodes();
  const int num_nodes = fnodes ? static_cast<int>(fnodes->size()) : 0;
  lg.nodes.resize(num_nodes);
  for (int n = 0; n < num_nodes; ++n) {
    const ms_schema::Node* fn = fnodes->Get(n);
    NodeRec& node = lg.nodes[n];
    node.fb = fn;
    node.model = &model;
    node.graph = graph_index;
    node.op = fn->op();
    node.name = fn->name() ? fn->name()->str() : "node_" + std::to_string(n);
    check.Require(node.op >= OpType::MIN && node.op <= OpType::MAX,
                  "node '" + node.name + "' has unknown operator code " + std::to_string(static_cast<int>(node.op)));
    const Attribute want = ExpectedAttribute(node.op);
    const Attribute optional = OptionalAttribute(node.op);
    check.Require(fn->attr_type() == want || fn->attr_type() == Attribute::NONE ||
                      (optional != Attribute::NONE && fn->attr_type() == optional && fn->attr() != nullptr),
                  "node '" + node.name + "' (" + OpName(node.op) + ") carries the wrong attribute table");
    check.Require(want == Attribute::NONE || (fn->attr_type() == want && fn->attr() != nullptr),
                  "node '" + node.name + "' (" + OpName(node.op) + ") lacks its attribute table");
    check.Require(fn->int8() == nullptr || node.op == OpType::MatMul || node.op == OpType::Gemm ||
                      node.op == OpType::Conv,
                  "node '" + node.name + "' (" + OpName(node.op) + ") carries an int8 table; only MatMul, Gemm and "
                  "Conv compute in integers");
    if (fn->inputs()) {
      for (int idx : *fn->inputs()) {
        if (idx == -1) {
          node.inputs.push_back(-1);
          continue;
        }
        check_index(idx, "node '" + node.name + "' input");
        check.Require(available[idx], "node '" + node.name + "' reads tensor '" + lg.tensors[idx].name +
                                          "' before it is produced (graph not topologically sorted)");
        lg.tensors[idx].last_use = n;
        if (lg.tensors[idx].decoded) ++lg.tensors[idx].decoded->consumers;
        node.inputs.push_back(idx);
      }
    }
    check.Require(fn->outputs() && fn->outputs()->size() > 0, "node '" + node.name + "' has no outputs");
    for (int idx : *fn->outputs()) {
      check_index(idx, "node '" + node.name + "' output");
      check.Require(!available[idx], "tensor '" + lg.tensors[idx].name + "' is produced twice or overwrites a constant/input");
      available[idx] = 1;
      lg.tensors[idx].producer = n;
      node.outputs.push_back(idx);
    }
  }
  for (int idx : *g->outputs()) {
    check_index(idx, "graph output");
    check.Require(available[idx], "graph output '" + lg.tensors[idx].name + "' is never produced");
    if (lg.tensors[idx].decoded) lg.tensors[idx].decoded->releasable = false;   // read by the caller
    lg.outputs.push_back(idx);
  }
  check.Require(!lg.outputs.empty(), "graph has no outputs");
  for (DecodedConstant& d : lg.decoded)
    if (!d.releasable) EnsureDecoded(lg.tensors[d.tensor]);
  for (const NodeRec& node : lg.nodes) {
    for (int sub : SubgraphIndices(node)) {
      // Sub-graphs come after the graph that uses them: no cycles, and the loader visits each once.
      check.Require(sub > graph_index && sub < static_cast<int>(model.fb->graphs()->size()),
                    "node '" + node.name + "' refers to graph " + std::to_string(sub) + " (must be in (" +
                        std::to_string(graph_index) + ", " + std::to_string(model.fb->graphs()->size()) + "))");
    }
  }
}

}  // namespace

std::unique_ptr<LoadedModel> LoadModel(const std::string& path) {
  auto m = std::make_unique<LoadedModel>();
  m->file = std::make_unique<MappedFile>(path);
  const uint8_t* base = m->file->data();
  m->header = ParseHeader(base, m->file->size(), path);
  const MsHeader& h = m->header;
  Checker check(path);

  const uint8_t* graph_bytes = base + h.graph_offset;
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 64;
  opts.max_tables = 10'000'000;
  flatbuffers::Verifier verifier(graph_bytes, h.graph_size, opts);
  check.Require(ms_schema::ModelBufferHasIdentifier(graph_bytes), "graph has the wrong FlatBuffers identifier");
  check.Require(ms_schema::VerifyModelBuffer(verifier), "FlatBuffers verification of the graph failed");
  m->fb = ms_schema::GetModel(graph_bytes);

  if (auto md = m->fb->metadata()) {
    for (const auto* kv : *md)
      if (kv->key()) m->metadata.emplace_back(kv->key()->str(), kv->value() ? kv->value()->str() : "");
  }
  if (m->fb->producer()) m->metadata.emplace_back("producer", m->fb->producer()->str());
  if (m->fb->source_model()) m->metadata.emplace_back("source_model", m->fb->source_model()->str());

  check.Require(m->fb->graphs() && m->fb->graphs()->size() > 0 && m->fb->graphs()->size() < 4096,
                "model has no graph (or too many)");
  LoadGraph(*m, 0, check, *m);
  m->graphs.resize(m->fb->graphs()->size());
  for (size_t i = 1; i < m->graphs.size(); ++i) {
    m->graphs[i] = std::make_unique<LoadedGraph>();
    LoadGraph(*m, static_cast<int>(i), check, *m->graphs[i]);
  }
  return m;
}

namespace {

// The copy's records of one graph: constants as the source has them (same data, decoded values and packed forms),
// inputs and activations reset to what LoadGraph left.
void CopyGraphRecords(const LoadedGraph& from, LoadedGraph& to, const LoadedModel& owner) {
  to.tensors = from.tensors;
  for (TensorRec& t : to.tensors) {
    if (t.kind == TensorRec::Kind::kConstant) continue;
    t.shape.clear();
    t.data = nullptr;
    t.nbytes = 0;
    t.known = false;
    t.owned.clear();
    t.owned.shrink_to_fit();
    t.channel_blocked = t.bf16_pixels = t.u8_pixels = false;
  }
  to.nodes = from.nodes;
  for (NodeRec& node : to.nodes) node.model = &owner;
  to.inputs = from.inputs;
  to.outputs = from.outputs;
  // to.decoded stays empty: the constants point at the source's DecodedConstant records.
}

}  // namespace

std::unique_ptr<LoadedModel> ShareWeights(const std::shared_ptr<LoadedModel>& source) {
  LoadedModel& src = *source;
  {
    std::lock_guard<std::mutex> lock(*src.prepare_mu);
    for (size_t g = 0; g < std::max<size_t>(src.graphs.size(), 1); ++g) {
      LoadedGraph& lg = src.Graph(static_cast<int>(g));
      for (DecodedConstant& d : lg.decoded) d.releasable = false;   // decoded on first need, then kept
    }
  }
  auto copy = std::make_unique<LoadedModel>();
  copy->file = src.file;
  copy->weights_owner = src.weights_owner ? src.weights_owner : source;
  copy->prepare_mu = src.prepare_mu;
  copy->header = src.header;
  copy->fb = src.fb;
  copy->metadata = src.metadata;
  CopyGraphRecords(src, *copy, *copy);
  copy->graphs.resize(src.graphs.size());
  for (size_t g = 1; g < src.graphs.size(); ++g) {
    copy->graphs[g] = std::make_unique<LoadedGraph>();
    CopyGraphRecords(*src.graphs[g], *copy->graphs[g], *copy);
  }
  return copy;
}

}  // namespace lite
