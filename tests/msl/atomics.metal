// MSL semantics suite: atomics (MSL spec §2.5, §6.15) on device memory shared by
// all threadgroups (which the simulation runs on several OS threads) and on
// threadgroup memory.
#include <metal_stdlib>
using namespace metal;

// bins[v % nbins] += 1; total += 0.25 (exact in float); extremes = (min, max) of
// int(v) - 1000000; seen |= bit (v % 32); high water mark by compare-exchange.
kernel void atomic_device_ops(device const uint* values [[buffer(0)]],
                              device atomic_uint* bins [[buffer(1)]],
                              constant uint& nbins [[buffer(2)]],
                              device atomic_float* total [[buffer(3)]],
                              device atomic_int* extremes [[buffer(4)]],
                              device atomic_uint* seen [[buffer(5)]],
                              device atomic_uint* high_water [[buffer(6)]],
                              uint gid [[thread_position_in_grid]]) {
  const uint v = values[gid];
  atomic_fetch_add_explicit(&bins[v % nbins], 1u, memory_order_relaxed);
  atomic_fetch_add_explicit(total, 0.25f, memory_order_relaxed);
  atomic_fetch_min_explicit(&extremes[0], int(v) - 1000000, memory_order_relaxed);
  atomic_fetch_max_explicit(&extremes[1], int(v) - 1000000, memory_order_relaxed);
  atomic_fetch_or_explicit(seen, 1u << (v % 32), memory_order_relaxed);
  uint expected = atomic_load_explicit(high_water, memory_order_relaxed);
  while (expected < v &&
         !atomic_compare_exchange_weak_explicit(high_water, &expected, v, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

// Per threadgroup: how many of its values are multiples of 3, counted with a
// threadgroup atomic, and the sum of those values with a device atomic_float.
kernel void atomic_threadgroup_count(device const uint* values [[buffer(0)]],
                                     device uint* counts [[buffer(1)]],
                                     device atomic_float* sum [[buffer(2)]],
                                     uint gid [[thread_position_in_grid]],
                                     uint lid [[thread_index_in_threadgroup]],
                                     uint group [[threadgroup_position_in_grid]]) {
  threadgroup atomic_uint count;
  if (lid == 0) atomic_store_explicit(&count, 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint v = values[gid];
  if (v % 3 == 0) {
    atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(sum, float(v % 64), memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == 0) counts[group] = atomic_load_explicit(&count, memory_order_relaxed);
}
