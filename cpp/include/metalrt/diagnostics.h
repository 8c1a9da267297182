// What `metalrt doctor` reports beyond the Backend interface (metalrt/device.h): the
// CPU backend's threads and the kernels its fast providers chose, and the Metal
// device's limits and kernel library. The Python-facing report is
// python/metalrt/doctor.py.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace metalrt {

struct CpuDiagnostics {
  unsigned threads = 0;   // the CPU backend's (METALRT_CPU_THREADS, else the hardware's)
  // The SIMD extensions this build's compiler was allowed to use ("AVX2", "NEON", ...):
  // the CPU kernels are plain C++ it auto-vectorises with them (no run-time dispatch).
  std::vector<std::string> compiled_features;
  // The fast quantized GEMV's SIMD kernels after METALRT_CPU_ISA: "avx512_vnni",
  // "avx2", "neon" or "portable".
  std::string gemv_isa;
  // The prefill GEMM's arithmetic after METALRT_CPU_GEMM: "f32", "bf16" or "auto".
  std::string prefill_gemm;
  // The bf16 GEMM's kernel after METALRT_CPU_AMX, "amx_bf16" or "avx512_bf16"; none on
  // a CPU without AVX-512 BF16.
  std::optional<std::string> bf16_gemm_kernel;
};

// Reads the settings now, so a malformed one is refused here rather than at the first
// op that needs it: std::invalid_argument for a bad METALRT_CPU_THREADS,
// METALRT_CPU_ISA, METALRT_CPU_GEMM (or bf16 on a CPU without it) or METALRT_CPU_AMX
// (or "on" on a CPU without AMX).
CpuDiagnostics GetCpuDiagnostics();

struct MetalLimits {
  size_t max_threadgroup_memory_bytes = 0;
  uint32_t max_threads_per_threadgroup = 0;   // of a kernel using no threadgroup memory
  uint32_t simd_width = 0;                    // threads per SIMD-group
};

// Loads the device's kernels first (Metal reports the thread limits per kernel).
// std::runtime_error when no Metal device is available or its kernels cannot be
// loaded.
MetalLimits GetMetalLimits();

struct MetalLibraryInfo {
  std::string device;      // the name of the device serving "metal"
  // Why it serves: "native: <GPU>", "sim: native unavailable: <reason>" or the
  // METALRT_METAL override.
  std::string selection;
  // Where its kernels come from: "metallib at <path>", "compiled at run time from
  // embedded sources in <s> s" or the simulated device's compiled-in kernels.
  std::string library;
  std::vector<std::string> kernels;   // sorted
};

// Loads the kernels first: seconds where they are compiled at run time.
// std::runtime_error when no Metal device is available or the kernels cannot be
// loaded or compiled.
MetalLibraryInfo GetMetalLibraryInfo();

// Why the Metal device's prefill attention kernel is declined, so the reference tier
// serves prefill: its simdgroup_matrix lane layout (thread_elements(), probed once on
// the device) differs from the one the kernel assumes, or the probe failed. "" when the
// kernel serves. Runs the probe at the first call; std::runtime_error as
// GetMetalLimits.
std::string MetalPrefillAttentionDecline();

// Test hook: the layout the probe is compared with, `element[2 * lane + e]` = 8 * row
// + column of the element lane `lane` holds at thread_elements()[e] (64 values, each
// 0..63, else std::invalid_argument), in place of the kernel's; nullopt restores it.
void SetMetalAssumedSimdgroupLayoutForTesting(const std::optional<std::vector<int>>& element);

}  // namespace metalrt
