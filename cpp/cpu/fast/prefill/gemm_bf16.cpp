// The bf16 GEMM's kernel choice (gemm_bf16.h), compiled for the baseline ISA: it only
// picks between the kernels of gemm_bf16_avx512.cpp and gemm_bf16_amx.cpp.
#include "cpu/fast/prefill/gemm_bf16.h"

#include "cpu/fast/prefill/prefill_gemm.h"

namespace metalrt::cpu::fast {

Bf16GemmFn SelectedBf16Gemm(int64_t k) {
  if (SelectedBf16Kernel() == Bf16Kernel::kAmxBf16 && k % kAmxK == 0) return GemmBf16Amx;
  return GemmBf16Avx512;
}

}  // namespace metalrt::cpu::fast
