// The CPU device's prefill quantized_matmul_bt_swiglu (out = silu(gate) * up of
// x . [gate | up]^T, m above the GEMV's rows) on the bf16 GEMM with the SwiGLU as its
// epilogue: each panel holds gate rows [j0, j0 + c) and their up rows inner + j0 ..
// (Q4_0/Q4_1/Q8_0 decoded straight to bf16), its [m, 2c] product stays in per-thread
// scratch and only silu(gate) * up (exp_avx512.h) is written, so the composition's
// [m, 2 inner] intermediate (6 MB per layer at 512 tokens) is never stored or read back.
// The same products as the composition's bf16 GEMM; the oracle composition serves what
// this declines (f32 GEMM, other formats, non-f32 tensors).
#include <algorithm>
#include <vector>

#include "cpu/fast/prefill/tiled_gemm.h"
#include "cpu/fast/simd/exp_avx512.h"
#include "cpu/fast/prefill/gemm_bf16.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

// Gate rows per panel: with their up rows, 128 weight rows, the unfused GEMM's panel.
constexpr int64_t kGateRows = 64;

bool Bf16QuantizedGemmSwiglu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  const int64_t m = x.dim(0), k = w.cols, inner = w.rows / 2;
  if (!PrefillGemmServes(m, w.rows, k) || !Bf16GemmServes(k, ops::IsCoarseWeight(w)) || x.dtype() != DType::kF32 ||
      out.dtype() != DType::kF32)
    return false;
  if (!DequantizesToBf16(w)) return false;   // AVX-512 code: asked only once bf16 serves
  const uint32_t* packed = PackedBf16(x.data_as<const float>(), m, k);
  const Bf16GemmFn gemm_bf16 = SelectedBf16Gemm(k);
  float* dst = out.data_as<float>();
  ParallelFor((inner + kGateRows - 1) / kGateRows, 1, [&](int64_t begin, int64_t end) {
    static thread_local std::vector<uint16_t> rows;
    static thread_local std::vector<float> product;
    rows.resize(static_cast<size_t>(2 * kGateRows * k));
    product.resize(static_cast<size_t>(m * 2 * kGateRows));
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j0 = p * kGateRows, c = std::min(kGateRows, inner - j0);
      DequantizeRowsBf16Avx512(w, j0, c, rows.data());
      DequantizeRowsBf16Avx512(w, inner + j0, c, rows.data() + c * k);
      gemm_bf16(packed, m, k, rows.data(), 2 * c, product.data(), 2 * c, false);
      for (int64_t i = 0; i < m; ++i)
        SiluAndMulRowAvx512(product.data() + i * 2 * c, product.data() + i * 2 * c + c, c, dst + i * inner + j0);
    }
  });
  return true;
}

}  // namespace

// Declines m <= kGemvMaxRows, the fused GEMV's (tried after it).
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_swiglu", DeviceType::kCPU, ProviderTier::kPrefillBf16,
                             Bf16QuantizedGemmSwiglu);

}  // namespace metalrt::cpu::fast
