// metalrt._metalrt: the facts about the Metal device that metalrt.doctor() reports
// and no other API exposes. The Python-facing report is python/metalrt/doctor.py.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bind.h"
#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/prefill/prefill_gemm.h"
#include "cpu/parallel.h"
#include "gpu/gpu_device.h"
#include "gpu/metal_backend.h"

namespace metalrt::python {
namespace {

// The SIMD extensions this build's compiler was allowed to use: the CPU kernels are
// plain C++ that the compiler auto-vectorises with them (no run-time dispatch).
std::vector<std::string> CompiledCpuFeatures() {
  std::vector<std::string> features;
#if defined(__x86_64__)
  features.push_back("x86-64 SSE2");
#endif
#if defined(__AVX__)
  features.push_back("AVX");
#endif
#if defined(__AVX2__)
  features.push_back("AVX2");
#endif
#if defined(__FMA__)
  features.push_back("FMA");
#endif
#if defined(__F16C__)
  features.push_back("F16C");
#endif
#if defined(__AVX512F__)
  features.push_back("AVX-512F");
#endif
#if defined(__ARM_NEON)
  features.push_back("NEON");
#endif
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
  features.push_back("FP16 vector arithmetic");
#endif
  return features;
}

}  // namespace

void BindDoctor(nb::module_& m) {
  m.def(
      "_cpu_facts",
      [] {
        nb::dict facts;
        facts["threads"] = cpu::ParallelThreadCount();
        facts["compiled_features"] = CompiledCpuFeatures();
        // Raises (ValueError) for a malformed METALRT_CPU_ISA, which the GEMV would
        // otherwise only meet at its first quantized call.
        facts["gemv_isa"] = std::string(cpu::fast::GemvIsaName(cpu::fast::SelectedGemvIsa()));
        // Raises (ValueError) for a malformed METALRT_CPU_GEMM, or bf16 on a CPU without it.
        facts["prefill_gemm"] = std::string(cpu::fast::PrefillGemmName(cpu::fast::SelectedPrefillGemm()));
        // Raises (ValueError) for a malformed METALRT_CPU_AMX, or on on a CPU without AMX.
        if (cpu::fast::CpuHasAvx512Bf16())
          facts["bf16_gemm_kernel"] = std::string(cpu::fast::Bf16KernelName(cpu::fast::SelectedBf16Kernel()));
        else
          facts["bf16_gemm_kernel"] = nb::none();
        return facts;
      },
      "Internal, for metalrt.doctor: dict(threads: int, the CPU backend's thread count;\n"
      "compiled_features: list of str, the SIMD extensions the build may use;\n"
      "gemv_isa: str, the SIMD kernels the fast quantized GEMV runs, after METALRT_CPU_ISA;\n"
      "prefill_gemm: str, f32, bf16 or auto, the arithmetic of the prefill GEMM, after METALRT_CPU_GEMM;\n"
      "bf16_gemm_kernel: str or None, amx_bf16 or avx512_bf16, the bf16 GEMM's kernel after\n"
      "METALRT_CPU_AMX, None on a CPU without AVX-512 BF16).");
  m.def(
      "_metal_device_facts",
      [] {
        gpu::GpuDevice& device = gpu::ActiveMetalBackend().device();
        gpu::GpuPipeline* pipeline = nullptr;
        {
          // The first use of the kernel library may compile it (seconds, on a Mac
          // without a metallib). Metal reports the thread limit per pipeline: that of
          // a kernel with no threadgroup memory is the device's.
          nb::gil_scoped_release release;
          pipeline = &device.default_library().pipeline("add_f32");
        }
        nb::dict facts;
        facts["max_threadgroup_memory_bytes"] = device.max_threadgroup_memory_length();
        facts["max_threads_per_threadgroup"] = pipeline->max_total_threads_per_threadgroup();
        facts["simd_width"] = pipeline->thread_execution_width();
        return facts;
      },
      "Internal, for metalrt.doctor: dict(max_threadgroup_memory_bytes: int,\n"
      "max_threads_per_threadgroup: int, simd_width: int). RuntimeError when no Metal device\n"
      "is available or its kernels cannot be loaded.");
}

}  // namespace metalrt::python
