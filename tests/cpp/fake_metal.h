// Test fixtures over the fake device: a private MetalBackend, Metal tensors in it,
// and the host-callback kernels the command-stream gates dispatch.
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "fake_gpu_device.h"
#include "gpu/kernel_launch.h"
#include "gpu/metal_backend.h"
#include "metalrt/tensor.h"

namespace metalrt::testing {

// Argument struct of the test kernels: y[i] = x[i] * scale + shift for i < n.
struct AffineArgs {
  uint32_t n;
  float scale;
  float shift;
};

// "affine_f32": buffer 0 x (input), 1 y (output, may alias x), 2 AffineArgs.
// "fail": fails its command buffer like a GPU timeout.
inline void AddTestKernels(FakeLibrary& library) {
  library.add("affine_f32", [](const FakeDispatch& d) {
    const auto args = d.arg<AffineArgs>(2);
    const float* x = d.buffer<float>(0);
    float* y = d.buffer<float>(1);
    for (uint32_t i = 0; i < args.n; ++i) y[i] = x[i] * args.scale + args.shift;
  });
  library.add("fail", [](const FakeDispatch&) {
    throw std::runtime_error("Caused GPU Timeout Error (fake)");
  });
}

// A MetalBackend of its own over a fresh fake device (independent of kMETAL).
struct FakeMetal {
  FakeGpuDevice* device;
  std::unique_ptr<gpu::MetalBackend> backend;

  FakeMetal() {
    auto d = std::make_unique<FakeGpuDevice>();
    device = d.get();
    AddTestKernels(device->library);
    backend = std::make_unique<gpu::MetalBackend>(std::move(d));
  }
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
  ~FakeMetal() {
    for (void* p : owned_) backend->Free(p);
  }

 private:
  std::vector<void*> owned_;
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

}  // namespace metalrt::testing
