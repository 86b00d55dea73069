#include "core/kernel.h"

#include <cstdint>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace lite {

void Kernel::Fail(const std::string& msg) const {
  throw InvalidArgument("node '" + node_.name + "' (" + OpName(node_.op) + "): " + msg);
}

TensorRec& Kernel::In(KernelIO& io, size_t i) const {
  if (!io.has(i)) Fail("required input #" + std::to_string(i) + " is missing");
  return *io.in[i];
}

const TensorRec& Kernel::RequireValue(const KernelIO& io, size_t i, const char* what) const {
  if (!io.has(i)) Fail(std::string("input '") + what + "' is missing");
  const TensorRec& t = *io.in[i];
  if (!t.known)
    throw DataDependentShape("node '" + node_.name + "' (" + OpName(node_.op) + "): input '" + what + "' (tensor '" +
                       t.name + "') depends on input data");
  return t;
}

std::vector<int64_t> Kernel::ReadInts(const TensorRec& t) const {
  const int64_t n = t.numel();
  std::vector<int64_t> v(n);
  if (t.dtype == DataType::kInt64) {
    if (n > 0) std::memcpy(v.data(), t.data, n * sizeof(int64_t));   // (an empty tensor may have no data)
  } else if (t.dtype == DataType::kInt32) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<const int32_t*>(t.data)[i];
  } else {
    Fail("tensor '" + t.name + "' must be int64 or int32, got " + DataTypeName(t.dtype));
  }
  return v;
}

void KernelRegistry::Register(ms_schema::OpType op, DataType dtype, KernelFactory factory) {
  table_[{static_cast<int>(op), static_cast<int>(dtype)}] = factory;
}

bool AnyTensorMarked(const KernelIO& io, bool TensorRec::*flag) {
  for (const TensorRec* t : io.in)
    if (t && t->*flag) return true;
  for (const TensorRec* t : io.out)
    if (t->*flag) return true;
  return false;
}

bool Kernel::AcceptsLayouts(const KernelIO& io) const { return !AnyTensorMarked(io, &TensorRec::channel_blocked); }

bool Kernel::AcceptsBf16Pixels(const KernelIO& io) const { return !AnyTensorMarked(io, &TensorRec::bf16_pixels); }

bool Kernel::AcceptsU8Pixels(const KernelIO& io) const { return !AnyTensorMarked(io, &TensorRec::u8_pixels); }

void MarkRunTimeActivations(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                            const std::vector<KernelIO>& ios, const std::vector<char>& evaluated_at_prepare,
                            bool TensorRec::*flag, const std::function<bool(const TensorRec&)>& eligible) {
  for (size_t n = 0; n < ios.size(); ++n) {
    if (evaluated_at_prepare[n]) continue;
    for (TensorRec* t : ios[n].out) {
      const bool is_output = std::find(graph_outputs.begin(), graph_outputs.end(),
                                       static_cast<int>(t - tensors.data())) != graph_outputs.end();
      t->*flag = t->kind == TensorRec::Kind::kActivation && !t->known && !is_output && eligible(*t);
    }
  }
}

void RetractRefusedMarks(const std::vector<KernelIO>& ios, const std::vector<char>& evaluated_at_prepare,
                         bool TensorRec::*flag, const std::function<bool(size_t node)>& accepts) {
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < ios.size(); ++n) {
      const KernelIO& io = ios[n];
      // (A node evaluated at prepare time with a marked tensor reads only its shape: Shape, Size; they accept any.)
      if (!AnyTensorMarked(io, flag) || accepts(n)) continue;
      for (TensorRec* t : io.in)
        if (t) t->*flag = false;
      for (TensorRec* t : io.out) t->*flag = false;
      changed = true;
    }
  }
}

void ResetTensors(std::vector<TensorRec>& tensors, const std::vector<DataType>& declared_dtypes) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorRec& t = tensors[i];
    if (t.kind == TensorRec::Kind::kConstant) continue;
    t.shape.clear();
    t.data = nullptr;
    t.nbytes = 0;
    t.known = false;
    t.channel_blocked = false;
    t.bf16_pixels = false;
    t.u8_pixels = false;
    t.owned.clear();
    t.dtype = declared_dtypes[i];
  }
}

void EvaluateNow(Kernel& kernel, KernelIO& io, ThreadPool* pool) {
  for (TensorRec* t : io.out) {
    t->nbytes = ShapeNumel(t->shape) * DataTypeSize(t->dtype);
    t->owned.assign(std::max<size_t>(t->nbytes, 1), 0);
    t->data = t->owned.data();
    t->known = true;
  }
  std::vector<uint8_t> scratch(kernel.ScratchBytes(io) + 64);
  KernelContext kc{pool, reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63))};
  kernel.Run(io, kc);
}

std::vector<std::pair<ms_schema::OpType, DataType>> KernelRegistry::Entries() const {
  std::vector<std::pair<ms_schema::OpType, DataType>> out;
  for (const auto& kv : table_)
    out.emplace_back(static_cast<ms_schema::OpType>(kv.first.first), static_cast<DataType>(kv.first.second));
  return out;
}

KernelFactory KernelRegistry::Find(ms_schema::OpType op, DataType dtype) const {
  auto it = table_.find({static_cast<int>(op), static_cast<int>(dtype)});
  if (it != table_.end()) return it->second;
  it = table_.find({static_cast<int>(op), static_cast<int>(DataType::kUnknown)});
  return it == table_.end() ? nullptr : it->second;
}

}  // namespace lite

namespace lite {

void ReleaseMappedPages(TensorRec& t) {
  if (t.decoded) {   // a decoded copy: freed once every reader has packed it (see DecodedConstant)
    DecodedConstant& d = *t.decoded;
    if (d.releasable && ++d.packed >= d.consumers) {
      std::vector<float>().swap(d.values);
      t.data = nullptr;
      d.released = true;
    }
    return;
  }
  if (!t.mapped || t.data == nullptr || t.nbytes == 0) return;
  DropMappedRange(t.data, t.nbytes);
}

void DropMappedRange(const void* data, size_t nbytes) {
#if defined(__linux__)
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + nbytes) / page * page;   // whole pages only
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#else
  (void)data;
  (void)nbytes;
#endif
}

void PopulateMappedRange(const void* data, size_t nbytes) {
  if (data == nullptr || nbytes == 0) return;
#if defined(__linux__)
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + nbytes + page - 1) / page * page;
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;   // Linux 5.14; older kernels refuse it (EINVAL): pages are read below
#endif
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return;
#endif
  // Elsewhere (or refused): one read per page faults it in.
  const volatile uint8_t* bytes = static_cast<const volatile uint8_t*>(data);
  const size_t step = 4096;
  uint8_t sink = 0;
  for (size_t i = 0; i < nbytes; i += step) sink ^= bytes[i];
  sink ^= bytes[nbytes - 1];
  (void)sink;
}

size_t PhysicalMemoryBytes() {
  static const size_t bytes = [] {
#if defined(__linux__)
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return static_cast<size_t>(pages) * static_cast<size_t>(page);
#endif
    return size_t(1) << 40;
  }();
  return bytes;
}

void TrimFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);   // glibc keeps freed heap blocks (a freed decoded weight) mapped: hand the pages back
#endif
}

void PrepareDecodedConstants(LoadedGraph& g) {
  for (DecodedConstant& d : g.decoded) d.packed = 0;
}

void EnsureDecoded(TensorRec& t) {
  if (!t.decoded) return;
  DecodedConstant& d = *t.decoded;
  if (d.released) {
    DecodeStoredWeight(d.record, d.values);   // validated when the model was loaded
    DropMappedRange(d.record.bytes, d.record.length);
    d.released = false;
  }
  t.data = d.values.data();   // (a model sharing the weights may have decoded them: this record points there too)
}

}  // namespace lite
