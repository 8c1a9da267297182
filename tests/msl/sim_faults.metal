// Kernels that break the rules, for the negative gates of the simulated device.
#include <metal_stdlib>
using namespace metal;

// Odd and even threads wait at different barriers.
kernel void divergent_barrier(device float* out [[buffer(0)]],
                              uint tid [[thread_index_in_threadgroup]]) {
  if (tid % 2 == 0) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[tid] = 1.0f;
}

// 33 KiB of threadgroup memory: past the 32 KiB a threadgroup has.
kernel void too_much_threadgroup_memory(device float* out [[buffer(0)]],
                                        uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float big[33 * 256];
  big[tid] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = big[0];
}

// Spins until the host sets *flag, then writes: lets a test observe a command
// buffer that is still running.
kernel void wait_for_host(device atomic_int* flag [[buffer(0)]],
                          device float* out [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) {
  while (atomic_load_explicit(flag, memory_order_relaxed) == 0) {
  }
  out[i] = float(i) + 0.5f;
}

// Every thread fills row[32] and grid[4][8]; then thread 0 reads (mode 0: row[at.x],
// mode 1: grid[at.x][at.y]) or writes (mode 2: row[at.x]) one element. Out of bounds,
// a GPU reads or overwrites its neighbour in threadgroup memory without a word.
kernel void threadgroup_index_probe(device float* out [[buffer(0)]],
                                    device const int* at [[buffer(1)]],
                                    uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float row[32];
  threadgroup float grid[4][8];
  row[tid] = float(tid);
  grid[tid / 8][tid % 8] = 100.0f + float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid != 0) return;
  if (at[2] == 0) out[0] = row[at[0]];
  if (at[2] == 1) out[0] = grid[at[0]][at[1]];
  if (at[2] == 2) {
    row[at[0]] = -1.0f;
    out[0] = grid[0][0];
  }
}

inline void store_at(threadgroup float* dst, uint i, float v) { dst[i] = v; }

// Thread i stores element i of a 32-element array through a helper's pointer, which
// the subscript checks do not see: with 33 threads, thread 32 writes past the end.
kernel void threadgroup_pointer_overrun(device float* out [[buffer(0)]],
                                        uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float staged[32];
  store_at(staged, tid, float(tid));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = staged[tid % 32];
}

// The same through a [[threadgroup(0)]] buffer, without a barrier: found when the
// threadgroup ends.
kernel void threadgroup_buffer_overrun(device float* out [[buffer(0)]],
                                       threadgroup float* scratch [[threadgroup(0)]],
                                       uint tid [[thread_index_in_threadgroup]]) {
  scratch[tid] = float(tid);
  out[tid] = scratch[tid];
}
