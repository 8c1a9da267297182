// metalrt._metalrt: the facts metalrt.doctor() reports and no other API exposes
// (metalrt/diagnostics.h). The Python-facing report is python/metalrt/doctor.py.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "metalrt/diagnostics.h"

namespace metalrt::python {

void BindDoctor(nb::module_& m) {
  m.def(
      "_cpu_facts",
      [] {
        const CpuDiagnostics cpu = GetCpuDiagnostics();
        nb::dict facts;
        facts["threads"] = cpu.threads;
        facts["compiled_features"] = cpu.compiled_features;
        facts["gemv_isa"] = cpu.gemv_isa;
        facts["prefill_gemm"] = cpu.prefill_gemm;
        facts["bf16_gemm_kernel"] = cpu.bf16_gemm_kernel;
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
        MetalLimits limits;
        std::string prefill_decline;
        {
          // The first use of the kernel library may compile it (seconds, on a Mac
          // without a metallib).
          nb::gil_scoped_release release;
          limits = GetMetalLimits();
          prefill_decline = MetalPrefillAttentionDecline();
        }
        nb::dict facts;
        facts["max_threadgroup_memory_bytes"] = limits.max_threadgroup_memory_bytes;
        facts["max_threads_per_threadgroup"] = limits.max_threads_per_threadgroup;
        facts["simd_width"] = limits.simd_width;
        facts["prefill_attention_decline"] = prefill_decline;
        return facts;
      },
      "Internal, for metalrt.doctor: dict(max_threadgroup_memory_bytes: int,\n"
      "max_threads_per_threadgroup: int, simd_width: int, prefill_attention_decline: str,\n"
      "why the prefill attention kernel is declined, \"\" when it serves). RuntimeError when no\n"
      "Metal device is available or its kernels cannot be loaded.");
  m.def("_set_assumed_simdgroup_layout", &SetMetalAssumedSimdgroupLayoutForTesting, nb::arg("element").none(),
        "Test hook: the simdgroup_matrix lane layout the prefill kernel's probe is compared\n"
        "with (64 ints, element[2 * lane + e] = 8 * row + column), or None for the kernel's.\n"
        "ValueError for a malformed layout.");
}

}  // namespace metalrt::python
