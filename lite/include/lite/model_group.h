// Models that share memory: the weights they have in common and/or one activation workspace (MindSpore Lite's
// ModelGroup). Typical members: an LLM's prompt and decode graphs, or one network converted for several input shapes.
#pragma once
#include <cstddef>
#include <memory>

namespace lite {

class Model;
struct ModelGroupState;

enum class ModelGroupFlag : int {
  kShareWeight = 1,            // constants equal in content (shape, dtype, bytes) are packed once for every member
  kShareWorkspace = 2,         // members run on one activation arena, sized for the largest; they run one at a time
  kShareWeightWorkspace = 3,
};

class ModelGroup {
 public:
  explicit ModelGroup(ModelGroupFlag flags = ModelGroupFlag::kShareWorkspace);
  ~ModelGroup();
  ModelGroup(const ModelGroup&) = delete;
  ModelGroup& operator=(const ModelGroup&) = delete;

  // Makes `model` a member. Its next BuildFromFile shares with the members built before it. Throws InvalidArgument
  // when `model` is built already (its weights are packed on their own by then) or is in another group.
  void AddModel(Model& model);

  ModelGroupFlag flags() const;
  size_t NumModels() const;
  // The shared workspace's size now (kShareWorkspace), in bytes: the largest plan of any member so far.
  size_t WorkspaceBytes() const;
  // Bytes of members' constants that were equal to a constant another member had already (kShareWeight).
  size_t SharedWeightBytes() const;

 private:
  std::shared_ptr<ModelGroupState> state_;
};

}  // namespace lite
