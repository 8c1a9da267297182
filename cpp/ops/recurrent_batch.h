// Validation of the batch description shared by the ops with per-request recurrent
// state (causal_conv1d, gated_delta_rule): query_start int32 [R + 1] and state_slots
// int32 [R], read on the host (metalrt/linear_attention_ops.h).
#pragma once
#include <cstdint>

#include "metalrt/tensor.h"

namespace metalrt::ops::detail {

// Checks query_start (contiguous int32 [R + 1], from 0 to `tokens`, non-decreasing) and
// state_slots (contiguous int32 [R], each in [0, slots), no slot twice: two requests
// writing one slot would race) where the host can read them; returns R. Throws
// std::invalid_argument / TypeError naming the argument.
int64_t CheckRecurrentBatch(const Tensor& query_start, const Tensor& state_slots, int64_t tokens,
                            int64_t slots, const char* op);
// The state pool is written in place: a view of read-only memory (an np.memmap opened
// with mode='r') would fault, so it is refused.
void CheckWritableState(const Tensor& state, const char* op, const char* arg);

}  // namespace metalrt::ops::detail
