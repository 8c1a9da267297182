// The command stream: encoder batching for one Metal queue.
//
// Dispatches are encoded into the open command buffer's compute encoder (one
// serial encoder, so dispatches run in the order they were encoded). Nothing is
// committed until a flush point: Flush(), Synchronize() (which the backend calls
// before every host access to device memory), or the dispatch cap — a command
// buffer holding max_dispatches() dispatches is committed at once so the GPU can
// start while the host keeps encoding (METALRT_MAX_DISPATCHES, default 48, the
// 40–50 range MLX uses). Buffers bound by a dispatch are kept alive until its
// command buffer completes, so freeing a tensor with work in flight is safe.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/gpu_device.h"
#include "gpu/profiler.h"

namespace metalrt::gpu {

// One argument of a dispatch at a [[buffer(n)]] / [[threadgroup(n)]] index.
struct Binding {
  enum class Kind : uint8_t { kBuffer, kBytes, kThreadgroupMemory };
  Kind kind = Kind::kBuffer;
  uint32_t index = 0;
  std::shared_ptr<GpuBuffer> buffer;   // kBuffer
  size_t offset = 0;                   // kBuffer: bytes from the buffer's start
  std::vector<uint8_t> bytes;          // kBytes
  size_t length = 0;                   // kThreadgroupMemory
  bool written = false;                // kBuffer: the kernel may write it (an output)
};

// A fully resolved dispatch, ready to encode (built by KernelLaunch).
struct Dispatch {
  GpuPipeline* pipeline = nullptr;
  std::vector<Binding> bindings;
  bool per_thread = false;   // dispatch_threads (partial edge groups) vs dispatch_threadgroups
  Size3 grid;                // threads when per_thread, else threadgroups
  Size3 group;               // threads per threadgroup
};

class CommandStream {
 public:
  static constexpr int kDefaultMaxDispatches = 48;
  // Reads METALRT_MAX_DISPATCHES (a positive integer; anything else throws
  // std::invalid_argument).
  CommandStream(GpuDevice& device, Profiler& profiler);
  ~CommandStream();   // waits for work in flight; errors are dropped

  // Encodes into the open command buffer (opening one if needed); commits when the
  // command buffer reaches the cap.
  void Encode(const Dispatch& dispatch);
  // Commits the open command buffer, if any, without waiting.
  void Flush();
  // Flushes, then waits for every committed command buffer in order. Throws
  // std::runtime_error with the device's message when one completed with an error.
  void Synchronize();

  // Waits for the work encoded or committed, and not yet known complete, that writes
  // `buffer` (binds it as an output) or, unless `writes_only`, binds it at all; later
  // command buffers keep running. When the open command buffer is among that work
  // this is Synchronize(); when none is, nothing is committed or waited for. Throws
  // like Synchronize() when a command buffer waited for failed.
  void WaitForUses(const GpuBuffer& buffer, bool writes_only);

  int max_dispatches() const;
  void set_max_dispatches(int max_dispatches);   // >= 1, else std::invalid_argument
  int open_dispatches() const;                   // dispatches not yet committed

 private:
  struct Submitted {
    // Lists sized for a command buffer of the default cap (about ten buffers a
    // dispatch), so that recycled ones rarely grow.
    Submitted();
    std::unique_ptr<GpuCommandBuffer> command_buffer;
    std::vector<std::shared_ptr<GpuBuffer>> retained;
    std::vector<const GpuBuffer*> written;   // the retained buffers bound as outputs
  };
  // Spare Submitted lists kept for the next command buffers: encoding allocates
  // nothing once they reached a step's sizes (a replayed plan: metalrt/plan.h). As
  // many as two pipelined decode steps keep in flight (7 each for the default model).
  static constexpr size_t kSpareLists = 16;
  // Commits the open command buffer, if any, and records it under `cause`.
  void CommitLocked(CommitCause cause);
  // Releases command buffers at the front that completed without error. Called
  // before a commit that does not wait (cap, Flush) so the in-flight list stays
  // short; never after one, so the work a Synchronize commits is always waited on
  // (and counted as a host wait) however fast the GPU was.
  void RetireCompletedLocked();
  void RecordGpuTime(const GpuCommandBuffer& command_buffer);
  // Releases the first `count` in-flight command buffers, keeping their lists.
  void ForgetLocked(size_t count);
  // Waits for the first `count` in-flight command buffers (in commit order: one queue
  // completes them in that order), forgets them and records one host wait timed from
  // `start`; throws when one failed.
  void WaitLocked(size_t count, Profiler::Clock::time_point start);
  void SynchronizeLocked();

  GpuDevice& device_;
  Profiler& profiler_;
  mutable std::mutex mutex_;
  int max_dispatches_;
  Submitted open_;
  int open_dispatches_ = 0;
  std::vector<Submitted> in_flight_;   // in commit order; a few at a time
  std::vector<Submitted> spare_;
};

}  // namespace metalrt::gpu
