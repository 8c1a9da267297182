// The RoPE family (Su et al. 2021, "RoFormer"; pairings as in GPT-NeoX and GPT-J) on
// x [T, heads, head_dim]: the first rotary_dim features of every head are rotated in
// pairs, the rest pass through; out may be x (each element is read and written by one
// thread only). NeoX pairs (i, i + rotary_dim/2), interleaved pairs (2i, 2i + 1).
// One threadgroup per token: its cos|sin are computed (rope_math.h) or read once, then
// shared by every head.
#include <metal_stdlib>
#include "rope_math.h"
using namespace metal;

// Rotates (or copies, past rotary_dim) every feature of one token. cos_sin points at
// the token's cos[0, half) then sin[0, half), in threadgroup or device memory.
template <typename T, bool kNeox, typename CosSin>
inline void rope_rotate_token(device const T* x, device T* out, uint token, CosSin cos_sin,
                              constant RopeArgs& args, uint tid) {
  const long token_offset = long(token) * args.heads * args.head_dim;
  rope_rotate_heads<T, kNeox>(x + token_offset, out + token_offset, args.heads, args.head_dim,
                              args.rotary_dim, cos_sin, tid, kRopeThreads);
}

template <typename T, bool kNeox>
kernel void rope(device const T* x [[buffer(0)]],
                 device const int32_t* positions [[buffer(1)]],
                 constant float* freq [[buffer(2)]],
                 device T* out [[buffer(3)]],
                 constant RopeArgs& args [[buffer(4)]],
                 uint token [[threadgroup_position_in_grid]],
                 uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float cos_sin[kRopeMaxRotaryDim];
  rope_token_cos_sin(positions[token], freq, args.rotary_dim / 2, cos_sin, tid, kRopeThreads);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  rope_rotate_token<T, kNeox>(x, out, token, (threadgroup const float*)cos_sin, args, tid);
}

// rope_from_cache: token t uses row positions[t] of the f32 cos|sin cache. The host
// checked the rows; a row outside the cache leaves the token's output untouched (as
// the oracle leaves `out` on its error) rather than reading past the cache.
template <typename T, bool kNeox>
kernel void rope_from_cache(device const T* x [[buffer(0)]],
                            device const float* cache [[buffer(1)]],
                            device const int32_t* positions [[buffer(2)]],
                            device T* out [[buffer(3)]],
                            constant RopeArgs& args [[buffer(4)]],
                            uint token [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]]) {
  const int32_t row = positions[token];
  if (row < 0 || row >= args.cache_rows) return;
  rope_rotate_token<T, kNeox>(x, out, token, cache + long(row) * args.rotary_dim, args, tid);
}

// positions [T] -> cos|sin cache [T, rotary_dim] f32: one thread per (pair, token).
[[host_name("rope_cos_sin_cache_f32")]] kernel void rope_cos_sin_cache(
    device const int32_t* positions [[buffer(0)]], constant float* freq [[buffer(1)]],
    device float* out [[buffer(2)]], constant RopeArgs& args [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]]) {
  const int32_t half = args.rotary_dim / 2, i = int32_t(gid.x);
  const float2 cs = rope_cos_sin(positions[gid.y], freq, i);
  device float* row = out + long(gid.y) * args.rotary_dim;
  row[i] = cs.x;
  row[half + i] = cs.y;
}

#define METALRT_ROPE(T, SUFFIX)                                                                    \
  template [[host_name("rope_neox_" #SUFFIX)]] [[kernel]] decltype(rope<T, true>) rope<T, true>;    \
  template [[host_name("rope_interleaved_" #SUFFIX)]] [[kernel]] decltype(rope<T, false>)          \
      rope<T, false>;                                                                              \
  template [[host_name("rope_from_cache_neox_" #SUFFIX)]] [[kernel]]                               \
      decltype(rope_from_cache<T, true>) rope_from_cache<T, true>;                                 \
  template [[host_name("rope_from_cache_interleaved_" #SUFFIX)]] [[kernel]]                        \
      decltype(rope_from_cache<T, false>) rope_from_cache<T, false>;

METALRT_ROPE(float, f32)
METALRT_ROPE(half, f16)
METALRT_ROPE(bfloat, bf16)
