// ComputeRotary on a given thread pool (an operator's kernel runs on the model's pool, not a shared one).
#pragma once
#include "core/thread_pool.h"
#include "lite/rotary.h"

namespace lite {

// Validates (InvalidArgument, also for position ids outside the table) and runs on `pool` (nullptr: this thread).
void ComputeRotaryOn(const RotaryArgs& args, ThreadPool* pool);

}  // namespace lite
