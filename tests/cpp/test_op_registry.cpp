// Core gates of the op registry, on test-only op names so no real op is disturbed.
#include <doctest/doctest.h>

#include <algorithm>
#include <any>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "metalrt/op_registry.h"

using namespace metalrt;

namespace {

// What each provider does when called: accept, decline, or throw; and the call trace.
std::map<std::string, char> g_action;   // 'a' accept, 'd' decline, 't' throw
std::vector<std::string> g_trace;

template <const char* kName>
bool Provider(const OpCall&) {
  g_trace.push_back(kName);
  const char action = g_action[kName];
  if (action == 't') throw std::invalid_argument(std::string("[test] ") + kName + " failed");
  return action == 'a';
}

constexpr char kB[] = "test_registry_b";
constexpr char kA[] = "test_registry_a";
constexpr char kHigh[] = "test_registry_high";
constexpr char kLow[] = "test_registry_low";
constexpr char kOp[] = "test_registry_order";

// Registered out of trial order on purpose: b before a (same priority), low before high.
METALRT_REGISTER_PROVIDER(kOp, DeviceType::kCPU, kB, 0, Provider<kB>);
METALRT_REGISTER_PROVIDER(kOp, DeviceType::kCPU, kLow, -1, Provider<kLow>);
METALRT_REGISTER_PROVIDER(kOp, DeviceType::kCPU, kA, 0, Provider<kA>);
METALRT_REGISTER_PROVIDER(kOp, DeviceType::kCPU, kHigh, 5, Provider<kHigh>);

void Actions(char high, char a, char b, char low) {
  g_action = {{kHigh, high}, {kA, a}, {kB, b}, {kLow, low}};
  g_trace.clear();
}

}  // namespace

TEST_CASE("registry: providers are tried by descending priority, then name") {
  CHECK(ListProviders(kOp, DeviceType::kCPU) == std::vector<std::string>{kHigh, kA, kB, kLow});
  CHECK(OpRegistered(kOp, DeviceType::kCPU));
  CHECK(!OpRegistered(kOp, DeviceType::kMETAL));
  CHECK(!OpRegistered("test_registry_unknown", DeviceType::kCPU));
  const std::vector<OpId> ops = ListOps();
  CHECK(std::is_sorted(ops.begin(), ops.end()));
  CHECK(std::find(ops.begin(), ops.end(), kOp) != ops.end());
}

TEST_CASE("registry: declines fall through and are counted; stats name the provider") {
  ResetProviderStats();
  CHECK(GetProviderStats(kOp, DeviceType::kCPU).calls == 0);
  CHECK(GetProviderStats(kOp, DeviceType::kCPU).last_selected.empty());
  Actions('d', 'd', 'd', 'a');
  RunOp(kOp, DeviceType::kCPU, OpCall{});
  CHECK(g_trace == std::vector<std::string>{kHigh, kA, kB, kLow});
  ProviderStats s = GetProviderStats(kOp, DeviceType::kCPU);
  CHECK(s.last_selected == kLow);
  CHECK(s.calls == 1);
  CHECK(s.declines == 3);
  CHECK(s.reference_hits == 0);
  Actions('a', 'a', 'a', 'a');   // the first acceptor wins; nothing after it runs
  RunOp(kOp, DeviceType::kCPU, OpCall{});
  CHECK(g_trace == std::vector<std::string>{kHigh});
  s = GetProviderStats(kOp, DeviceType::kCPU);
  CHECK(s.last_selected == kHigh);
  CHECK(s.calls == 2);
  CHECK(s.declines == 3);
  ResetProviderStats();
  CHECK(GetProviderStats(kOp, DeviceType::kCPU).calls == 0);
}

TEST_CASE("registry: disabled providers are skipped, not counted; unknown names throw") {
  ResetProviderStats();
  SetProviderEnabled(kHigh, false);
  SetProviderEnabled(kA, false);
  Actions('a', 'a', 'd', 'a');
  RunOp(kOp, DeviceType::kCPU, OpCall{});
  CHECK(g_trace == std::vector<std::string>{kB, kLow});
  ProviderStats s = GetProviderStats(kOp, DeviceType::kCPU);
  CHECK(s.last_selected == kLow);
  CHECK(s.declines == 1);
  CHECK(ListProviders(kOp, DeviceType::kCPU).size() == 4);   // still registered
  SetProviderEnabled(kHigh, true);
  SetProviderEnabled(kA, true);
  Actions('a', 'a', 'a', 'a');
  RunOp(kOp, DeviceType::kCPU, OpCall{});
  CHECK(g_trace == std::vector<std::string>{kHigh});
  CHECK_THROWS_AS(SetProviderEnabled("test_registry_no_such_provider", false), std::invalid_argument);
}

TEST_CASE("registry: no accepting provider throws with the op name; provider errors propagate") {
  ResetProviderStats();
  Actions('d', 'd', 'd', 'd');
  CHECK_THROWS_WITH_AS(RunOp(kOp, DeviceType::kCPU, OpCall{}),
                       doctest::Contains("[test_registry_order] no provider"), std::runtime_error);
  CHECK(GetProviderStats(kOp, DeviceType::kCPU).calls == 0);
  CHECK(GetProviderStats(kOp, DeviceType::kCPU).declines == 4);
  CHECK_THROWS_AS(RunOp("test_registry_unknown", DeviceType::kCPU, OpCall{}), std::runtime_error);
  Actions('d', 't', 'a', 'a');
  CHECK_THROWS_WITH_AS(RunOp(kOp, DeviceType::kCPU, OpCall{}), "[test] test_registry_a failed",
                       std::invalid_argument);
  CHECK(g_trace == std::vector<std::string>{kHigh, kA});   // nothing ran after the throw
  CHECK(GetProviderStats(kOp, DeviceType::kCPU).calls == 0);
}

TEST_CASE("registry: a provider name registers once per op and device") {
  CHECK_THROWS_AS(RegisterProvider(kOp, DeviceType::kCPU, kA, 3, Provider<kA>), std::logic_error);
  CHECK(ListProviders(kOp, DeviceType::kCPU).size() == 4);
}

TEST_CASE("registry: params travel to the provider by type") {
  struct Params { int value; };
  OpCall call;
  call.params = Params{42};
  CHECK(call.param<Params>().value == 42);
  CHECK_THROWS_AS(call.param<float>(), std::bad_any_cast);
}
