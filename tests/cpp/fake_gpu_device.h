// A small in-test GpuDevice: buffers in host memory, kernels that are host
// callbacks. Command buffers run their recorded dispatches only when waited on, so
// a missing wait shows up as stale data, as on an asynchronous GPU. A kernel that
// throws fails its command buffer with the exception's message (like a GPU error).
// Used for what the simulated device cannot stage (error injection, counting
// device calls).
#pragma once
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_device.h"

namespace metalrt::testing {

using gpu::Size3;

// What a fake kernel sees of one dispatch.
struct FakeDispatch {
  std::string kernel;
  std::map<uint32_t, char*> buffers;               // [[buffer(n)]]: contents + offset
  std::map<uint32_t, std::vector<uint8_t>> bytes;  // set_bytes
  std::map<uint32_t, size_t> threadgroup_memory;
  gpu::FunctionConstants constants;
  bool per_thread = false;
  Size3 grid, group;
  template <typename T> T* buffer(uint32_t i) const { return reinterpret_cast<T*>(buffers.at(i)); }
  template <typename T> T arg(uint32_t i) const { return *reinterpret_cast<const T*>(bytes.at(i).data()); }
};
using FakeKernel = std::function<void(const FakeDispatch&)>;

class FakeBuffer final : public gpu::GpuBuffer {
 public:
  explicit FakeBuffer(size_t length)
      : data_(static_cast<char*>(std::aligned_alloc(256, (length + 255) / 256 * 256 + 256))),
        length_(length) {
    std::fill(data_, data_ + length, 0);
  }
  ~FakeBuffer() override { std::free(data_); }
  void* contents() const override { return data_; }
  size_t length() const override { return length_; }

 private:
  char* data_;
  size_t length_;
};

class FakePipeline final : public gpu::GpuPipeline {
 public:
  FakePipeline(std::string name, FakeKernel kernel, gpu::FunctionConstants constants)
      : name_(std::move(name)), kernel(std::move(kernel)), constants(std::move(constants)) {}
  const std::string& name() const override { return name_; }
  uint32_t max_total_threads_per_threadgroup() const override { return 1024; }
  uint32_t thread_execution_width() const override { return 32; }
  size_t static_threadgroup_memory_length() const override { return 0; }

 private:
  std::string name_;

 public:
  FakeKernel kernel;
  gpu::FunctionConstants constants;
};

class FakeLibrary final : public gpu::GpuLibrary {
 public:
  void add(const std::string& name, FakeKernel kernel) { kernels_[name] = std::move(kernel); }
  std::vector<std::string> function_names() const override {
    std::vector<std::string> names;
    for (const auto& k : kernels_) names.push_back(k.first);
    return names;
  }
  gpu::GpuPipeline& pipeline(const std::string& name, const gpu::FunctionConstants& constants) override {
    auto it = kernels_.find(name);
    if (it == kernels_.end()) throw std::invalid_argument("unknown kernel '" + name + "'");
    pipelines_.push_back(std::make_unique<FakePipeline>(name, it->second, constants));
    return *pipelines_.back();
  }

 private:
  std::map<std::string, FakeKernel> kernels_;
  std::vector<std::unique_ptr<FakePipeline>> pipelines_;
};

struct FakeCounters {
  int command_buffers = 0;   // created
  int commits = 0;
  int executed_dispatches = 0;
  int buffers = 0;           // created by new_buffer
};

class FakeEncoder final : public gpu::GpuComputeEncoder {
 public:
  void set_pipeline(gpu::GpuPipeline& p) override { current_.pipeline = static_cast<FakePipeline*>(&p); }
  void set_buffer(const gpu::GpuBuffer& b, size_t offset, uint32_t index) override {
    current_.d.buffers[index] = static_cast<char*>(b.contents()) + offset;
  }
  void set_bytes(const void* data, size_t length, uint32_t index) override {
    const auto* p = static_cast<const uint8_t*>(data);
    current_.d.bytes[index].assign(p, p + length);
  }
  void set_threadgroup_memory_length(size_t length, uint32_t index) override {
    current_.d.threadgroup_memory[index] = length;
  }
  void dispatch_threadgroups(Size3 grid, Size3 group) override { Record(false, grid, group); }
  void dispatch_threads(Size3 grid, Size3 group) override { Record(true, grid, group); }
  void end_encoding() override { ended = true; }

  struct Recorded {
    FakePipeline* pipeline = nullptr;
    FakeDispatch d;
  };
  std::vector<Recorded> recorded;
  bool ended = false;

 private:
  void Record(bool per_thread, Size3 grid, Size3 group) {
    if (ended) throw std::logic_error("dispatch after end_encoding");
    Recorded r = current_;
    r.d.kernel = r.pipeline->name();
    r.d.constants = r.pipeline->constants;
    r.d.per_thread = per_thread;
    r.d.grid = grid;
    r.d.group = group;
    recorded.push_back(std::move(r));
    current_.d.threadgroup_memory.clear();   // per dispatch; buffers and bytes persist, as in Metal
  }
  Recorded current_;
};

class FakeCommandBuffer final : public gpu::GpuCommandBuffer {
 public:
  explicit FakeCommandBuffer(FakeCounters& counters) : counters_(counters) {}
  gpu::GpuComputeEncoder& compute_encoder() override { return encoder_; }
  void commit() override {
    if (status_ != Status::kNotCommitted) throw std::logic_error("command buffer committed twice");
    if (!encoder_.ended) throw std::logic_error("commit before end_encoding");
    status_ = Status::kCommitted;
    ++counters_.commits;
  }
  void wait_until_completed() override {
    if (status_ != Status::kCommitted) return;
    using Clock = std::chrono::steady_clock;
    start_ = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    status_ = Status::kCompleted;
    try {
      for (const auto& r : encoder_.recorded) {
        r.pipeline->kernel(r.d);
        ++counters_.executed_dispatches;
      }
    } catch (const std::exception& e) {
      status_ = Status::kError;
      error_ = e.what();
    }
    end_ = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  Status status() const override { return status_; }
  std::string error() const override { return error_; }
  double gpu_start_time() const override { return start_; }
  double gpu_end_time() const override { return end_; }

 private:
  FakeCounters& counters_;
  FakeEncoder encoder_;
  Status status_ = Status::kNotCommitted;
  std::string error_;
  double start_ = 0, end_ = 0;
};

class FakeGpuDevice final : public gpu::GpuDevice {
 public:
  std::string name() const override { return "fake Metal device (simulated, tests only)"; }
  bool is_simulated() const override { return true; }
  bool has_unified_memory() const override { return true; }
  std::string gpu_family() const override { return "apple9"; }
  size_t max_threadgroup_memory_length() const override { return 32768; }
  size_t max_buffer_length() const override { return size_t{16} << 30; }
  std::shared_ptr<gpu::GpuBuffer> new_buffer(size_t length) override {
    ++counters.buffers;
    return std::make_shared<FakeBuffer>(length);
  }
  std::shared_ptr<gpu::GpuBuffer> new_buffer_no_copy(void*, size_t, std::function<void()>) override {
    throw std::runtime_error("the fake device has no no-copy buffers");
  }
  gpu::GpuLibrary& default_library() override { return library; }
  std::string default_library_origin() override { return "the fake device's host-callback kernels"; }
  std::shared_ptr<gpu::GpuLibrary> compile_library(const std::string&) override {
    throw std::runtime_error("the fake device cannot compile MSL");
  }
  std::unique_ptr<gpu::GpuCommandBuffer> new_command_buffer() override {
    ++counters.command_buffers;
    return std::make_unique<FakeCommandBuffer>(counters);
  }

  FakeLibrary library;
  FakeCounters counters;
};

}  // namespace metalrt::testing
