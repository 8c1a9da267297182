// Templated kernels registered by [[host_name]], in both instantiation forms.
#include <metal_stdlib>
using namespace metal;

template <typename T, int kFactor>
kernel void times(device const T* x [[buffer(0)]],
                  device T* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  y[i] = x[i] * T(kFactor);
}

template [[host_name("times3_f32")]] [[kernel]] void times<float, 3>(
    device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
    uint i [[thread_position_in_grid]]);
template [[host_name("times5_i32")]] [[kernel]] decltype(times<int, 5>) times<int, 5>;
template [[host_name("times2_f16")]] [[kernel]] decltype(times<half, 2>) times<half, 2>;

// MLX-style: instantiations produced by a macro.
#define instantiate_times(tname, type, factor) \
  template [[host_name("times" #factor "_" #tname)]] [[kernel]] \
  decltype(times<type, factor>) times<type, factor>;
instantiate_times(u32, uint, 7)

// A declared threadgroup limit on a template: the pipeline reports it and the sim
// refuses a larger threadgroup, as Metal does.
template <typename T>
[[max_total_threads_per_threadgroup(64)]]
kernel void capped_times(device const T* x [[buffer(0)]],
                         device T* y [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
  y[i] = x[i] * T(4);
}
template [[host_name("capped_times_f32")]] [[kernel]] decltype(capped_times<float>) capped_times<float>;
