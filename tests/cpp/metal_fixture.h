// Fixtures of the Metal backend gates: a private MetalBackend over a device, Metal
// tensors in it, and the test kernels (tests/msl/backend_test_kernels.metal on a
// real or simulated device; host-callback twins on the fake device).
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "fake_gpu_device.h"
#include "gpu/device_selection.h"
#include "gpu/kernel_launch.h"
#include "gpu/metal_backend.h"
#include "metalrt/tensor.h"

namespace metalrt::testing {

// Must match struct AffineArgs in tests/msl/backend_test_kernels.metal.
struct AffineArgs {
  uint32_t n;
  float scale;
  float shift;
};

// Twins of the test kernels for the fake device, plus "fail", which fails its
// command buffer like a GPU timeout.
inline void AddTestKernels(FakeLibrary& library) {
  library.add("affine_f32", [](const FakeDispatch& d) {
    const auto args = d.arg<AffineArgs>(2);
    const float* x = d.buffer<float>(0);
    float* y = d.buffer<float>(1);
    for (uint32_t i = 0; i < args.n; ++i) y[i] = x[i] * args.scale + args.shift;
  });
  library.add("fill_f32", [](const FakeDispatch& d) {
    const auto n = d.arg<uint32_t>(1);
    const auto value = d.arg<float>(2);
    for (uint32_t i = 0; i < n; ++i) d.buffer<float>(0)[i] = value;
  });
  library.add("fail", [](const FakeDispatch&) {
    throw std::runtime_error("Caused GPU Timeout Error (fake)");
  });
}

inline std::unique_ptr<gpu::GpuDevice> NewFakeDevice() {
  auto device = std::make_unique<FakeGpuDevice>();
  AddTestKernels(device->library);
  return device;
}

// A MetalBackend of its own (independent of GetBackend(kMETAL)), by default on the
// device kMETAL would select: the Apple GPU on a Mac, else the simulated device.
struct MetalFixture {
  std::unique_ptr<gpu::MetalBackend> backend;

  explicit MetalFixture(std::unique_ptr<gpu::GpuDevice> device = gpu::SelectGpuDevice())
      : backend(std::make_unique<gpu::MetalBackend>(std::move(device))) {}
  MetalFixture(const MetalFixture&) = delete;
  ~MetalFixture() {
    for (void* p : owned_) backend->Free(p);
  }
  gpu::MetalBackend& operator*() { return *backend; }
  gpu::MetalBackend* operator->() { return backend.get(); }

  // An f32 Metal tensor in this backend, NaN-poisoned; freed with the fixture.
  Tensor Floats(const Shape& shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    void* p = backend->Alloc(static_cast<size_t>(n) * 4);
    owned_.push_back(p);
    float* f = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) f[i] = std::numeric_limits<float>::quiet_NaN();
    return Tensor::FromBlob(p, shape, DType::kF32, DeviceType::kMETAL);
  }
  std::vector<float> Read(const Tensor& t) {
    std::vector<float> host(static_cast<size_t>(t.numel()));
    backend->Copy(host.data(), t.data(), t.nbytes(), CopyKind::kDeviceToHost);
    return host;
  }
  void Write(const Tensor& t, const std::vector<float>& values) {
    backend->Copy(t.data(), values.data(), values.size() * 4, CopyKind::kHostToDevice);
  }

 private:
  std::vector<void*> owned_;
};

// On the fake device, whose counters show every device call.
struct FakeMetal : MetalFixture {
  FakeGpuDevice* device;
  FakeMetal() : MetalFixture(NewFakeDevice()), device(static_cast<FakeGpuDevice*>(&backend->device())) {}
};

// Encodes y = x * scale + shift over all of x.
inline void Affine(gpu::MetalBackend& backend, const Tensor& x, const Tensor& y, float scale,
                   float shift) {
  gpu::KernelLaunch(backend, "affine_f32")
      .input(0, x)
      .output(1, y)
      .bytes(2, AffineArgs{static_cast<uint32_t>(x.numel()), scale, shift})
      .threads({static_cast<uint32_t>(x.numel()), 1, 1}, {32, 1, 1});
}

// Encodes y[:] = value.
inline void Fill(gpu::MetalBackend& backend, const Tensor& y, float value) {
  gpu::KernelLaunch(backend, "fill_f32")
      .output(0, y)
      .bytes(1, static_cast<uint32_t>(y.numel()))
      .bytes(2, value)
      .threads({static_cast<uint32_t>(y.numel()), 1, 1}, {32, 1, 1});
}

}  // namespace metalrt::testing
