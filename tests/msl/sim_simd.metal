// The shim's SIMD-group functions, simdgroup matrices and atomics run through the
// real runtime: lanes as fibers, collectives resolved per SIMD-group, threadgroups
// on several OS threads.
#include <metal_stdlib>
using namespace metal;

// Lanes at or past `active` return first; the others sum over themselves only.
kernel void simd_sum_after_return(device const float* x [[buffer(0)]],
                                  device float* out [[buffer(1)]],
                                  constant uint& active [[buffer(2)]],
                                  uint gid [[thread_position_in_grid]],
                                  uint lane [[thread_index_in_simdgroup]]) {
  if (lane >= active) return;
  out[gid] = simd_sum(x[gid]);
}

// shuffle_down by 3 (the top 3 lanes keep their own value) and the exclusive
// prefix sum, per SIMD-group; partial SIMD-groups included.
kernel void simd_shuffle_and_scan(device const float* x [[buffer(0)]],
                                  device float* shuffled [[buffer(1)]],
                                  device float* scanned [[buffer(2)]],
                                  uint gid [[thread_position_in_grid]]) {
  const float v = x[gid];
  shuffled[gid] = simd_shuffle_down(v, 3);
  scanned[gid] = simd_prefix_exclusive_sum(v);
}

// C[M, N] = A[M, K] * B[K, N] (row-major, all multiples of 8): SIMD-group s of the
// threadgroup computes the 8x8 tile (tile_row, tile_col) = (s / (N/8), s % (N/8)).
kernel void simdgroup_matmul(device const float* a [[buffer(0)]],
                             device const float* b [[buffer(1)]],
                             device float* c [[buffer(2)]],
                             constant uint3& mnk [[buffer(3)]],
                             uint sg [[simdgroup_index_in_threadgroup]]) {
  const uint n_tiles = mnk.y / 8;
  const ulong row = (sg / n_tiles) * 8, col = (sg % n_tiles) * 8;
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k = 0; k < mnk.z; k += 8) {
    simdgroup_float8x8 ta, tb;
    simdgroup_load(ta, a, mnk.z, ulong2(k, row));
    simdgroup_load(tb, b, mnk.y, ulong2(col, k));
    simdgroup_multiply_accumulate(acc, ta, tb, acc);
  }
  simdgroup_store(acc, c, mnk.y, ulong2(col, row));
}

// Every thread of every threadgroup adds its index to one counter.
kernel void atomic_total(device atomic_uint* total [[buffer(0)]],
                         uint gid [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(total, gid, memory_order_relaxed);
}
