// The CPU device's bf16 prefill GEMMs (gemm_bf16.h: AMX tiles or AVX-512 BF16) of
// matmul_bt and quantized_matmul_bt, for the weights PrefillGemmIsBf16 gives them
// (prefill_gemm.h). Tried ahead of the BLAS sgemm (prefill/blas/gemm.cpp), which serves
// what they decline; without a BLAS, the oracle does.
#include "cpu/fast/prefill/weight_gemm.h"

namespace metalrt::cpu::fast {

METALRT_REGISTER_OP_PROVIDER("matmul_bt", DeviceType::kCPU, ProviderTier::kPrefillBf16,
                             [](const OpCall& call) { return MatmulBtGemm(call, nullptr); });
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, ProviderTier::kPrefillBf16,
                             [](const OpCall& call) { return QuantizedMatmulBtGemm(call, nullptr); });

}  // namespace metalrt::cpu::fast
