// The Metal backend's recorder of the profile counters metalrt/profiler.h describes.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/gpu_device.h"
#include "metalrt/profiler.h"

namespace metalrt::gpu {

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;
  // Enabled when the environment variable METALRT_PROFILE is "1".
  Profiler();

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void Enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  // Forgets every row and counter (keeps the enabled state).
  void Reset();

  // Recorders; the caller checks enabled() first (so "off" costs one branch).
  // grid: the dispatch's extent in threadgroups (x, y, z); group_threads: threads per
  // threadgroup.
  void RecordDispatch(const std::string& kernel, double encode_seconds, const uint32_t (&grid)[3],
                      uint32_t group_threads);
  // What the device measured running one dispatch of `kernel` (GpuDevice's observer).
  void RecordExecution(const std::string& kernel, const DispatchCounts& counts);
  void RecordCommit(CommitCause cause);
  void RecordWait(double wait_seconds);
  void RecordGpuTime(double gpu_seconds);
  void RecordAllocation(uint64_t bytes);
  void RecordMark(const std::string& label);
  void RecordRead(const void* address);

  // The newest metal_profiler::kMaxEvents events, oldest first.
  std::vector<ProfileEvent> Events() const;

  // Kernel rows sorted by name, then the total row; empty when nothing was recorded.
  std::vector<ProfileRow> Rows() const;
  uint64_t commits() const;
  uint64_t waits() const;
  uint64_t allocations() const;
  uint64_t allocated_bytes() const;

  static double SecondsSince(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  std::atomic<bool> enabled_;
  mutable std::mutex mutex_;
  std::map<std::string, ProfileRow> kernels_;
  ProfileRow total_;
  std::deque<ProfileEvent> events_;
  void PushEventLocked(ProfileEvent event);
};

}  // namespace metalrt::gpu
