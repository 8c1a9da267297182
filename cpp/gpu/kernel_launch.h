// The declarative dispatch API every op's Metal dispatch code (cpp/gpu/<op>.cpp) uses:
//
//   KernelLaunch(KernelName("rms_norm", "row", x.dtype()))
//       .input(0, x).input(1, weight).output(2, out)
//       .bytes(3, RmsNormArgs{rows, cols, eps})
//       .threadgroups({rows, 1, 1}, {256, 1, 1});
//
// A launch says which kernel, what each [[buffer(n)]] / [[threadgroup(n)]] index
// holds and the grid; the terminal call (threadgroups or threads) validates it and
// encodes it into the Metal backend's command stream (no commit, no wait — see
// command_stream.h). Errors are std::invalid_argument starting "[<kernel name>]".
//
// Conventions for kernel authors (metal/<op>.metal):
// * Kernel names are "<op>_<variant>_<dtype>", built by KernelName(); the dtype
//   suffixes are f32 f16 bf16 i8 u8 i32 i64 u32. Templated kernels are instantiated
//   in the .metal file with [[host_name("<that name>")]]. The profiler reports these
//   names, so the variant says which algorithm ran ("gemv", "gemm_simdgroup").
// * Buffer indices: inputs first, then outputs, then one argument struct.
// * A tensor binds its allocation's buffer at the tensor's byte offset, so the
//   kernel sees element 0 of the view at index 0; views and slices need no offset
//   argument. Non-contiguous views pass their strides in the argument struct.
// * Argument structs live in a header shared by host and MSL (metal/<op>_args.h),
//   hold only 4-byte scalars (int32_t counts, uint32_t, float) and 8-byte
//   int64_t strides/offsets ordered largest first, no vectors (their MSL sizes
//   differ), and carry static_asserts on sizeof so both sides agree. At most 4 KiB
//   (Metal's setBytes limit).
// * Tuning constants (threads per threadgroup, tile sizes) live in the same shared
//   header, so host grid math and kernel code cannot disagree.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gpu/command_stream.h"
#include "gpu/gpu_device.h"
#include "gpu/profiler.h"
#include "metalrt/tensor.h"

namespace metalrt::gpu {

// Whether counts fit the kernels' index types: grid positions are uint (FitsUint),
// counts and in-row offsets in argument structs are int32_t (FitsInt). A dispatch
// function whose shapes do not fit returns false, so its provider declines the call.
template <typename... Counts>
constexpr bool FitsUint(Counts... n) {
  return ((static_cast<int64_t>(n) <= std::numeric_limits<uint32_t>::max()) && ...);
}
template <typename... Counts>
constexpr bool FitsInt(Counts... n) {
  return ((static_cast<int64_t>(n) <= std::numeric_limits<int32_t>::max()) && ...);
}

class MetalBackend;

// "f32", "f16", "bf16", "i8", "u8", "i32", "i64", "u32".
const char* KernelDTypeSuffix(DType dtype);
// KernelName("rms_norm", "row", kF32) == "rms_norm_row_f32"; an empty variant is
// left out: KernelName("add", "", kBF16) == "add_bf16".
std::string KernelName(std::string_view op, std::string_view variant, DType dtype);

// A [[function_constant(index)]] value: bool, int32_t, uint32_t or float.
FunctionConstant Constant(uint32_t index, bool value);
FunctionConstant Constant(uint32_t index, int32_t value);
FunctionConstant Constant(uint32_t index, uint32_t value);
FunctionConstant Constant(uint32_t index, float value);

class KernelLaunch {
 public:
  // A kernel of the device's default library on the process's Metal backend.
  explicit KernelLaunch(std::string kernel, FunctionConstants constants = {});
  KernelLaunch(MetalBackend& backend, std::string kernel, FunctionConstants constants = {});

  // Takes the kernel from `library` (e.g. one compiled at run time) instead.
  KernelLaunch& library(GpuLibrary& library);
  // Binds the tensor's buffer at its byte offset. The tensor must live in a Metal
  // allocation; input/output document the direction (outputs may alias inputs).
  KernelLaunch& input(uint32_t index, const Tensor& tensor);
  KernelLaunch& output(uint32_t index, const Tensor& tensor);
  // A buffer of a user kernel (compile_shader), whose direction is not known: bound
  // as written (the host waits for it before reading), named "argument" in errors.
  KernelLaunch& argument(uint32_t index, const Tensor& tensor);
  // Copies a trivially copyable value (an argument struct, a scalar) into the
  // command buffer.
  template <typename T>
  KernelLaunch& bytes(uint32_t index, const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "bytes() takes plain argument structs");
    return bytes(index, &value, sizeof(T));
  }
  KernelLaunch& bytes(uint32_t index, const void* data, size_t length);
  // Dynamic threadgroup memory at [[threadgroup(index)]]: `length` bytes rounded up
  // to a multiple of 16, as setThreadgroupMemoryLength:atIndex: requires.
  KernelLaunch& threadgroup_memory(uint32_t index, size_t length);

  // Encodes a grid of whole threadgroups / a grid of threads (edge threadgroups
  // partial). A grid with a zero extent encodes nothing.
  void threadgroups(Size3 threadgroups, Size3 threads_per_threadgroup);
  void threads(Size3 threads, Size3 threads_per_threadgroup);

 private:
  KernelLaunch& BindTensor(uint32_t index, const Tensor& tensor, const char* role, bool written);
  void Launch(bool per_thread, Size3 grid, Size3 group);
  [[noreturn]] void Fail(const std::string& message) const;
  // Refuses an index past Metal's argument table (compile_shader kernels on a Mac are
  // not parsed by the sim's generator, which refuses them too).
  void CheckBufferIndex(uint32_t index) const;

  MetalBackend& backend_;
  std::string kernel_;
  FunctionConstants constants_;
  GpuLibrary* library_ = nullptr;
  std::vector<Binding> bindings_;
  Profiler::Clock::time_point start_{};   // read only when profiling
};

}  // namespace metalrt::gpu
