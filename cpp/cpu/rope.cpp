// CPU RoPE family (Su et al. 2021, "RoFormer"; pairings as in GPT-NeoX and GPT-J).
//
// Angles: inv_freq_i = base^(-2i / rotary_dim) and angle = position * inv_freq_i are
// computed in double, as are cos and sin, which are then rounded once to f32. A float
// angle would be off by ~1e-2 rad near position 131072 (float spacing there is 2^-6).
// The rotation of a pair (a, b) is then f32: (a*cos - b*sin, b*cos + a*sin), in that
// order. Building a cache and applying it therefore equals rope_neox/rope_interleaved
// bit for bit. Tokens are spread over ParallelFor's threads; each token's arithmetic is
// the same on any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "cpu/rope_rows.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {

void RopeCosSinRow(int32_t position, int64_t rotary_dim, float base, float* cos_sin) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(static_cast<double>(base), -2.0 * i / rotary_dim);
    const double angle = position * inv_freq;
    cos_sin[i] = static_cast<float>(std::cos(angle));
    cos_sin[half + i] = static_cast<float>(std::sin(angle));
  }
}

void RopeRotateRow(float* row, const float* cos_sin, int64_t rotary_dim, bool neox) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    const float a = row[ia], b = row[ib], c = cos_sin[i], s = cos_sin[half + i];
    row[ia] = a * c - b * s;
    row[ib] = b * c + a * s;
  }
}

namespace {

// Rotates the first rotary_dim features of every head of token row `t`:
// NeoX pairs (i, i + half), interleaved pairs (2i, 2i + 1).
void RotateToken(const Tensor& x, const Tensor& out, int64_t t, const float* cos_sin,
                 int64_t rotary_dim, bool neox, std::vector<float>& row) {
  const int64_t heads = x.dim(1), head_dim = x.dim(2);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t offset = (t * heads + h) * head_dim;
    LoadRowF32(x.data(), x.dtype(), offset, head_dim, row.data());
    RopeRotateRow(row.data(), cos_sin, rotary_dim, neox);
    StoreRowF32(out.data(), out.dtype(), offset, head_dim, row.data());
  }
}

// Tokens per chunk of the parallel loops: a token's cos/sin row (rotary_dim / 2 pow,
// cos and sin in double) costs a few microseconds, so a decode step's one token stays
// on the calling thread.
constexpr int64_t kMinTokens = 4;

template <bool kNeox>
bool Rope(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const int32_t* positions = call.inputs[1].data_as<int32_t>();
  const auto& p = call.param<ops::RopeParams>();
  ParallelFor(x.dim(0), kMinTokens, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_sin(static_cast<size_t>(p.rotary_dim));
    std::vector<float> row(static_cast<size_t>(x.dim(2)));
    for (int64_t t = begin; t < end; ++t) {
      RopeCosSinRow(positions[t], p.rotary_dim, p.base, cos_sin.data());
      RotateToken(x, call.outputs[0], t, cos_sin.data(), p.rotary_dim, kNeox, row);
    }
  });
  return true;
}

bool RopeCosSinCache(const OpCall& call) {
  const Tensor& positions = call.inputs[0];
  const auto& p = call.param<ops::RopeParams>();
  float* out = call.outputs[0].data_as<float>();
  ParallelFor(positions.dim(0), kMinTokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      RopeCosSinRow(positions.data_as<int32_t>()[t], p.rotary_dim, p.base, out + t * p.rotary_dim);
  });
  return true;
}

bool RopeFromCache(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& cache = call.inputs[1];
  const int32_t* positions = call.inputs[2].data_as<int32_t>();
  const int64_t rotary_dim = cache.dim(1);
  // The entry point (cpp/ops/rope.cpp) has checked every row index against the cache.
  // Rotating a token is a few hundred multiplies: chunks of at least 16K values.
  const int64_t values = std::max<int64_t>(1, x.dim(1) * x.dim(2));
  ParallelFor(x.dim(0), std::max<int64_t>(1, 16384 / values), [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(x.dim(2)));
    for (int64_t t = begin; t < end; ++t)
      RotateToken(x, call.outputs[0], t, cache.data_as<float>() + positions[t] * rotary_dim,
                  rotary_dim, call.param<ops::RopeFromCacheParams>().neox, row);
  });
  return true;
}

METALRT_REGISTER_OP_PROVIDER("rope_neox", DeviceType::kCPU, ProviderTier::kOracle, Rope<true>);
METALRT_REGISTER_OP_PROVIDER("rope_interleaved", DeviceType::kCPU, ProviderTier::kOracle,
                             Rope<false>);
METALRT_REGISTER_OP_PROVIDER("rope_cos_sin_cache", DeviceType::kCPU, ProviderTier::kOracle,
                             RopeCosSinCache);
METALRT_REGISTER_OP_PROVIDER("rope_from_cache", DeviceType::kCPU, ProviderTier::kOracle,
                             RopeFromCache);

}  // namespace
}  // namespace metalrt::cpu
