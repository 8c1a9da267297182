#include "sim/command_buffer.h"

#include <cstring>
#include <stdexcept>

#include "sim/command_queue.h"
#include "sim/library.h"
#include "sim/sim_buffer.h"
#include "sim/threadgroup.h"
#include "sim/workers.h"

namespace metalrt::sim {

namespace {
std::string Dims(gpu::Size3 s) {
  return "(" + std::to_string(s.x) + ", " + std::to_string(s.y) + ", " + std::to_string(s.z) + ")";
}

// Whether a [[buffer(n), function_constant(c)]] parameter is present in this
// pipeline: the constant is defined and true.
bool GuardHolds(const std::vector<ConstantValue>& constants, int32_t index) {
  for (const ConstantValue& c : constants)
    if (c.slot->index == static_cast<uint32_t>(index)) return c.defined && c.bytes[0] != 0;
  return false;
}
}  // namespace

EncodedCommands::EncodedCommands() {
  dispatches.reserve(64);
  retained.reserve(512);
}

unsigned char* EncodedCommands::CopyBytes(const void* data, size_t length) {
  constexpr size_t kAlign = 16, kPadding = 16;
  const size_t need = (length + kPadding + kAlign - 1) / kAlign * kAlign;
  if (offset_ + need > kChunkBytes) {
    ++chunk_;
    offset_ = 0;
  }
  if (chunk_ == chunks_.size()) chunks_.push_back(std::make_unique<unsigned char[]>(kChunkBytes));
  unsigned char* copy = chunks_[chunk_].get() + offset_;
  std::memcpy(copy, data, length);
  std::memset(copy + length, 0, need - length);
  offset_ += need;
  return copy;
}

void EncodedCommands::Clear() {
  dispatches.clear();
  retained.clear();
  chunk_ = offset_ = 0;
}

void SimComputeEncoder::CheckOpen(const char* call) const {
  if (ended_ || owner_.status_ != gpu::GpuCommandBuffer::Status::kNotCommitted)
    throw std::invalid_argument(std::string("[") + call + "] the encoder has ended");
}

void SimComputeEncoder::set_pipeline(gpu::GpuPipeline& pipeline) {
  CheckOpen("set_pipeline");
  pipeline_ = dynamic_cast<const SimPipeline*>(&pipeline);
  if (!pipeline_) throw std::invalid_argument("[set_pipeline] not a simulated-device pipeline");
}

void SimComputeEncoder::set_buffer(const gpu::GpuBuffer& buffer, size_t offset, uint32_t index) {
  CheckOpen("set_buffer");
  if (index >= kMaxBufferBindings)
    throw std::invalid_argument("[set_buffer] index " + std::to_string(index) + " is past the " +
                                std::to_string(kMaxBufferBindings) + " buffer bindings");
  if (offset > buffer.length())
    throw std::invalid_argument("[set_buffer] offset " + std::to_string(offset) +
                                " is past the buffer's " + std::to_string(buffer.length()) + " bytes");
  bindings_.buffers[index] = static_cast<unsigned char*>(buffer.contents()) + offset;
  // Metal retains bound buffers until the command buffer completes; so do we.
  if (auto* sim = dynamic_cast<const SimBuffer*>(&buffer))
    if (auto owner = sim->weak_from_this().lock()) owner_.commands_.retained.push_back(std::move(owner));
}

void SimComputeEncoder::set_bytes(const void* data, size_t length, uint32_t index) {
  CheckOpen("set_bytes");
  if (index >= kMaxBufferBindings)
    throw std::invalid_argument("[set_bytes] index " + std::to_string(index) + " is past the " +
                                std::to_string(kMaxBufferBindings) + " buffer bindings");
  if (length >= gpu::kSetBytesLimit)
    throw std::invalid_argument("[set_bytes] " + std::to_string(length) +
                                " bytes; setBytes takes fewer than " +
                                std::to_string(gpu::kSetBytesLimit) + " (use a buffer)");
  bindings_.buffers[index] = owner_.commands_.CopyBytes(data, length);
}

void SimComputeEncoder::set_threadgroup_memory_length(size_t length, uint32_t index) {
  CheckOpen("set_threadgroup_memory_length");
  if (index >= kMaxThreadgroupBindings)
    throw std::invalid_argument("[set_threadgroup_memory_length] index " + std::to_string(index) +
                                " is past the " + std::to_string(kMaxThreadgroupBindings) +
                                " threadgroup bindings");
  if (length % 16 != 0)
    throw std::invalid_argument("[set_threadgroup_memory_length] length " + std::to_string(length) +
                                " is not a multiple of 16 bytes");
  if (length > kMaxThreadgroupMemory)
    throw std::invalid_argument("[set_threadgroup_memory_length] " + std::to_string(length) +
                                " bytes exceeds the 32 KiB (32768 bytes) of a threadgroup");
  bindings_.threadgroup_lengths[index] = length;
}

void SimComputeEncoder::dispatch_threadgroups(gpu::Size3 threadgroups, gpu::Size3 tpg) {
  Encode(threadgroups, tpg, {threadgroups.x * tpg.x, threadgroups.y * tpg.y, threadgroups.z * tpg.z});
}

void SimComputeEncoder::dispatch_threads(gpu::Size3 threads, gpu::Size3 tpg) {
  auto groups = [](uint32_t n, uint32_t size) { return size ? (n + size - 1) / size : 0; };
  Encode({groups(threads.x, tpg.x), groups(threads.y, tpg.y), groups(threads.z, tpg.z)}, tpg, threads);
}

void SimComputeEncoder::Encode(gpu::Size3 groups, gpu::Size3 group_size, gpu::Size3 grid_threads) {
  CheckOpen("dispatch");
  if (!pipeline_) throw std::invalid_argument("[dispatch] no pipeline set");
  const KernelInfo& k = pipeline_->kernel();
  // Built only for an error: encoding allocates nothing.
  auto where = [&] { return "[dispatch] kernel '" + std::string(k.name) + "': "; };
  const uint64_t threads = uint64_t{group_size.x} * group_size.y * group_size.z;
  if (threads == 0 || threads > kMaxThreadsPerThreadgroup)
    throw std::invalid_argument(where() + std::to_string(threads) + " threads per threadgroup " +
                                Dims(group_size) + "; the limit is 1 to 1024");
  if (k.max_total_threads_per_threadgroup && threads > k.max_total_threads_per_threadgroup)
    throw std::invalid_argument(where() + std::to_string(threads) + " threads per threadgroup " +
                                Dims(group_size) + " exceed its [[max_total_threads_per_threadgroup(" +
                                std::to_string(k.max_total_threads_per_threadgroup) + ")]] (" +
                                k.location + ")");
  for (uint32_t i = 0; i < k.num_buffers; ++i) {
    const BufferUse& use = k.buffers[i];
    if (use.function_constant >= 0 && !GuardHolds(pipeline_->constants(), use.function_constant))
      continue;
    if (!bindings_.buffers[use.index])
      throw std::invalid_argument(where() + "[[buffer(" + std::to_string(use.index) +
                                  ")]] is used by the kernel but not bound");
  }
  size_t threadgroup_bytes = 0;
  for (uint32_t i = 0; i < kMaxThreadgroupBindings; ++i) {
    if (!(k.threadgroup_buffers >> i & 1u)) continue;
    if (bindings_.threadgroup_lengths[i] == 0)
      throw std::invalid_argument(where() + "[[threadgroup(" + std::to_string(i) +
                                  ")]] is used by the kernel but its length is not set");
    threadgroup_bytes += bindings_.threadgroup_lengths[i];
  }
  if (threadgroup_bytes > kMaxThreadgroupMemory)
    throw std::invalid_argument(where() + std::to_string(threadgroup_bytes) +
                                " bytes of threadgroup memory exceeds 32 KiB (32768 bytes)");
  if (uint64_t{groups.x} * groups.y * groups.z == 0) return;   // an empty grid does nothing
  Dispatch d = bindings_;
  d.kernel = &k;
  d.module = &pipeline_->module();
  d.constants = &pipeline_->constants();
  d.threadgroups = groups;
  d.group_size = group_size;
  d.grid_threads = grid_threads;
  owner_.commands_.dispatches.push_back(d);
}

void SimComputeEncoder::end_encoding() { ended_ = true; }

SimCommandBuffer::SimCommandBuffer(CommandQueue& queue) : queue_(queue), commands_(queue.TakeCommands()) {}

SimCommandBuffer::~SimCommandBuffer() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    completed_.wait(lock, [&] { return status_ != Status::kCommitted; });
  }
  queue_.ReturnCommands(std::move(commands_));
}

gpu::GpuComputeEncoder& SimCommandBuffer::compute_encoder() { return encoder_; }

void SimCommandBuffer::commit() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_ != Status::kNotCommitted)
      throw std::invalid_argument("[commit] the command buffer was already committed");
    status_ = Status::kCommitted;
  }
  queue_.Submit(this);
}

void SimCommandBuffer::wait_until_completed() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (status_ == Status::kNotCommitted)
    throw std::invalid_argument("[wait_until_completed] the command buffer was not committed");
  completed_.wait(lock, [&] { return status_ != Status::kCommitted; });
}

gpu::GpuCommandBuffer::Status SimCommandBuffer::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

std::string SimCommandBuffer::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

double SimCommandBuffer::gpu_start_time() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return start_;
}

double SimCommandBuffer::gpu_end_time() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return end_;
}

void SimCommandBuffer::Execute(WorkerPool& pool) {
  const double start = SimClockSeconds();
  std::string error;
  for (const Dispatch& d : commands_.dispatches) {
    // (Re)installed per dispatch: a module's hook table is a plain global that
    // nothing else should own, but test mocks of the runtime do borrow it.
    *d.module->hooks = &RuntimeHooks();
    auto constants_lock = ApplyFunctionConstants(*d.constants);
    gpu::DispatchCounts counts;
    error = pool.Run(d, &counts);
    if (error.empty() && queue_.observer()) queue_.observer()(d.kernel->name, counts);
    if (!error.empty()) {
      error = "[sim] kernel '" + std::string(d.kernel->name) + "' (" + d.kernel->location +
              "): " + error;
      break;   // a GPU stops a faulted command buffer
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  start_ = start;
  end_ = SimClockSeconds();
  error_ = std::move(error);
  status_ = error_.empty() ? Status::kCompleted : Status::kError;
  completed_.notify_all();
}

}  // namespace metalrt::sim
