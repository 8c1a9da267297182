// The simulated device's host side, independent of any kernel: fibers, fiber
// orders, buffers, command buffers, library errors.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <vector>

#include "sim/fiber.h"
#include "sim/fiber_order.h"
#include "sim/sim_device.h"

using namespace metalrt;
using Status = gpu::GpuCommandBuffer::Status;

namespace {
struct PingPong {
  sim::Fiber main, a, b;
  std::vector<int> trace;
};
PingPong* g_pp = nullptr;

void RunA(void*) {
  double keep = 1.5;   // lives in a callee-saved register or on the fiber's stack
  for (int i = 0; i < 3; ++i) {
    g_pp->trace.push_back(10 + i);
    keep *= 2;
    sim::Fiber::Switch(g_pp->a, g_pp->b);
  }
  g_pp->trace.push_back(static_cast<int>(keep));   // 12
  sim::Fiber::Switch(g_pp->a, g_pp->main);
}
void RunB(void* arg) {
  const int base = *static_cast<int*>(arg);
  for (int i = 0;; ++i) {
    g_pp->trace.push_back(base + i);
    sim::Fiber::Switch(g_pp->b, g_pp->a);
  }
}
}  // namespace

TEST_CASE("sim fibers: switches keep each fiber's state") {
  PingPong pp;
  g_pp = &pp;
  sim::FiberStack sa(64 * 1024), sb(64 * 1024);
  int base = 20;
  pp.a.Start(sa, &RunA, nullptr);
  pp.b.Start(sb, &RunB, &base);
  sim::Fiber::Switch(pp.main, pp.a);
  CHECK(pp.trace == std::vector<int>{10, 20, 11, 21, 12, 22, 12});
}

TEST_CASE("sim fiber orders") {
  CHECK(sim::FiberOrderName(sim::ParseFiberOrder("forward")) == "forward");
  CHECK(sim::FiberOrderName(sim::ParseFiberOrder("reverse")) == "reverse");
  CHECK(sim::FiberOrderName(sim::ParseFiberOrder("shuffle")) == "shuffle:0");
  CHECK(sim::FiberOrderName(sim::ParseFiberOrder("shuffle:42")) == "shuffle:42");
  for (const char* bad : {"", "backward", "shuffle:", "shuffle:x", "shuffle42", "shuffle:-1",
                          "shuffle:+1", "shuffle: 1", "shuffle:18446744073709551616"})
    CHECK_THROWS_AS(sim::ParseFiberOrder(bad), std::invalid_argument);

  std::vector<uint32_t> order;
  sim::FillRunOrder(sim::ParseFiberOrder("reverse"), 0, 5, order);
  CHECK(order == std::vector<uint32_t>{4, 3, 2, 1, 0});
  std::vector<uint32_t> s1, s1_again, s2, other_group;
  sim::FillRunOrder(sim::ParseFiberOrder("shuffle:7"), 3, 64, s1);
  sim::FillRunOrder(sim::ParseFiberOrder("shuffle:7"), 3, 64, s1_again);
  sim::FillRunOrder(sim::ParseFiberOrder("shuffle:8"), 3, 64, s2);
  sim::FillRunOrder(sim::ParseFiberOrder("shuffle:7"), 4, 64, other_group);
  CHECK(s1 == s1_again);   // reproducible
  CHECK(s1 != s2);
  CHECK(s1 != other_group);
  std::vector<uint32_t> sorted = s1;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 64; ++i) CHECK(sorted[i] == i);   // a permutation

  const char* env = std::getenv("METALRT_SIM_ORDER");
  const std::string saved_env = env ? env : "";
  setenv("METALRT_SIM_ORDER", "shuffle:11", 1);
  CHECK(sim::FiberOrderName(sim::FiberOrderFromEnvironment()) == "shuffle:11");
  setenv("METALRT_SIM_ORDER", "sideways", 1);
  CHECK_THROWS_WITH_AS(sim::FiberOrderFromEnvironment(),
                       "METALRT_SIM_ORDER must be forward, reverse, shuffle or shuffle:<seed> "
                       "(a decimal seed), got 'sideways'",
                       std::invalid_argument);
  // The device reads the variable when it is created, on the caller's thread.
  CHECK_THROWS_WITH_AS(sim::CreateSimDevice(), doctest::Contains("METALRT_SIM_ORDER must be"),
                       std::invalid_argument);
  setenv("METALRT_SIM_ORDER", saved_env.c_str(), 1);
  CHECK(sim::FiberOrderName(sim::ParseFiberOrder("shuffle:18446744073709551615")) ==
        "shuffle:18446744073709551615");

  const sim::FiberOrder saved = sim::CurrentFiberOrder();
  sim::SetFiberOrder(sim::ParseFiberOrder("shuffle:3"));
  CHECK(sim::FiberOrderName(sim::CurrentFiberOrder()) == "shuffle:3");
  sim::SetFiberOrder(saved);
}

TEST_CASE("sim device: identity and buffers") {
  auto dev = sim::CreateSimDevice();
  CHECK(dev->is_simulated());
  CHECK(dev->name().find("simulated") != std::string::npos);
  CHECK(dev->has_unified_memory());
  CHECK(dev->max_threadgroup_memory_length() == 32768);

  auto b = dev->new_buffer(1000);
  CHECK(b->length() == 1000);
  // Whole pages of its own, as Metal allocates: a wrapped host array's page hull
  // (gpu/external_memory.cpp) then never covers a device buffer.
  CHECK(reinterpret_cast<uintptr_t>(b->contents()) % static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)) == 0);
  const auto* bytes = static_cast<const unsigned char*>(b->contents());
  CHECK(std::all_of(bytes, bytes + 1000, [](unsigned char c) { return c == 0; }));
  auto e1 = dev->new_buffer(0), e2 = dev->new_buffer(0);
  CHECK(e1->length() == 0);
  CHECK(e1->contents() != e2->contents());

  const size_t page = 16384;
  void* host = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(host != MAP_FAILED);
  bool released = false;
  {
    auto wrapped = dev->new_buffer_no_copy(host, page, [&] { released = true; });
    CHECK(wrapped->contents() == host);
    CHECK(wrapped->length() == page);
  }
  CHECK(released);
  CHECK_THROWS_AS(dev->new_buffer_no_copy(static_cast<char*>(host) + 64, 64, [] {}),
                  std::invalid_argument);
  munmap(host, page);
}

TEST_CASE("sim device: command buffer lifecycle") {
  auto dev = sim::CreateSimDevice();
  auto cb = dev->new_command_buffer();
  CHECK(cb->status() == Status::kNotCommitted);
  CHECK_THROWS_AS(cb->wait_until_completed(), std::invalid_argument);
  cb->compute_encoder().end_encoding();
  cb->commit();
  CHECK_THROWS_AS(cb->commit(), std::invalid_argument);
  cb->wait_until_completed();
  CHECK(cb->status() == Status::kCompleted);
  CHECK(cb->error().empty());
  CHECK(cb->gpu_end_time() >= cb->gpu_start_time());
  CHECK(cb->gpu_start_time() > 0);
  // An ended encoder takes no more commands.
  CHECK_THROWS_AS(cb->compute_encoder().set_bytes("x", 1, 0), std::invalid_argument);

  auto cb2 = dev->new_command_buffer();
  auto& enc = cb2->compute_encoder();
  CHECK_THROWS_AS(enc.dispatch_threads({1, 1, 1}, {1, 1, 1}), std::invalid_argument);   // no pipeline
  CHECK_THROWS_AS(enc.set_bytes("x", 1, 31), std::invalid_argument);
  // Apple: setBytes takes data smaller than 4 KB: 4095 bytes bind, 4096 do not.
  std::vector<char> big(4096);
  CHECK_THROWS_AS(enc.set_bytes(big.data(), big.size(), 0), std::invalid_argument);
  CHECK_NOTHROW(enc.set_bytes(big.data(), big.size() - 1, 0));
  CHECK_THROWS_AS(enc.set_threadgroup_memory_length(33 * 1024, 0), std::invalid_argument);
  CHECK_THROWS_AS(enc.set_threadgroup_memory_length(24, 0), std::invalid_argument);
  auto buffer = dev->new_buffer(16);
  CHECK_THROWS_AS(enc.set_buffer(*buffer, 17, 0), std::invalid_argument);
}

TEST_CASE("sim device: libraries") {
  auto dev = sim::CreateSimDevice();
  CHECK_THROWS_AS(dev->default_library().pipeline("no_such_kernel"), std::invalid_argument);
  std::set<std::string> names;
  for (const auto& n : dev->default_library().function_names()) CHECK(names.insert(n).second);
  try {
    dev->compile_library("kernel void f(device float* x, uint q) {}\n");
    FAIL("expected a compile error");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.rfind("[compile_library]", 0) == 0);
    CHECK(what.find("shader.metal:1: error: kernel 'f': parameter 'q' is neither") != std::string::npos);
  }
  // A device parameter without [[buffer(n)]] takes Metal's implicit index 0.
  CHECK(dev->compile_library("kernel void f(device float* x) {}\n")->function_names() ==
        std::vector<std::string>{"f"});
}
