// The order in which a threadgroup's fibers run between synchronisation points.
// Any order is legal on a GPU; running the same kernel in several orders makes a
// missing barrier show up as a difference. Chosen by
// METALRT_SIM_ORDER=forward|reverse|shuffle[:seed] or by SetFiberOrder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace metalrt::sim {

struct FiberOrder {
  enum class Kind : uint8_t { kForward, kReverse, kShuffle };
  Kind kind = Kind::kForward;
  uint64_t seed = 0;
};

// Parses "forward", "reverse", "shuffle" or "shuffle:<seed>"; throws
// std::invalid_argument otherwise.
FiberOrder ParseFiberOrder(const std::string& spec);
std::string FiberOrderName(const FiberOrder& order);

// METALRT_SIM_ORDER parsed (forward when unset or empty); anything else throws
// std::invalid_argument naming the variable, the value and the accepted values.
FiberOrder FiberOrderFromEnvironment();

// The process-wide order used by every dispatch that starts after the call.
void SetFiberOrder(const FiberOrder& order);
// Initialised from METALRT_SIM_ORDER on first use, so it throws what
// FiberOrderFromEnvironment throws. The simulated device makes that first use when
// it is created, on the caller's thread: a bad value must never first surface on
// the queue thread, where an exception would terminate the process.
FiberOrder CurrentFiberOrder();

// The run order of `count` threads of threadgroup number `group` (a shuffle
// depends only on the seed and the group, not on which worker runs it).
void FillRunOrder(const FiberOrder& order, uint64_t group, uint32_t count,
                  std::vector<uint32_t>& out);

}  // namespace metalrt::sim
