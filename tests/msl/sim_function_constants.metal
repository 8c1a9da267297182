// Function constants: per-pipeline values, is_function_constant_defined, and a
// buffer that exists only when a constant says so.
#include <metal_stdlib>
using namespace metal;

constant bool has_bias [[function_constant(0)]];
constant float scale [[function_constant(1)]];
constant int offset [[function_constant(2)]];
constant half half_scale [[function_constant(3)]];

// y = x * scale + (has_bias ? bias : 0) + (offset if defined) ; scale by
// half_scale too when it is defined.
kernel void fc_affine(device const float* x [[buffer(0)]],
                      device float* y [[buffer(1)]],
                      device const float* bias [[buffer(2), function_constant(has_bias)]],
                      uint i [[thread_position_in_grid]]) {
  float v = x[i] * scale;
  if (has_bias) v += bias[i];
  if (is_function_constant_defined(offset)) v += float(offset);
  if (is_function_constant_defined(half_scale)) v *= float(half_scale);
  y[i] = v;
}

// A constant a kernel reaches only through a helper is required all the same; a
// kernel that uses no constant needs none, whatever its file declares.
constant uint stride [[function_constant(4)]];

inline uint strided(uint i) { return i * stride; }

kernel void fc_strided_copy(device const float* x [[buffer(0)]],
                            device float* y [[buffer(1)]],
                            uint i [[thread_position_in_grid]]) {
  y[i] = x[strided(i)];
}

kernel void fc_plain_copy(device const float* x [[buffer(0)]],
                          device float* y [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) {
  y[i] = x[i];
}
