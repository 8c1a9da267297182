// qkv_split: a merged projection output qkv [T, q + k + v] into contiguous q [T, q],
// k [T, k] and v [T, v]; one thread per qkv element of a 2-D grid (x: column, y:
// token), so reads are contiguous and each thread writes one element of one part.
// A bit-exact copy in any dtype, like the CPU oracle (cpp/cpu/qkv_split.cpp).
#include <metal_stdlib>
#include "qkv_split_args.h"
using namespace metal;

template <typename T>
kernel void qkv_split(device const T* qkv [[buffer(0)]],
                      device T* q [[buffer(1)]],
                      device T* k [[buffer(2)]],
                      device T* v [[buffer(3)]],
                      constant QkvSplitArgs& args [[buffer(4)]],
                      uint2 position [[thread_position_in_grid]]) {
  const int column = int(position.x);
  const long token = position.y;
  const int width = args.q_width + args.k_width + args.v_width;
  if (column >= width) return;
  const T value = qkv[token * width + column];
  if (column < args.q_width) {
    q[token * args.q_width + column] = value;
  } else if (column < args.q_width + args.k_width) {
    k[token * args.k_width + (column - args.q_width)] = value;
  } else {
    v[token * args.v_width + (column - args.q_width - args.k_width)] = value;
  }
}

#define METALRT_QKV_SPLIT(T, SUFFIX)                                                   \
  template [[host_name("qkv_split_" #SUFFIX)]] kernel void qkv_split<T>(              \
      device const T*, device T*, device T*, device T*, constant QkvSplitArgs&, uint2);

METALRT_QKV_SPLIT(float, f32)
METALRT_QKV_SPLIT(half, f16)
METALRT_QKV_SPLIT(bfloat, bf16)
METALRT_QKV_SPLIT(char, i8)
METALRT_QKV_SPLIT(uchar, u8)
METALRT_QKV_SPLIT(int, i32)
METALRT_QKV_SPLIT(long, i64)
METALRT_QKV_SPLIT(uint, u32)
