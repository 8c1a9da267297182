#include "sim/fiber_order.h"

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace metalrt::sim {

namespace {
constexpr const char* kAcceptedOrders = "forward, reverse, shuffle or shuffle:<seed> (a decimal seed)";

bool TryParseFiberOrder(const std::string& spec, FiberOrder& order) {
  order = FiberOrder{};
  if (spec == "forward") return true;
  if (spec == "reverse") {
    order.kind = FiberOrder::Kind::kReverse;
    return true;
  }
  if (spec.rfind("shuffle", 0) != 0) return false;
  order.kind = FiberOrder::Kind::kShuffle;
  if (spec.size() == 7) return true;
  if (spec[7] != ':' || spec.size() == 8) return false;
  // strtoull alone would take "-1" (wrapping it), " 1" and "+1": digits only.
  if (spec.find_first_not_of("0123456789", 8) != std::string::npos) return false;
  errno = 0;
  order.seed = std::strtoull(spec.c_str() + 8, nullptr, 10);
  return errno != ERANGE;
}
}  // namespace

FiberOrder ParseFiberOrder(const std::string& spec) {
  FiberOrder order;
  if (!TryParseFiberOrder(spec, order))
    throw std::invalid_argument(std::string("[sim] fiber order must be ") + kAcceptedOrders +
                                ", got '" + spec + "'");
  return order;
}

std::string FiberOrderName(const FiberOrder& order) {
  switch (order.kind) {
    case FiberOrder::Kind::kForward: return "forward";
    case FiberOrder::Kind::kReverse: return "reverse";
    case FiberOrder::Kind::kShuffle: return "shuffle:" + std::to_string(order.seed);
  }
  return "forward";
}

namespace {
std::mutex g_order_mutex;
FiberOrder& OrderSlot() {
  static FiberOrder order = FiberOrderFromEnvironment();
  return order;
}

// splitmix64: a small, well-mixed generator, so shuffles are reproducible.
uint64_t Mix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

FiberOrder FiberOrderFromEnvironment() {
  const char* env = std::getenv("METALRT_SIM_ORDER");
  FiberOrder order;
  if (env && *env && !TryParseFiberOrder(env, order))
    throw std::invalid_argument(std::string("METALRT_SIM_ORDER must be ") + kAcceptedOrders +
                                ", got '" + env + "'");
  return order;
}

void SetFiberOrder(const FiberOrder& order) {
  std::lock_guard<std::mutex> lock(g_order_mutex);
  OrderSlot() = order;
}

FiberOrder CurrentFiberOrder() {
  std::lock_guard<std::mutex> lock(g_order_mutex);
  return OrderSlot();
}

void FillRunOrder(const FiberOrder& order, uint64_t group, uint32_t count,
                  std::vector<uint32_t>& out) {
  out.resize(count);
  for (uint32_t i = 0; i < count; ++i)
    out[i] = order.kind == FiberOrder::Kind::kReverse ? count - 1 - i : i;
  if (order.kind != FiberOrder::Kind::kShuffle) return;
  uint64_t state = order.seed * 0x100000001b3ull ^ group;
  for (uint32_t i = count; i > 1; --i) {   // Fisher-Yates
    const auto j = static_cast<uint32_t>(Mix(state) % i);
    std::swap(out[i - 1], out[j]);
  }
}

}  // namespace metalrt::sim
