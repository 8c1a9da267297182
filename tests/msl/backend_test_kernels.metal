// Test kernels of the Metal backend gates (tests/cpp/test_command_stream.cpp,
// test_kernel_launch.cpp, test_metal_backend.cpp, test_profiler.cpp): tiny and
// exact, so the values prove which dispatches ran, at which offsets, in what order.
#include <metal_stdlib>
using namespace metal;

// Must match metalrt::testing::AffineArgs (tests/cpp/metal_fixture.h).
struct AffineArgs {
  uint n;
  float scale;
  float shift;
};

// y[i] = x[i] * scale + shift for i < n; y may alias x.
kernel void affine_f32(device const float* x [[buffer(0)]],
                       device float* y [[buffer(1)]],
                       constant AffineArgs& args [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
  if (i < args.n) y[i] = x[i] * args.scale + args.shift;
}

// y[i] = value for i < n.
kernel void fill_f32(device float* y [[buffer(0)]],
                     constant uint& n [[buffer(1)]],
                     constant float& value [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
  if (i < n) y[i] = value;
}
