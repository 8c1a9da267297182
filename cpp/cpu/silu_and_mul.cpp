// CPU oracle of silu_and_mul: SwiGLU (Shazeer 2020, "GLU Variants Improve
// Transformer"), out = silu(gate) * up with gate = x[..., :n], up = x[..., n:] and
// silu(g) = g / (1 + exp(-g)), or the swiglu_oai variant (metalrt/expert_ops.h,
// silu_rows.h; interleaved or halves), in f32, rounded once to the output dtype.
#include <algorithm>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/silu_rows.h"
#include "metalrt/expert_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool CpuSiluAndMul(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  // A call without params (a direct RunOp) is plain SwiGLU.
  const auto* p = std::any_cast<ops::GluParams>(&call.params);
  const bool oai = p != nullptr && p->activation != ops::GluActivation::kSilu;
  const bool halves = oai && p->activation == ops::GluActivation::kSwigluOaiHalves;
  const int64_t n = out.dim(-1);
  if (out.numel() == 0) return true;
  const int64_t rows = out.numel() / n;
  ParallelFor(rows, std::max<int64_t>(1, 8192 / n), [&](int64_t begin, int64_t end) {
    std::vector<float> in(static_cast<size_t>(2 * n)), result(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      LoadRowF32(x.data(), x.dtype(), r * 2 * n, 2 * n, in.data());
      if (oai) {
        SwigluOaiRow(in.data(), in.data() + (halves ? n : 1), halves ? 1 : 2, n, p->alpha, p->limit,
                     result.data());
      } else {
        std::copy(in.begin(), in.begin() + n, result.begin());
        SiluAndMulRow(result.data(), in.data() + n, n);
      }
      StoreRowF32(out.data(), out.dtype(), r * n, n, result.data());
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("silu_and_mul", DeviceType::kCPU, ProviderTier::kOracle, CpuSiluAndMul);

}  // namespace metalrt::cpu
