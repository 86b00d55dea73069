// A step of paged decodes (one query per sample, at its sample's last position): scores straight from the KV cache's
// rows, one sample's kv head (and the query heads sharing it) per task, float32 throughout. The tiled path's packing
// of every key block cost more than its products here (~0.5 ms a layer at 600 cached tokens, a third of an int8 0.5B
// model's step); per-key calls of a generic dot product then held it to ~4 GMAC/s, so the per-key work is one
// vectorised call for all the query heads of a group.
#pragma once
#include "core/thread_pool.h"
#include "lite/attention.h"

namespace lite {

// Whether RunAttention can take `a` down this path: paged, causal from the end, one query per sample, no mask,
// selection or log-sum-exp output, float32 queries (a right window cannot reach past the last position).
bool IsPagedDecodeStep(const AttentionArgs& a);
// Whether RunAttention can take `a` down the same path with dense keys / values: one query per sample (non-causal
// without a window, or causal from the end), or up to 8 non-causal ones with one query head per key head; no mask,
// selection or log-sum-exp output, float32.
bool IsDenseDecodeStep(const AttentionArgs& a);
// Either form (paged when a.kv_block_table is set).
void RunPagedDecode(const AttentionArgs& a, ThreadPool* pool);

}  // namespace lite
