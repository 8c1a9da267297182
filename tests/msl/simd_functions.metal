// MSL semantics suite: SIMD-group and quad-group functions (MSL spec §6.9.1-2).
// The host dispatches with threadgroup sizes that are not multiples of 32 (partial
// SIMD-groups) and with dispatchThreads edge groups; threads whose grid index is
// 5 mod 7 return before the collectives, so they are inactive lanes that every
// reduction must leave out. Outputs are row-major [output][grid thread], NaN-/
// all-ones-poisoned by the host; a returned thread writes nothing.
#include <metal_stdlib>
using namespace metal;

kernel void simd_reduce_f32(device const float* in [[buffer(0)]],
                            device float* out [[buffer(1)]],
                            constant uint& n [[buffer(2)]],
                            uint gid [[thread_position_in_grid]]) {
  if (gid >= n || gid % 7 == 5) return;
  const float v = in[gid];
  out[0 * n + gid] = simd_sum(v);
  out[1 * n + gid] = simd_product(v);
  out[2 * n + gid] = simd_max(v);
  out[3 * n + gid] = simd_min(v);
  out[4 * n + gid] = simd_prefix_inclusive_sum(v);
  out[5 * n + gid] = simd_prefix_exclusive_sum(v);
  out[6 * n + gid] = simd_prefix_inclusive_product(v);
  out[7 * n + gid] = simd_prefix_exclusive_product(v);
  out[8 * n + gid] = simd_broadcast_first(v);
  out[9 * n + gid] = quad_sum(v);
  const float4 v4 = float4(v, 1.0f, -v, float(gid));
  const float4 s4 = simd_sum(v4);
  out[10 * n + gid] = s4.x + s4.z;   // 0: the components cancel
  out[11 * n + gid] = s4.y;          // the number of active lanes
}

kernel void simd_reduce_u32(device const uint* in [[buffer(0)]],
                            device uint* out [[buffer(1)]],
                            constant uint& n [[buffer(2)]],
                            uint gid [[thread_position_in_grid]]) {
  if (gid >= n || gid % 7 == 5) return;
  const uint v = in[gid];
  out[0 * n + gid] = simd_and(v);
  out[1 * n + gid] = simd_or(v);
  out[2 * n + gid] = simd_xor(v);
  out[3 * n + gid] = simd_min(v);
  out[4 * n + gid] = simd_max(v);
  out[5 * n + gid] = simd_sum(v);
  out[6 * n + gid] = simd_all(v != 0) ? 1u : 0u;
  out[7 * n + gid] = simd_any(v % 1000 == 999) ? 1u : 0u;
  const simd_vote vote = simd_ballot((v & 1u) != 0);
  out[8 * n + gid] = uint(static_cast<simd_vote::vote_t>(vote));
  out[9 * n + gid] = simd_is_first() ? 1u : 0u;
  out[10 * n + gid] = uint(static_cast<simd_vote::vote_t>(simd_active_threads_mask()));
  out[11 * n + gid] = quad_max(v);
  const int s = simd_min(int(v) - 500000);   // signed comparison
  out[12 * n + gid] = uint(s);
}

// Shuffles read other lanes: a source lane that is inactive gives an undefined
// value on the GPU, so the host checks only lanes whose source is active. No
// thread returns early here; inactive lanes are those past a partial SIMD-group.
kernel void simd_shuffles_f32(device const float* in [[buffer(0)]],
                              device float* out [[buffer(1)]],
                              constant uint& n [[buffer(2)]],
                              constant ushort& delta [[buffer(3)]],
                              uint gid [[thread_position_in_grid]],
                              ushort lane [[thread_index_in_simdgroup]]) {
  if (gid >= n) return;
  const float v = in[gid];
  out[0 * n + gid] = simd_shuffle(v, ushort((lane * 5 + delta) % 32));
  out[1 * n + gid] = simd_shuffle_up(v, delta);
  out[2 * n + gid] = simd_shuffle_down(v, delta);
  out[3 * n + gid] = simd_shuffle_rotate_up(v, delta);
  out[4 * n + gid] = simd_shuffle_rotate_down(v, delta);
  out[5 * n + gid] = simd_shuffle_xor(v, delta);
  out[6 * n + gid] = simd_broadcast(v, ushort(delta % 8));
  out[7 * n + gid] = quad_shuffle(v, ushort(delta % 4));
  out[8 * n + gid] = quad_shuffle_xor(v, ushort(delta % 4));
  // A vector of half through a shuffle: every component moves together.
  const half4 h = half4(half(v), half(1), half(-v), half(lane));
  const half4 moved = simd_shuffle_down(h, delta);
  out[9 * n + gid] = float(moved.x) + float(moved.z);   // 0
  out[10 * n + gid] = float(moved.w);                   // the source lane
}
