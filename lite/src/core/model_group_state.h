// What the members of a ModelGroup share: one activation workspace, and a registry of their constants by content, so
// a weight two members' files both hold (an LLM's prompt and decode graphs, shape variants of one network) is packed
// once for both.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/graph.h"
#include "lite/model_group.h"

namespace lite {

// An activation arena. Models sharing one hold this lock while they run on it (and while they grow it).
struct Workspace {
  std::mutex mu;
  std::shared_ptr<void> arena;
  size_t capacity = 0;
};

// A constant's identity for sharing: everything its value and every packing of it depend on.
struct WeightIdentity {
  std::array<uint64_t, 2> hash{};   // 128 bits over the stored bytes and the quantisation record
  uint64_t bytes = 0;
  int dtype = 0;
  int storage = -1;                 // the compressed storage type, -1 for a plain constant
  int format = 0;
  Shape shape;
  bool operator<(const WeightIdentity& o) const;
};

// 128-bit hash of bytes (not cryptographic: identities of a user's own weights).
std::array<uint64_t, 2> HashBytes(const void* data, size_t bytes, std::array<uint64_t, 2> seed = {});

struct ModelGroupState {
  explicit ModelGroupState(ModelGroupFlag f) : flags(f) {}

  bool shares_weights() const { return static_cast<int>(flags) & static_cast<int>(ModelGroupFlag::kShareWeight); }
  bool shares_workspace() const {
    return static_cast<int>(flags) & static_cast<int>(ModelGroupFlag::kShareWorkspace);
  }
  // A member was loaded: its constants equal to another member's take that member's packed forms (kShareWeight),
  // and `workspace` becomes the group's (kShareWorkspace).
  void Join(LoadedModel& model, std::shared_ptr<Workspace>& workspace);

  const ModelGroupFlag flags;
  std::mutex mu;
  std::shared_ptr<Workspace> workspace = std::make_shared<Workspace>();
  std::map<WeightIdentity, std::weak_ptr<PackedForms>> weights;
  size_t shared_weight_bytes = 0;   // bytes of members' constants that found an equal one already in the group
  size_t members = 0;
};

// Constants smaller than this are not worth hashing: their packed forms are small too.
constexpr size_t kMinSharedWeightBytes = 4096;

}  // namespace lite
