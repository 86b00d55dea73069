// Fused scaled dot-product attention on the CPU: softmax(scale * Q K^T + mask) V, tile by tile with an online
// softmax, so no [queries x keys] matrix is ever materialised. Shared by the runtime's Attention operator and
// lite_boost's block-sparse attention (through lite/attention.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"
#include "lite/attention.h"

#include <string>

namespace lite {

// Bytes of scratch RunAttention needs (keys and values packed once per head for the GEMM micro-kernels).
size_t AttentionScratchBytes(const AttentionArgs& args);

// Checks shapes, lengths and block selections; throws InvalidArgument naming the problem.
void ValidateAttention(const AttentionArgs& args);

// Runs attention; query head h reads key/value head h / (q_heads / kv_heads). scratch holds
// AttentionScratchBytes(args) bytes, 64-byte aligned. pool may be null.
void RunAttention(const AttentionArgs& args, void* scratch, ThreadPool* pool);

// Which path RunAttention takes for args (profiles): "attention_decode" (one query per sequence over the cache),
// else "attention" with "_bf16" / "_bf16_amx" where its two products run on bf16 dot products / AMX tiles.
std::string AttentionImplementation(const AttentionArgs& args);

}  // namespace lite
