// Helpers for the simulated device's gates: a device, buffers from vectors, one
// dispatch run to completion, and the fiber orders every semantic gate runs in.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sim/fiber_order.h"
#include "sim/sim_device.h"

namespace metalrt::testing {

// Fiber orders a semantic gate must pass in: a missing barrier or a lane-order
// assumption shows up as a difference between them.
inline const std::vector<std::string>& SimOrders() {
  static const std::vector<std::string> orders = {"forward", "reverse", "shuffle:7"};
  return orders;
}

// Sets the process-wide fiber order for a scope.
class ScopedFiberOrder {
 public:
  explicit ScopedFiberOrder(const std::string& spec) : saved_(sim::CurrentFiberOrder()) {
    sim::SetFiberOrder(sim::ParseFiberOrder(spec));
  }
  ~ScopedFiberOrder() { sim::SetFiberOrder(saved_); }

 private:
  sim::FiberOrder saved_;
};

struct SimRun {
  std::unique_ptr<gpu::GpuDevice> device = sim::CreateSimDevice();

  template <class T>
  std::shared_ptr<gpu::GpuBuffer> Buffer(const std::vector<T>& values) {
    auto b = device->new_buffer(values.size() * sizeof(T));
    std::memcpy(b->contents(), values.data(), values.size() * sizeof(T));
    return b;
  }
  template <class T>
  static std::vector<T> Read(const gpu::GpuBuffer& b) {
    std::vector<T> out(b.length() / sizeof(T));
    std::memcpy(out.data(), b.contents(), out.size() * sizeof(T));
    return out;
  }

  struct Dispatch {
    std::string kernel;
    std::vector<std::shared_ptr<gpu::GpuBuffer>> buffers;   // [[buffer(i)]] = buffers[i]
    gpu::Size3 grid;                                         // threads or threadgroups
    gpu::Size3 group;
    bool grid_is_threads = true;
    gpu::FunctionConstants constants = {};
    std::vector<size_t> threadgroup_lengths = {};            // [[threadgroup(i)]]
  };

  // Encodes `d` into a new command buffer, commits it and waits; returns the
  // command buffer's error ("" when it completed).
  std::string Run(const Dispatch& d) {
    auto cb = device->new_command_buffer();
    Encode(*cb, d);
    cb->commit();
    cb->wait_until_completed();
    return cb->error();
  }

  void Encode(gpu::GpuCommandBuffer& cb, const Dispatch& d) {
    auto& enc = cb.compute_encoder();
    enc.set_pipeline(device->default_library().pipeline(d.kernel, d.constants));
    for (uint32_t i = 0; i < d.buffers.size(); ++i)
      if (d.buffers[i]) enc.set_buffer(*d.buffers[i], 0, i);
    for (uint32_t i = 0; i < d.threadgroup_lengths.size(); ++i)
      enc.set_threadgroup_memory_length(d.threadgroup_lengths[i], i);
    if (d.grid_is_threads) enc.dispatch_threads(d.grid, d.group);
    else enc.dispatch_threadgroups(d.grid, d.group);
  }
};

}  // namespace metalrt::testing
