// metalrt/diagnostics.h: the CPU backend's part.
#include "metalrt/diagnostics.h"

#include "cpu/fast/prefill/prefill_gemm.h"
#include "cpu/fast/simd/cpu_features.h"
#include "cpu/parallel.h"

namespace metalrt {
namespace {

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

CpuDiagnostics GetCpuDiagnostics() {
  using namespace cpu::fast;
  CpuDiagnostics d;
  d.threads = cpu::ParallelThreadCount();
  d.compiled_features = CompiledCpuFeatures();
  d.gemv_isa = GemvIsaName(SelectedGemvIsa());
  d.prefill_gemm = PrefillGemmName(SelectedPrefillGemm());
  // SelectedBf16Kernel is meaningful (and checks METALRT_CPU_AMX) only where the bf16
  // GEMM can run.
  if (CpuHasAvx512Bf16()) d.bf16_gemm_kernel = Bf16KernelName(SelectedBf16Kernel());
  return d;
}

}  // namespace metalrt
