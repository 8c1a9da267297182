// Profile counters of the Metal backend (the Python API is python/metalrt/profiler.py).
//
// Off (the default unless METALRT_PROFILE=1): records nothing and reads no clock. On:
// one row per kernel name (dispatches, host seconds spent encoding them, threadgroups
// launched, the last grid) and a total row (command-buffer commits, each also counted
// under its cause, host waits, seconds the host spent waiting, seconds the GPU was
// busy according to the command buffers' GPU start/end times, and the buffers the
// device newly created with their bytes — allocations served by the buffer cache are
// free). The kernel name in a row is the proof of which kernel ran.
//
// The counters belong to the process's Metal backend: every metal_profiler function
// creates it on first use and throws std::runtime_error when no Metal device is
// available.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace metalrt {

// Why a command buffer was committed: the command stream's three flush points.
enum class CommitCause : uint8_t {
  kCap,           // Encode: the open command buffer reached max_dispatches
  kFlush,         // Flush(): an explicit commit without waiting
  kSynchronize,   // Synchronize(): committed before a host wait (host reads and writes)
};

struct ProfileRow {
  std::string name;            // kernel name, or "total"
  uint64_t dispatches = 0;     // total row: all dispatches
  double encode_seconds = 0;   // host time encoding (total row: the sum)
  uint64_t threadgroups = 0;   // threadgroups over all dispatches (total row: the sum)
  // The last dispatch's grid in threadgroups (x, y, z); kernel rows only.
  uint32_t last_grid[3] = {0, 0, 0};
  // The last dispatch's threads per threadgroup; kernel rows only.
  uint32_t last_threads_per_threadgroup = 0;
  // SIMD-groups (32 threads, a partial one counted whole) launched over all dispatches
  // (total row: the sum).
  uint64_t simdgroups = 0;
  // Measured by the device while the dispatches ran (the simulated device; 0 on
  // Apple's Metal, which reports none): the SIMD-group collectives (simd_sum,
  // simd_max, simd_shuffle, ...) of the busiest SIMD-group of any of them (total row:
  // the maximum over the kernels).
  uint64_t max_simd_collectives = 0;
  uint64_t commits = 0;        // total row only: all commits, the sum of the three below
  uint64_t commits_at_cap = 0;           // total row only: CommitCause::kCap
  uint64_t commits_at_flush = 0;         // total row only: CommitCause::kFlush
  uint64_t commits_at_synchronize = 0;   // total row only: CommitCause::kSynchronize
  uint64_t waits = 0;          // total row only: host waits for the GPU
  double wait_seconds = 0;     // total row only
  double gpu_seconds = 0;      // total row only: sum of GPU end - start per command buffer
  uint64_t allocations = 0;    // total row only: buffers the device newly created
  uint64_t allocated_bytes = 0;   // total row only: their lengths (cache hits not counted)
};

// One entry of the profiler's event log, in the order the host made them: a commit
// (with its cause), a host wait, a host read of device memory (after the wait it
// needed, if any), or a mark a caller set (e.g. a plan replay starting), so the log
// shows whether step n+1 was committed before the host read step n's outputs. A read
// is logged whether or not it waited: a command buffer the GPU finished early is read
// without a wait, and the order of commits and reads does not depend on that timing.
struct ProfileEvent {
  enum class Kind : uint8_t { kCommit, kWait, kRead, kMark };
  Kind kind = Kind::kMark;
  CommitCause cause = CommitCause::kCap;   // kCommit only
  uintptr_t address = 0;                   // kRead only: the first byte read
  std::string label;                       // kMark only
};

namespace metal_profiler {

void Enable(bool on = true);   // recorded rows are kept
bool Enabled();
// Forgets every row, counter and event (keeps the enabled state).
void Reset();
// Kernel rows sorted by name, then the total row; empty when nothing was recorded.
std::vector<ProfileRow> Rows();
// The newest kMaxEvents events, oldest first.
inline constexpr size_t kMaxEvents = 1 << 16;
std::vector<ProfileEvent> Events();
// The total row's counters.
uint64_t Commits();
uint64_t Waits();
uint64_t Allocations();
uint64_t AllocatedBytes();
// Logs a kMark event with `label` while profiling is on; nothing when it is off.
void Mark(const std::string& label);

}  // namespace metal_profiler
}  // namespace metalrt
