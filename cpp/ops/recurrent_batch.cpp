#include "ops/recurrent_batch.h"

#include <string>
#include <vector>

#include "ops/op_common.h"

namespace metalrt::ops::detail {

int64_t CheckRecurrentBatch(const Tensor& query_start, const Tensor& state_slots, int64_t tokens,
                            int64_t slots, const char* op) {
  CheckRank(query_start, 1, op, "query_start");
  CheckDType(query_start, DType::kI32, op, "query_start");
  CheckContiguous(query_start, op, "query_start");
  Check(query_start.dim(0) >= 1, op, "query_start must hold R + 1 >= 1 offsets, got shape [0]");
  const int64_t requests = query_start.dim(0) - 1;
  CheckShape(state_slots, {requests}, op, "state_slots");
  CheckDType(state_slots, DType::kI32, op, "state_slots");
  CheckContiguous(state_slots, op, "state_slots");
  Check(ReadableOnHost(query_start), op, "query_start must be readable by the host (CPU or unified memory)");
  Check(ReadableOnHost(state_slots), op, "state_slots must be readable by the host (CPU or unified memory)");
  const int32_t* starts = query_start.data_as<int32_t>();
  Check(starts[0] == 0 && starts[requests] == tokens, op,
        "query_start must run from 0 to the " + std::to_string(tokens) + " tokens, got " +
            std::to_string(starts[0]) + " .. " + std::to_string(starts[requests]));
  const int32_t* slot = state_slots.data_as<int32_t>();
  std::vector<bool> used(static_cast<size_t>(slots), false);
  for (int64_t r = 0; r < requests; ++r) {
    const std::string req = "request " + std::to_string(r) + ": ";
    Check(starts[r + 1] >= starts[r], op, req + "query_start must be non-decreasing");
    Check(slot[r] >= 0 && slot[r] < slots, op,
          req + "state_slots value " + std::to_string(slot[r]) + " is outside the state pool of " +
              std::to_string(slots) + " slots");
    Check(!used[static_cast<size_t>(slot[r])], op,
          req + "state slot " + std::to_string(slot[r]) + " is used by an earlier request");
    used[static_cast<size_t>(slot[r])] = true;
  }
  return requests;
}

void CheckWritableState(const Tensor& state, const char* op, const char* arg) {
  Check(!(state.storage() && state.storage()->read_only()), op,
        std::string(arg) + " is a view of read-only memory (e.g. an np.memmap opened with "
                           "mode='r'); the state is updated in place");
}

}  // namespace metalrt::ops::detail
