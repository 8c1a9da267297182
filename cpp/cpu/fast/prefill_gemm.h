// Which arithmetic the CPU prefill GEMM (m > kGemvMaxRows) runs: the f32 BLAS sgemm, or
// the bf16 GEMM (gemm_bf16.h: operands rounded to bf16, f32 sums) where the CPU has
// AVX-512 BF16. METALRT_CPU_GEMM=f32|bf16 chooses; unset, bf16 where the CPU has it.
#pragma once

namespace metalrt::cpu::fast {

enum class PrefillGemm { kF32, kBf16 };

// "f32", "bf16".
const char* PrefillGemmName(PrefillGemm gemm);

// METALRT_CPU_GEMM, read at every call (tests switch it), else the fastest the CPU
// has. std::invalid_argument for an unknown value, or bf16 on a CPU without AVX-512
// BF16.
PrefillGemm SelectedPrefillGemm();

}  // namespace metalrt::cpu::fast
