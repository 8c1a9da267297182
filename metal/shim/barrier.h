// Threadgroup and SIMD-group barriers (MSL spec §6.9.1 "Threadgroup and SIMD-group
// synchronization functions"). The runtime checks that every thread of the group
// reaches the same barrier, so each call passes its call site (the caller's file
// and line, through default arguments evaluated where the kernel calls it).
//
// Memory flags only order memory on the GPU; the simulation runs a threadgroup's
// threads as fibers on one OS thread, where every store is visible after the
// barrier anyway (so a sim pass does not prove GPU memory ordering; the Mac run does).
#pragma once
#pragma GCC system_header
#include "scalar_types.h"
#include "sim_hooks.h"

namespace metal {

enum class mem_flags : uint {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<uint>(a) | static_cast<uint>(b));
}

inline void threadgroup_barrier(mem_flags, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
  metalrt::sim::hooks().threadgroup_barrier(file, line);
}
inline void simdgroup_barrier(mem_flags, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  metalrt::sim::hooks().simdgroup_barrier(file, line);
}

}  // namespace metal
