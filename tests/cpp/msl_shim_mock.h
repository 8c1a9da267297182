// A stand-in for the simulated device's runtime, for the MSL shim's doctest gate:
// one SIMD-group whose lanes each run on their own std::thread, with the hook table
// of metal/shim/sim_hooks.h resolved among them. A lane whose body returns leaves
// the active mask, and an exchange completes when every lane still active arrived. It exists so that the
// SIMD-group functions and simdgroup matrices can be checked against references
// written in the test without depending on cpp/sim; the MSL semantics suite in
// tests/msl runs the same functions through the real runtime.
#pragma once
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "sim_hooks.h"

namespace msl_shim_test {

class MockSimdGroup {
 public:
  // Runs body(lane) once on every lane set in `active` and waits for all of them.
  static void Run(uint32_t active, const std::function<void(uint32_t)>& body) {
    MockSimdGroup group(active);
    current_ = &group;
    static const metalrt::sim::Hooks hooks = {&Lane, &Exchange, &Barrier, &Barrier, nullptr};
    metalrt::sim::g_hooks = &hooks;
    std::vector<std::thread> lanes;
    for (uint32_t l = 0; l < 32; ++l) {
      if ((active >> l) & 1u) {
        lanes.emplace_back([l, &body, &group] {
          lane_ = l;
          body(l);
          group.Return();
        });
      }
    }
    for (std::thread& t : lanes) t.join();
    current_ = nullptr;
  }

 private:
  explicit MockSimdGroup(uint32_t active) : active_(active) {}

  static uint32_t Lane() { return lane_; }
  // The calling lane returned: the lanes waiting in an exchange may now be complete.
  void Return() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ &= ~(1u << lane_);
    if (arrived_ > 0 && arrived_ == uint32_t(__builtin_popcount(active_))) CompleteRound();
  }
  void CompleteRound() {
    round_mask_[round_ & 1] = active_;
    arrived_ = 0;
    ++round_;
    cv_.notify_all();
  }
  static void Barrier(const char*, int) { Exchange(nullptr, 0, nullptr); }
  // Returns the lanes that took part (the active mask when the round completed).
  // Two slot banks by round parity: a lane that has left round g can only write
  // round g+1's bank, and round g+2 cannot start before every lane has copied g.
  static uint32_t Exchange(const void* mine, size_t bytes, void* all) {
    MockSimdGroup& g = *current_;
    std::unique_lock<std::mutex> lock(g.mutex_);
    const uint64_t round = g.round_;
    unsigned char(&bank)[32][64] = g.slots_[round & 1];
    if (bytes) std::memcpy(bank[lane_], mine, bytes);
    if (++g.arrived_ == uint32_t(__builtin_popcount(g.active_))) {
      g.CompleteRound();
    } else {
      g.cv_.wait(lock, [&] { return g.round_ != round; });
    }
    for (uint32_t l = 0; l < 32 && bytes; ++l)
      std::memcpy(static_cast<unsigned char*>(all) + l * bytes, bank[l], bytes);
    return g.round_mask_[round & 1];
  }

  static inline thread_local uint32_t lane_ = 0;
  static inline MockSimdGroup* current_ = nullptr;
  uint32_t active_;
  std::mutex mutex_;
  std::condition_variable cv_;
  uint32_t arrived_ = 0;
  uint64_t round_ = 0;
  uint32_t round_mask_[2] = {};
  unsigned char slots_[2][32][64] = {};
};

}  // namespace msl_shim_test
