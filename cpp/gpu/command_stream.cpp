#include "gpu/command_stream.h"

#include "core/env.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace metalrt::gpu {
namespace {

int MaxDispatchesFromEnv() {
  return static_cast<int>(
      PositiveIntFromEnv("METALRT_MAX_DISPATCHES", CommandStream::kDefaultMaxDispatches, 1000000));
}

}  // namespace

CommandStream::Submitted::Submitted() {
  retained.reserve(512);
  written.reserve(128);
}

CommandStream::CommandStream(GpuDevice& device, Profiler& profiler)
    : device_(device), profiler_(profiler), max_dispatches_(MaxDispatchesFromEnv()) {}

CommandStream::~CommandStream() {
  try {
    Synchronize();
  } catch (...) {  // a destructor cannot report a failed command buffer
  }
}

void CommandStream::Encode(const Dispatch& d) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_.command_buffer) open_.command_buffer = device_.new_command_buffer();
  GpuComputeEncoder& encoder = open_.command_buffer->compute_encoder();
  encoder.set_pipeline(*d.pipeline);
  for (const Binding& b : d.bindings) {
    switch (b.kind) {
      case Binding::Kind::kBuffer:
        encoder.set_buffer(*b.buffer, b.offset, b.index);
        open_.retained.push_back(b.buffer);
        if (b.written) open_.written.push_back(b.buffer.get());
        break;
      case Binding::Kind::kBytes:
        encoder.set_bytes(b.bytes.data(), b.bytes.size(), b.index);
        break;
      case Binding::Kind::kThreadgroupMemory:
        encoder.set_threadgroup_memory_length(b.length, b.index);
        break;
    }
  }
  if (d.per_thread)
    encoder.dispatch_threads(d.grid, d.group);
  else
    encoder.dispatch_threadgroups(d.grid, d.group);
  if (++open_dispatches_ >= max_dispatches_) {
    RetireCompletedLocked();
    CommitLocked(CommitCause::kCap);
  }
}

void CommandStream::Flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_.command_buffer) return;   // nothing to commit: a no-op
  RetireCompletedLocked();
  CommitLocked(CommitCause::kFlush);
}

void CommandStream::CommitLocked(CommitCause cause) {
  if (!open_.command_buffer) return;
  open_.command_buffer->compute_encoder().end_encoding();
  open_.command_buffer->commit();
  if (profiler_.enabled()) profiler_.RecordCommit(cause);
  in_flight_.push_back(std::move(open_));
  if (spare_.empty()) {
    open_ = Submitted{};
  } else {
    open_ = std::move(spare_.back());
    spare_.pop_back();
  }
  open_dispatches_ = 0;
}

void CommandStream::ForgetLocked(size_t count) {
  for (size_t i = 0; i < count; ++i) {
    Submitted& done = in_flight_[i];
    done.command_buffer.reset();
    done.retained.clear();
    done.written.clear();
    if (spare_.size() < kSpareLists) spare_.push_back(std::move(done));
  }
  in_flight_.erase(in_flight_.begin(), in_flight_.begin() + static_cast<std::ptrdiff_t>(count));
}

void CommandStream::RetireCompletedLocked() {
  while (!in_flight_.empty() &&
         in_flight_.front().command_buffer->status() == GpuCommandBuffer::Status::kCompleted) {
    RecordGpuTime(*in_flight_.front().command_buffer);
    ForgetLocked(1);
  }
}

void CommandStream::RecordGpuTime(const GpuCommandBuffer& command_buffer) {
  if (profiler_.enabled())
    profiler_.RecordGpuTime(command_buffer.gpu_end_time() - command_buffer.gpu_start_time());
}

void CommandStream::Synchronize() {
  std::lock_guard<std::mutex> lock(mutex_);
  SynchronizeLocked();
}

void CommandStream::SynchronizeLocked() {
  // The wait is timed from before the commit: the GPU may start the moment it is
  // committed, and its busy time must fit inside the time the host spent here.
  const Profiler::Clock::time_point start =
      profiler_.enabled() ? Profiler::Clock::now() : Profiler::Clock::time_point{};
  // Nothing open and nothing in flight: no command buffer to commit, no wait to count.
  // Work in flight but nothing open (the cap or a Flush committed the last dispatch)
  // is waited on without a commit.
  const bool pending = open_.command_buffer != nullptr || !in_flight_.empty();
  if (!pending) return;
  CommitLocked(CommitCause::kSynchronize);
  WaitLocked(in_flight_.size(), start);
}

void CommandStream::WaitLocked(size_t count, Profiler::Clock::time_point start) {
  bool failed = false;
  std::string error;
  for (size_t i = 0; i < count; ++i) {
    GpuCommandBuffer& command_buffer = *in_flight_[i].command_buffer;
    command_buffer.wait_until_completed();
    if (command_buffer.status() == GpuCommandBuffer::Status::kError) {
      if (!failed) error = command_buffer.error();
      failed = true;
    } else {
      RecordGpuTime(command_buffer);
    }
  }
  ForgetLocked(count);
  if (profiler_.enabled()) profiler_.RecordWait(Profiler::SecondsSince(start));
  if (failed)
    throw std::runtime_error("[metal] command buffer failed: " + (error.empty() ? "(no message)" : error));
}

void CommandStream::WaitForUses(const GpuBuffer& buffer, bool writes_only) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto uses = [&](const Submitted& s) {
    if (writes_only) return std::find(s.written.begin(), s.written.end(), &buffer) != s.written.end();
    return std::any_of(s.retained.begin(), s.retained.end(),
                       [&](const std::shared_ptr<GpuBuffer>& b) { return b.get() == &buffer; });
  };
  if (uses(open_)) return SynchronizeLocked();
  size_t count = in_flight_.size();
  while (count > 0 && !uses(in_flight_[count - 1])) --count;
  if (count == 0) return;
  WaitLocked(count, profiler_.enabled() ? Profiler::Clock::now() : Profiler::Clock::time_point{});
}

int CommandStream::max_dispatches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_dispatches_;
}

void CommandStream::set_max_dispatches(int max_dispatches) {
  if (max_dispatches < 1)
    throw std::invalid_argument("[metal] max dispatches per command buffer must be >= 1, got " +
                                std::to_string(max_dispatches));
  std::lock_guard<std::mutex> lock(mutex_);
  max_dispatches_ = max_dispatches;
}

int CommandStream::open_dispatches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_dispatches_;
}

}  // namespace metalrt::gpu
