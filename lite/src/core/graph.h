// The runtime's view of a verified .ms graph. Attribute tables stay in the mapped file (zero copy).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "format/ms_file.h"
#include "format/weight_storage.h"
#include "lite/types.h"
#include "model_generated.h"

namespace lite {

struct DecodedConstant;

// A constant weight's packed forms, by packing (layout and kind): each made once, then shared by every plan of the
// model, so a model planned for many input shapes (an LLM engine's steps) keeps one packed copy and never packs it
// again, and by every model built on the same weights (ModelParallelRunner's workers, a ModelGroup's members sharing
// weights), whose plans may prepare on several threads at once: hence the lock.
struct PackedForms {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const void>> forms;
};

struct TensorRec {
  enum class Kind { kConstant, kInput, kActivation };
  std::string name;
  Kind kind = Kind::kActivation;
  DataType dtype = DataType::kUnknown;
  Format format = Format::kDefault;
  Shape declared_shape;          // from the file; -1 = dynamic
  // A UINT8 activation holding quantisation codes (format 1.11): value = (code - act_zero_point) * act_scale.
  // 0 when the tensor is not one (integer Convs read and write such tensors, kernels/integer_compute.cc).
  float act_scale = 0.f;
  int32_t act_zero_point = 0;

  // State of the current prepare.
  Shape shape;
  void* data = nullptr;
  size_t nbytes = 0;
  bool known = false;            // value available at prepare time (constant or evaluated eagerly)
  std::vector<uint8_t> owned;    // storage of eagerly evaluated values
  bool mapped = false;           // a constant read in place from the file mapping
  bool populated = false;        // its mapped pages were made resident (PopulateMappedRange), once for every plan
  DecodedConstant* decoded = nullptr;   // a constant decoded from compressed storage (owned by its graph)
  bool channel_blocked = false;  // stored NCHW8c (core/channel_blocked_layout.h), chosen per prepare
  bool bf16_pixels = false;      // stored as pixel-major bf16 rows (core/bf16_pixel_layout.h), chosen per prepare
  bool u8_pixels = false;        // uint8 codes stored as pixel-major rows (core/u8_pixel_layout.h), chosen per prepare
  int producer = -1;             // node index, -1 for constants and inputs
  int last_use = -1;             // last consuming node index
  // A constant's packed forms (set for every constant at load; shared with the models built on the same weights).
  std::shared_ptr<PackedForms> packed;

  int64_t numel() const { return ShapeNumel(shape); }
  template <typename T> T* as() { return static_cast<T*>(data); }
  template <typename T> const T* as() const { return static_cast<const T*>(data); }
};

struct LoadedModel;

struct NodeRec {
  std::string name;
  ms_schema::OpType op;
  const ms_schema::Node* fb = nullptr;
  std::vector<int> inputs;   // -1 = omitted optional input
  std::vector<int> outputs;
  const LoadedModel* model = nullptr;   // for control-flow nodes: where their sub-graphs live
  int graph = 0;                        // index of the graph holding this node
};

// One verified graph: the main graph or a control-flow body.
// A constant the file stores compressed (fp16, int8/int4 codes): decoded to float32 at load. In the main graph,
// once every node reading it has packed it (no kernel reads it at run time any more), the float32 copy is
// freed, like the mapped pages of a float32 weight, and decoded again when a new plan is prepared.
struct DecodedConstant {
  StoredWeight record;
  std::vector<float> values;
  int tensor = -1;          // index in the graph's tensors
  int consumers = 0;        // nodes reading it
  int packed = 0;           // of those, in the current plan, kernels that packed it
  bool releasable = false;  // main graph only (control-flow bodies prepare their plans at run time)
  bool released = false;
};

struct LoadedGraph {
  std::vector<TensorRec> tensors;
  std::deque<DecodedConstant> decoded;
  std::vector<NodeRec> nodes;
  std::vector<int> inputs;
  std::vector<int> outputs;
};

// The main graph's members are the model's own (m->tensors, m->nodes, ...); graphs[i] for i >= 1 are
// sub-graphs referenced by If/Loop/Scan nodes (graphs[0] is unused: the main graph is *this).
struct LoadedModel : LoadedGraph {
  std::shared_ptr<const MappedFile> file;
  // Models built on the weights of another (ShareWeights) keep it alive: their constants read its decoded values.
  std::shared_ptr<const LoadedModel> weights_owner;
  // Held while a plan is prepared: kernels of the models sharing these weights pack and release constants then.
  std::shared_ptr<std::mutex> prepare_mu = std::make_shared<std::mutex>();
  MsHeader header{};
  const ms_schema::Model* fb = nullptr;
  std::vector<std::unique_ptr<LoadedGraph>> graphs;
  std::vector<std::pair<std::string, std::string>> metadata;

  const LoadedGraph& Graph(int index) const {
    if (index == 0) return *this;
    return *graphs.at(index);
  }
  LoadedGraph& Graph(int index) {
    if (index == 0) return *this;
    return *graphs.at(index);
  }
};

const char* OpName(ms_schema::OpType op);

// mmaps, verifies and decodes a .ms file. Every structural problem is a ModelFormatError.
std::unique_ptr<LoadedModel> LoadModel(const std::string& path);

// A second view of `source`'s graphs over the same weights: the file mapping, the decoded constants and every
// constant's packed forms are shared (one copy for both), the records of inputs and activations are the copy's own
// (reset, as after LoadModel). `source` must not be running or preparing meanwhile. From now on a decoded constant,
// once decoded (when a plan first needs its float32 values; int8/int4 codes read as codes never are), stays decoded:
// no plan of one model may free what another reads.
std::unique_ptr<LoadedModel> ShareWeights(const std::shared_ptr<LoadedModel>& source);

}  // namespace lite
