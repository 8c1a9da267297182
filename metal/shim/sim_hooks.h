// The contract between the MSL shim (metal/shim, header-only, compiled into every
// kernel module) and the simulated device's runtime (cpp/sim). The runtime runs
// each GPU thread as a fiber; the shim reaches the runtime only through this table,
// which the runtime installs into each kernel module when it loads it (the
// compiled-in kernels and every user library from compile_shader alike).
#pragma once
#include <cstddef>
#include <cstdint>

namespace metalrt::sim {

struct Hooks {
  // Lane of the calling thread in its SIMD-group (0..31).
  uint32_t (*lane)();
  // Every active lane of the caller's SIMD-group passes `bytes` (<= 64) bytes in
  // `mine`; when all have arrived, each receives all lanes' values in `all`
  // (32 slots of `bytes`, indexed by lane; slots of inactive lanes unspecified).
  // Returns the lanes that took part: the active mask at the moment the exchange
  // completed (the only atomic way to learn it: a lane may return at any time
  // between two calls). Must be reached by every active lane (a SIMD-group-uniform
  // call).
  uint32_t (*simd_exchange)(const void* mine, size_t bytes, void* all);
  // threadgroup_barrier / simdgroup_barrier: `file`/`line` identify the call site;
  // threads reaching different call sites is an error the runtime reports.
  void (*threadgroup_barrier)(const char* file, int line);
  void (*simdgroup_barrier)(const char* file, int line);
  // Per-threadgroup storage for a `threadgroup` variable declared in a kernel body
  // (the generator rewrites such declarations into a call). `slot` is unique per
  // declaration within the module; returns the same, NaN-poisoned-at-threadgroup-
  // start memory to every thread of the threadgroup. Throws past 32 KiB in total.
  // `what` ("'name' (file:line)") names the variable in errors about it.
  void* (*threadgroup_alloc)(uint32_t slot, size_t bytes, size_t alignment, const char* what);
};

// The table of this module; set by the runtime before any kernel of it runs.
inline const Hooks* g_hooks = nullptr;
inline const Hooks& hooks() { return *g_hooks; }

}  // namespace metalrt::sim
