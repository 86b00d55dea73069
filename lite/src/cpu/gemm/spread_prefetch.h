// Fetching the next weight panel into L2 while a tile runs, a few lines at a time from inside the tile's depth loop.
// Issued in a burst before the tile, the prefetches held up the tile's first loads and the panel still came late
// (ResNet-50's 7x7 1x1 layers, whose weights stream from memory: 0.88x the time spread; BERT-base int8 0.987x).
#pragma once
#include <cstdint>

namespace lite {

// One line of a weight: non-temporal where nothing reads it again in the product (`once`: weights streaming through
// the L3 push the activations out of it), else with kLocality, __builtin_prefetch's hint (2: into L2; 3: into L1, for
// lines the next tile reads first thing).
template <int kLocality = 2>
inline void PrefetchWeightLine(const char* line, bool once) {
  if (once) {
    __builtin_prefetch(line, 0, 0);
  } else {
    __builtin_prefetch(line, 0, kLocality);
  }
}

// Streams read once front to back (a decode step's weights): fetched by software kStreamAhead bytes ahead of the
// loads, into L2. One thread left to the hardware prefetchers drew 24-31 GB/s from memory here against 29-35 GB/s with
// this (one-row int4 products over 24 layers' matrices); 512-2048 bytes ahead was slower than none: the lines came too
// late to hide a miss and took fill buffers the demand loads needed.
constexpr int64_t kStreamAhead = 8192;
inline void FetchAhead(const void* p, int64_t ahead = kStreamAhead) {
  PrefetchWeightLine<2>(static_cast<const char*>(p) + ahead, false);
}

template <int kLocality = 2>
class SpreadPrefetch {
 public:
  // `lines` cache lines from `next`, spread over a loop of `steps` steps that calls Issue() every `every` steps.
  // `once`: lines read only once (see PrefetchWeightLine).
  SpreadPrefetch(const char* next, int64_t lines, int64_t every, int64_t steps, bool once = false)
      : next_(next), left_(next ? lines : 0), per_issue_(left_ > 0 && steps > 0 ? (left_ * every + steps - 1) / steps : 0),
        once_(once) {}

  void Issue() {
    for (int64_t q = 0; q < per_issue_ && left_ > 0; ++q, --left_, next_ += 64) PrefetchWeightLine<kLocality>(next_, once_);
  }

 private:
  const char* next_;
  int64_t left_, per_issue_;
  bool once_;
};

}  // namespace lite
