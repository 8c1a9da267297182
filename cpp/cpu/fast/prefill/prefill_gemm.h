// Which arithmetic the CPU prefill GEMM (m > kGemvMaxRows) runs: the f32 BLAS sgemm, or
// the bf16 GEMM (gemm_bf16.h: operands rounded to bf16, f32 sums) where the CPU has
// AVX-512 BF16. METALRT_CPU_GEMM=f32|bf16 chooses for every weight; unset (auto), the
// bf16 GEMM serves "coarse" weights, quantized or bf16, whose own quantization or
// rounding error is already at least bf16's; f32 and f16 weights keep the f32 sgemm
// (an f32 or f16 matmul keeps its bar). The bf16 GEMM runs on AMX tiles where the CPU
// has them (METALRT_CPU_AMX), else on AVX-512 BF16: the same rounded operands and f32
// sums, in another order. A prefill's attention products follow the GEMMs of the q/k/v
// projections (PrefillGemmIsBf16 of their weights' coarseness: prefill/paged_attention_bf16.cpp).
#pragma once

namespace metalrt::cpu::fast {

enum class PrefillGemm { kF32, kBf16, kAuto };

// "f32", "bf16", "auto".
const char* PrefillGemmName(PrefillGemm gemm);

// METALRT_CPU_GEMM, read at every call (tests switch it); unset or "auto", kAuto where
// the CPU has AVX-512 BF16, else kF32 (auto then means f32 for every weight).
// std::invalid_argument for an unknown value, or bf16 on a CPU without AVX-512 BF16.
PrefillGemm SelectedPrefillGemm();

// Whether the bf16 GEMM serves a weight under SelectedPrefillGemm(): always for kBf16,
// never for kF32, for coarse (quantized or bf16) weights for kAuto.
bool PrefillGemmIsBf16(bool coarse_weight);

enum class Bf16Kernel { kAvx512Bf16, kAmxBf16 };

// "avx512_bf16", "amx_bf16".
const char* Bf16KernelName(Bf16Kernel kernel);

// The kernel of the bf16 GEMM, from METALRT_CPU_AMX read at every call: unset or
// "auto", AMX where CpuHasAmxBf16() (cpu_features.h), else AVX-512 BF16; "off", AVX-512
// BF16; "on", AMX. std::invalid_argument for an unknown value, or "on" on a CPU or OS
// without AMX. Meaningful only where the bf16 GEMM can run (CpuHasAvx512Bf16()).
Bf16Kernel SelectedBf16Kernel();

}  // namespace metalrt::cpu::fast
