// The kernel-module side of the simulated device: what the generator
// (python/metalrt/_sim/msl_to_cpp.py) emits calls to, and the tables the runtime
// (cpp/sim) reads from a loaded module. Header-only, compiled into every kernel
// module next to the shim; the hook table it reaches the runtime through is
// sim_hooks.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "sim_hooks.h"

namespace metalrt::sim {

constexpr uint32_t kModuleAbiVersion = 4;
constexpr uint32_t kMaxBufferBindings = 31;        // Metal's buffer argument table
constexpr uint32_t kMaxThreadgroupBindings = 31;   // [[threadgroup(n)]] indices

// Where the calling GPU thread is; filled by the runtime for every thread. Sizes of
// partial edge threadgroups (dispatch_threads) are their real sizes.
struct ThreadContext {
  void* const* buffers;               // [[buffer(n)]]: base + bound offset
  void* const* threadgroup_buffers;   // [[threadgroup(n)]]
  uint32_t thread_position_in_grid[3];
  uint32_t threadgroup_position_in_grid[3];
  uint32_t thread_position_in_threadgroup[3];
  uint32_t threads_per_threadgroup[3];
  uint32_t threadgroups_per_grid[3];
  uint32_t threads_per_grid[3];
  uint32_t thread_index_in_threadgroup;
  uint32_t thread_index_in_simdgroup;
  uint32_t simdgroup_index_in_threadgroup;
  uint32_t simdgroups_per_threadgroup;
  uint32_t threads_per_simdgroup;
};

using KernelEntry = void (*)(const ThreadContext&);

// A [[buffer(n)]] parameter. `function_constant` >= 0 names the function constant
// that guards it ([[buffer(n), function_constant(c)]]): required only when true.
struct BufferUse {
  uint32_t index;
  int32_t function_constant;
};

struct KernelInfo {
  const char* name;              // the host name pipelines are looked up by
  KernelEntry entry;
  const BufferUse* buffers;
  uint32_t num_buffers;
  uint32_t threadgroup_buffers;  // bit n: a [[threadgroup(n)]] parameter
  const char* location;          // "file.metal:line" of the kernel
  // Indices of the function constants the kernel uses without testing them with
  // is_function_constant_defined: a pipeline needs a value for each (as Metal's
  // newFunctionWithName:constantValues:error: does).
  const uint32_t* required_constants;
  uint32_t num_required_constants;
  // N of the kernel's [[max_total_threads_per_threadgroup(N)]], 0 without one: its
  // pipelines' maxTotalThreadsPerThreadgroup, and a larger threadgroup is refused.
  uint32_t max_total_threads_per_threadgroup;
};

// A `constant T name [[function_constant(index)]]`; the runtime writes the value of
// the pipeline being run before its threads start.
struct FunctionConstantInfo {
  uint32_t index;
  const char* name;
  uint32_t size;
  void* value;
  bool* defined;
};

struct ModuleInfo {
  uint32_t abi_version;
  const char* source;            // the .metal file it was generated from
  const KernelInfo* kernels;
  uint32_t num_kernels;
  const FunctionConstantInfo* constants;
  uint32_t num_constants;
  const Hooks** hooks;           // this module's g_hooks, set by the runtime
};

// The runtime's registry of the kernels compiled into the library (defined in
// cpp/sim); only builtin modules call it, user modules export metalrt_sim_module().
void RegisterBuiltinModule(const ModuleInfo* module);

// ---- helpers the generated kernel entries call ----

template <class F> struct FnArgs;
template <class R, class... A> struct FnArgs<R (*)(A...)> {
  template <size_t I> using at = std::tuple_element_t<I, std::tuple<A...>>;
};

// A pointer parameter takes the bound address; a reference parameter
// (`constant Params& p [[buffer(1)]]`) refers to the bound bytes.
template <class P> P bind_address(void* address) {
  if constexpr (std::is_pointer_v<P>) {
    return static_cast<P>(address);
  } else {
    static_assert(std::is_reference_v<P>, "a buffer parameter is a pointer or a reference");
    return *static_cast<std::remove_reference_t<P>*>(address);
  }
}

// `uint`, `ushort`, `uint2`, `ushort3`, ... built from the first `N` components.
template <class P, int N> P bind_position(const uint32_t (&v)[3]) {
  if constexpr (N == 1) return static_cast<P>(v[0]);
  else if constexpr (N == 2) return P(v[0], v[1]);
  else return P(v[0], v[1], v[2]);
}

// Storage of a kernel-body `threadgroup T x;` declaration, shared by the threads of
// a threadgroup (the generator rewrites the declaration into this call); `what` is
// "'x' (file:line)".
template <class T> T& threadgroup_variable(uint32_t slot, const char* what) {
  return *static_cast<T*>(hooks().threadgroup_alloc(slot, sizeof(T), alignof(T), what));
}

[[noreturn, gnu::cold, gnu::noinline]] inline void threadgroup_index_error(
    const char* name, const char* where, unsigned dim, const std::string& index, uint64_t extent) {
  throw std::out_of_range("threadgroup array '" + std::string(name) + "' (" + where + "): index " +
                          index + (dim ? " in dimension " + std::to_string(dim) : std::string()) +
                          " is out of bounds [0, " + std::to_string(extent) + ")");
}

// Subscript `Dim` of a kernel-body threadgroup array (the generator wraps every
// subscript of one in this call): an index out of the declared bounds is an error
// of the dispatch, naming the array, its declaration and the index, where a GPU
// would silently read or overwrite other threadgroup memory.
template <class Array, unsigned Dim, class I>
inline I threadgroup_index(I i, const char* name, const char* where) {
  constexpr uint64_t extent = std::extent_v<std::remove_reference_t<Array>, Dim>;
  if constexpr (std::is_signed_v<I>) {
    if (__builtin_expect(i < 0 || static_cast<uint64_t>(i) >= extent, 0))
      threadgroup_index_error(name, where, Dim, std::to_string(static_cast<long long>(i)), extent);
  } else {
    if (__builtin_expect(static_cast<uint64_t>(i) >= extent, 0))
      threadgroup_index_error(name, where, Dim, std::to_string(static_cast<unsigned long long>(i)),
                              extent);
  }
  return i;
}

}  // namespace metalrt::sim

// A module compiled into the library registers itself at load; a module built by
// compile_library exports one C entry the runtime finds with dlsym.
#define METALRT_SIM_BUILTIN_MODULE(info)                                      \
  namespace {                                                                 \
  const int metalrt_sim_registered_ = (::metalrt::sim::RegisterBuiltinModule(&(info)), 0); \
  }
#define METALRT_SIM_SHARED_MODULE(info)                                       \
  extern "C" __attribute__((visibility("default")))                           \
  const ::metalrt::sim::ModuleInfo* metalrt_sim_module() { return &(info); }
