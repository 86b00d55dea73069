// ModelGroup's shared state: the weight registry by content and the shared workspace (core/model_group_state.h).
#include <cstring>
#include <tuple>

#include "core/model_group_state.h"
#include "lite/errors.h"

namespace lite {

namespace {

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;

inline uint64_t Mix(uint64_t acc, uint64_t word) { return Rotl(acc + word * kP2, 31) * kP1; }

inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace

std::array<uint64_t, 2> HashBytes(const void* data, size_t bytes, std::array<uint64_t, 2> seed) {
  // Four independent lanes keep the multiplier busy (several GB/s); two finalisations of them give 128 bits.
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t lane[4] = {seed[0] + kP1, seed[1] + kP2, seed[0] ^ kP3, seed[1] - kP1};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    for (int k = 0; k < 4; ++k) lane[k] = Mix(lane[k], w[k]);
  }
  uint64_t tail[4] = {0, 0, 0, 0};
  std::memcpy(tail, p + i, bytes - i);
  for (int k = 0; k < 4; ++k) lane[k] = Mix(lane[k], tail[k]);
  const uint64_t len = static_cast<uint64_t>(bytes);
  const uint64_t a = Avalanche(Rotl(lane[0], 1) + Rotl(lane[1], 7) + Rotl(lane[2], 12) + Rotl(lane[3], 18) + len);
  const uint64_t b = Avalanche((lane[0] * kP3) ^ Rotl(lane[1], 23) ^ (lane[2] * kP1) ^ Rotl(lane[3], 41) ^ ~len);
  return {a, b};
}

bool WeightIdentity::operator<(const WeightIdentity& o) const {
  return std::tie(hash, bytes, dtype, storage, format, shape) <
         std::tie(o.hash, o.bytes, o.dtype, o.storage, o.format, o.shape);
}

namespace {

// The identity of a constant worth sharing; false for small ones.
bool IdentityOf(const TensorRec& t, WeightIdentity& id) {
  id.dtype = static_cast<int>(t.dtype);
  id.format = static_cast<int>(t.format);
  id.shape = t.declared_shape;
  if (t.decoded) {   // compressed storage: the codes and everything that turns them into values
    const StoredWeight& w = t.decoded->record;
    if (w.length < kMinSharedWeightBytes) return false;
    id.storage = static_cast<int>(w.storage);
    id.bytes = w.length;
    id.hash = HashBytes(w.bytes, w.length);
    if (const ms_schema::QuantParam* q = w.quant) {
      const int64_t fields[3] = {q->axis(), q->bits(), q->group_size()};
      id.hash = HashBytes(fields, sizeof(fields), id.hash);
      if (q->scale()) id.hash = HashBytes(q->scale()->data(), q->scale()->size() * sizeof(float), id.hash);
      if (q->zero_point())
        id.hash = HashBytes(q->zero_point()->data(), q->zero_point()->size() * sizeof(int64_t), id.hash);
    }
    return true;
  }
  if (t.data == nullptr || t.nbytes < kMinSharedWeightBytes) return false;
  id.bytes = t.nbytes;
  id.hash = HashBytes(t.data, t.nbytes);
  return true;
}

}  // namespace

void ModelGroupState::Join(LoadedModel& model, std::shared_ptr<Workspace>& member_workspace) {
  std::lock_guard<std::mutex> lock(mu);
  if (shares_workspace()) member_workspace = workspace;
  if (!shares_weights()) return;
  for (size_t g = 0; g < std::max<size_t>(model.graphs.size(), 1); ++g) {
    for (TensorRec& t : model.Graph(static_cast<int>(g)).tensors) {
      if (t.kind != TensorRec::Kind::kConstant || !t.packed) continue;
      WeightIdentity id;
      if (!IdentityOf(t, id)) continue;
      auto it = weights.find(id);
      if (it != weights.end()) {
        if (std::shared_ptr<PackedForms> forms = it->second.lock()) {
          t.packed = std::move(forms);
          shared_weight_bytes += id.bytes;
          continue;
        }
      }
      weights[id] = t.packed;
    }
  }
}

}  // namespace lite

namespace lite {

ModelGroup::ModelGroup(ModelGroupFlag flags) {
  const int f = static_cast<int>(flags);
  if (f < 1 || f > 3) throw InvalidArgument("ModelGroupFlag must be kShareWeight, kShareWorkspace or both");
  state_ = std::make_shared<ModelGroupState>(flags);
}

ModelGroup::~ModelGroup() = default;

ModelGroupFlag ModelGroup::flags() const { return state_->flags; }

size_t ModelGroup::NumModels() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->members;
}

size_t ModelGroup::WorkspaceBytes() const {
  std::lock_guard<std::mutex> lock(state_->workspace->mu);
  return state_->workspace->arena ? state_->workspace->capacity : 0;
}

size_t ModelGroup::SharedWeightBytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->shared_weight_bytes;
}

}  // namespace lite
