// Rotary position embedding entry points (RoPE, Su et al. 2021, "RoFormer"): the NeoX
// (half-split) and GPT-J (interleaved) pairings, the cos|sin cache builder, and
// application of a cache.
#include <cmath>
#include <string>

#include "metalrt/device.h"
#include "ops/op_common.h"

namespace metalrt::ops {
namespace {

using namespace detail;

void CheckRotaryDim(int64_t rotary_dim, float base, const char* op) {
  Check(rotary_dim > 0 && rotary_dim % 2 == 0, op,
        "rotary_dim must be positive and even, got " + std::to_string(rotary_dim));
  Check(std::isfinite(base) && base > 0, op, "base must be positive, got " + std::to_string(base));
}

void CheckPositions(const Tensor& positions, int64_t tokens, const char* op) {
  CheckRank(positions, 1, op, "positions");
  CheckDType(positions, DType::kI32, op, "positions");
  CheckShape(positions, {tokens}, op, "positions");
  CheckContiguous(positions, op, "positions");
}

// x [T, heads, head_dim] float, positions int32 [T], rotary_dim <= head_dim.
void CheckRotated(const Tensor& x, const Tensor& positions, int64_t rotary_dim, const char* op) {
  CheckRank(x, 3, op, "x");
  CheckFloat(x, op, "x");
  CheckContiguous(x, op, "x");
  CheckPositions(positions, x.dim(0), op);
  Check(rotary_dim <= x.dim(2), op,
        "rotary_dim " + std::to_string(rotary_dim) + " exceeds head_dim " + std::to_string(x.dim(2)));
}

// Every row index of rope_from_cache lies inside the cache; a row that reaches a kernel
// unchecked (positions the host cannot read) is skipped there.
void CheckCacheRows(const Tensor& positions, int64_t rows) {
  CheckIndicesInRange(positions, positions.dim(0), 0, rows, "rope_from_cache",
                      [&](int64_t row, int64_t t) {
                        return "position " + std::to_string(row) + " of token " +
                               std::to_string(t) + " is outside the cos_sin_cache of " +
                               std::to_string(rows) + " rows";
                      });
}

Tensor RunRope(const char* op, const Tensor& x, const Tensor& positions, int64_t rotary_dim,
               float base, const OptTensor& out) {
  CheckRotaryDim(rotary_dim, base, op);
  CheckRotated(x, positions, rotary_dim, op);
  const DeviceType device = CommonDevice({&x, &positions}, op);
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, op);
  CheckNoOverlap(result, x, op, "x", /*may_alias=*/true);
  CheckNoOverlap(result, positions, op, "positions");
  RunOp(op, device, OpCall{{x, positions}, {result}, RopeParams{rotary_dim, base}});
  return result;
}

}  // namespace

Tensor RopeNeox(const Tensor& x, const Tensor& positions, int64_t rotary_dim, float base,
                const OptTensor& out) {
  return RunRope("rope_neox", x, positions, rotary_dim, base, out);
}

Tensor RopeInterleaved(const Tensor& x, const Tensor& positions, int64_t rotary_dim, float base,
                       const OptTensor& out) {
  return RunRope("rope_interleaved", x, positions, rotary_dim, base, out);
}

Tensor RopeCosSinCache(const Tensor& positions, int64_t rotary_dim, float base,
                       const OptTensor& out) {
  constexpr const char* kOp = "rope_cos_sin_cache";
  CheckRotaryDim(rotary_dim, base, kOp);
  CheckRank(positions, 1, kOp, "positions");
  CheckPositions(positions, positions.dim(0), kOp);
  Tensor result =
      OutputOrNew(out, {positions.dim(0), rotary_dim}, DType::kF32, positions.device(), kOp);
  CheckNoOverlap(result, positions, kOp, "positions");
  RunOp(kOp, positions.device(), OpCall{{positions}, {result}, RopeParams{rotary_dim, base}});
  return result;
}

Tensor RopeFromCache(const Tensor& x, const Tensor& cos_sin_cache, const Tensor& positions,
                     bool neox, const OptTensor& out) {
  constexpr const char* kOp = "rope_from_cache";
  CheckRank(cos_sin_cache, 2, kOp, "cos_sin_cache");
  CheckDType(cos_sin_cache, DType::kF32, kOp, "cos_sin_cache");
  CheckContiguous(cos_sin_cache, kOp, "cos_sin_cache");
  const int64_t rotary_dim = cos_sin_cache.dim(1);
  Check(rotary_dim > 0 && rotary_dim % 2 == 0, kOp,
        "cos_sin_cache rows must have a positive even rotary_dim, got shape " +
            ShapeToString(cos_sin_cache.shape()));
  CheckRotated(x, positions, rotary_dim, kOp);
  const DeviceType device = CommonDevice({&x, &cos_sin_cache, &positions}, kOp);
  Tensor result = OutputOrNew(out, x.shape(), x.dtype(), device, kOp);
  CheckNoOverlap(result, x, kOp, "x", /*may_alias=*/true);
  CheckNoOverlap(result, cos_sin_cache, kOp, "cos_sin_cache");
  CheckNoOverlap(result, positions, kOp, "positions");
  CheckCacheRows(positions, cos_sin_cache.dim(0));
  RunOp(kOp, device, OpCall{{x, cos_sin_cache, positions}, {result}, RopeFromCacheParams{neox}});
  return result;
}

}  // namespace metalrt::ops
