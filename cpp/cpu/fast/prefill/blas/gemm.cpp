// The CPU device's f32 prefill GEMMs of matmul, matmul_bt and quantized_matmul_bt on the
// BLAS sgemm (weight_gemm.h), for m above the GEMV's rows and sizes within the BLAS's
// int range; tried after the bf16 GEMM (prefill/matmul_bf16.cpp) and before the GEMV
// and the oracle, which serve what they decline. Only the order of the f32 sums differs
// from the oracle's.
#include "cpu/fast/prefill/blas/sgemm.h"
#include "cpu/fast/prefill/weight_gemm.h"

namespace metalrt::cpu::fast {
namespace {

template <bool (*kGemm)(const OpCall&, F32Gemm)>
bool BlasGemm(const OpCall& call) {
  for (int64_t size : {call.outputs[0].dim(0), call.outputs[0].dim(1), call.inputs[0].dim(1)})
    if (size > kSgemmMaxDim) return false;
  return BlasAvailable() && kGemm(call, Sgemm);
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("matmul", DeviceType::kCPU, ProviderTier::kPrefill, BlasGemm<MatmulGemm>);
METALRT_REGISTER_OP_PROVIDER("matmul_bt", DeviceType::kCPU, ProviderTier::kPrefill, BlasGemm<MatmulBtGemm>);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, ProviderTier::kPrefill,
                             BlasGemm<QuantizedMatmulBtGemm>);

}  // namespace metalrt::cpu::fast
