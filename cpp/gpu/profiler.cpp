#include "gpu/profiler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "gpu/metal_backend.h"

namespace metalrt::gpu {

Profiler::Profiler() {
  const char* env = std::getenv("METALRT_PROFILE");
  enabled_ = env != nullptr && std::strcmp(env, "1") == 0;
  total_.name = "total";
}

void Profiler::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  kernels_.clear();
  total_ = ProfileRow{};
  total_.name = "total";
  events_.clear();
}

void Profiler::PushEventLocked(ProfileEvent event) {
  if (events_.size() == metal_profiler::kMaxEvents) events_.pop_front();
  events_.push_back(std::move(event));
}

void Profiler::RecordMark(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  PushEventLocked({ProfileEvent::Kind::kMark, CommitCause::kCap, 0, label});
}

void Profiler::RecordRead(const void* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  PushEventLocked(
      {ProfileEvent::Kind::kRead, CommitCause::kCap, reinterpret_cast<uintptr_t>(address), {}});
}

std::vector<ProfileEvent> Profiler::Events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {events_.begin(), events_.end()};
}

void Profiler::RecordDispatch(const std::string& kernel, double encode_seconds,
                              const uint32_t (&grid)[3], uint32_t group_threads) {
  std::lock_guard<std::mutex> lock(mutex_);
  ProfileRow& row = kernels_[kernel];
  row.name = kernel;
  ++row.dispatches;
  row.encode_seconds += encode_seconds;
  const uint64_t threadgroups = uint64_t{grid[0]} * grid[1] * grid[2];
  row.threadgroups += threadgroups;
  std::copy(std::begin(grid), std::end(grid), std::begin(row.last_grid));
  row.last_threads_per_threadgroup = group_threads;
  const uint64_t simdgroups = threadgroups * ((group_threads + 31) / 32);
  row.simdgroups += simdgroups;
  ++total_.dispatches;
  total_.encode_seconds += encode_seconds;
  total_.threadgroups += threadgroups;
  total_.simdgroups += simdgroups;
}

void Profiler::RecordExecution(const std::string& kernel, const DispatchCounts& counts) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A dispatch encoded before a Reset has no row to count in.
  auto found = kernels_.find(kernel);
  if (found == kernels_.end()) return;
  ProfileRow& row = found->second;
  row.max_simd_collectives = std::max<uint64_t>(row.max_simd_collectives, counts.max_simd_collectives);
  total_.max_simd_collectives = std::max(total_.max_simd_collectives, row.max_simd_collectives);
}

void Profiler::RecordCommit(CommitCause cause) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++total_.commits;
  switch (cause) {
    case CommitCause::kCap: ++total_.commits_at_cap; break;
    case CommitCause::kFlush: ++total_.commits_at_flush; break;
    case CommitCause::kSynchronize: ++total_.commits_at_synchronize; break;
  }
  PushEventLocked({ProfileEvent::Kind::kCommit, cause, 0, {}});
}

void Profiler::RecordWait(double wait_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++total_.waits;
  total_.wait_seconds += wait_seconds;
  PushEventLocked({ProfileEvent::Kind::kWait, CommitCause::kCap, 0, {}});
}

void Profiler::RecordGpuTime(double gpu_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  total_.gpu_seconds += gpu_seconds;
}

void Profiler::RecordAllocation(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++total_.allocations;
  total_.allocated_bytes += bytes;
}

std::vector<ProfileRow> Profiler::Rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ProfileRow> rows;
  for (const auto& entry : kernels_) rows.push_back(entry.second);
  const bool any = total_.dispatches || total_.commits || total_.waits || total_.allocations;
  if (any) rows.push_back(total_);
  return rows;
}

uint64_t Profiler::commits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_.commits;
}

uint64_t Profiler::waits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_.waits;
}

uint64_t Profiler::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_.allocations;
}

uint64_t Profiler::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_.allocated_bytes;
}

}  // namespace metalrt::gpu

// metalrt/profiler.h: the process's Metal backend's profiler.
namespace metalrt::metal_profiler {
namespace {
gpu::Profiler& TheProfiler() { return gpu::ActiveMetalBackend().profiler(); }
}  // namespace

void Enable(bool on) { TheProfiler().Enable(on); }
bool Enabled() { return TheProfiler().enabled(); }
void Reset() { TheProfiler().Reset(); }
std::vector<ProfileRow> Rows() { return TheProfiler().Rows(); }
std::vector<ProfileEvent> Events() { return TheProfiler().Events(); }
uint64_t Commits() { return TheProfiler().commits(); }
uint64_t Waits() { return TheProfiler().waits(); }
uint64_t Allocations() { return TheProfiler().allocations(); }
uint64_t AllocatedBytes() { return TheProfiler().allocated_bytes(); }

void Mark(const std::string& label) {
  gpu::Profiler& profiler = TheProfiler();
  if (profiler.enabled()) profiler.RecordMark(label);
}

}  // namespace metalrt::metal_profiler
