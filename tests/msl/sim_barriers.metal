// Threadgroup memory and barriers: a tree reduction over a threadgroup array
// (with and without its barriers), a SIMD-group + threadgroup two-level sum,
// threads returning before a barrier, and dynamic [[threadgroup(n)]] memory.
#include <metal_stdlib>
using namespace metal;

// out[group] = sum of the group's slice of `in` (threads per group: a power of two).
kernel void reduce_tree(device const float* in [[buffer(0)]],
                        device float* out [[buffer(1)]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint group [[threadgroup_position_in_grid]],
                        uint size [[threads_per_threadgroup]]) {
  threadgroup float partial[1024];
  partial[tid] = in[group * size + tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0) out[group] = partial[0];
}

// The same reduction with its barriers removed: a race the sim must expose.
kernel void reduce_tree_no_barrier(device const float* in [[buffer(0)]],
                                   device float* out [[buffer(1)]],
                                   uint tid [[thread_index_in_threadgroup]],
                                   uint group [[threadgroup_position_in_grid]],
                                   uint size [[threads_per_threadgroup]]) {
  threadgroup float partial[1024];
  partial[tid] = in[group * size + tid];
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
  }
  if (tid == 0) out[group] = partial[0];
}

// Two levels: simd_sum inside each SIMD-group, then the first SIMD-group sums the
// partials. Any threadgroup size up to 1024, partial SIMD-groups included; threads
// at or past `n` return first and must neither block the barrier nor count.
kernel void reduce_two_level(device const float* in [[buffer(0)]],
                             device float* out [[buffer(1)]],
                             constant uint& n [[buffer(2)]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint groups [[simdgroups_per_threadgroup]]) {
  threadgroup float sums[32];
  if (tid >= n) return;
  const float s = simd_sum(in[tid]);
  if (lane == 0) sums[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    const uint live_groups = min(groups, (n + 31) / 32);
    const float total = simd_sum(lane < live_groups ? sums[lane] : 0.0f);
    if (lane == 0) out[0] = total;
  }
}

// Dynamic threadgroup memory: reverse each group's slice through scratch.
kernel void reverse_through_scratch(device const float* in [[buffer(0)]],
                                    device float* out [[buffer(1)]],
                                    threadgroup float* scratch [[threadgroup(0)]],
                                    uint tid [[thread_index_in_threadgroup]],
                                    uint size [[threads_per_threadgroup]],
                                    uint gid [[thread_position_in_grid]]) {
  scratch[tid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = scratch[size - 1 - tid];
}

// Reads threadgroup memory nobody wrote: the poison shows.
kernel void read_unwritten(device float* out [[buffer(0)]],
                           device uint* out_bits [[buffer(1)]],
                           uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float f[64];
  threadgroup uint u[64];
  out[tid] = f[tid];
  out_bits[tid] = u[tid];
}
