// Batches and float64 references of the Gated-DeltaNet op gates (the CPU oracle's
// tests/cpp/test_linear_attention.cpp and the Metal kernels'
// test_metal_linear_attention.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "metalrt/ops.h"
#include "op_testing.h"

namespace metalrt::testing {

// Requests' token counts -> query_start [R + 1].
inline std::vector<int32_t> StartsOf(const std::vector<int32_t>& lens) {
  std::vector<int32_t> starts{0};
  for (int32_t len : lens) starts.push_back(starts.back() + len);
  return starts;
}

// Distinct slots of a pool of 2R + 1, in shuffled order, so requests never sit in
// consecutive slots and the pool has slots no request owns.
inline std::vector<int32_t> ScatteredSlots(size_t requests, uint32_t seed) {
  std::vector<int32_t> pool(2 * requests + 1);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  pool.resize(requests);
  return pool;
}

struct DeltaGeometry {
  int64_t hk, dk, hv, dv;
  int64_t width() const { return 2 * hk * dk + hv * dv; }
};

inline const DeltaGeometry kQwen3Next{16, 128, 32, 128};
// Legal but unusual: as many value heads as key heads with Dk < Dv; Dk > Dv with r = 2.
inline const DeltaGeometry kEqualHeadsDk64Dv128{2, 64, 2, 128};
inline const DeltaGeometry kRatio2Dk128Dv64{2, 128, 4, 64};

// The op's parameters for a geometry, scale Dk^-0.5.
inline ops::GatedDeltaRuleParams DeltaParams(const DeltaGeometry& g, ops::DeltaRuleMode mode) {
  return {g.hk, g.dk, g.hv, g.dv, static_cast<float>(1.0 / std::sqrt(double(g.dk))), mode};
}

// Inputs of gated_delta_rule for requests of `lens` tokens: mixed_qkv uniform in [-1, 1)
// rounded to dtype; g = -exp(A_log) softplus(a + 1) with A = exp(A_log) uniform in
// [1, 16) per head and a uniform in [-4, 4) (a_shift added for fast-decaying heads);
// beta = sigmoid(uniform [-3, 3)); every slot of the state pool uniform in [-0.5, 0.5).
struct DeltaBatch {
  DeltaGeometry geometry;
  std::vector<int32_t> lens, starts, slots;
  Tensor qkv, g, beta, state, query_start, state_slots;
};

inline DeltaBatch MakeDeltaBatch(const DeltaGeometry& geo, const std::vector<int32_t>& lens,
                                 DType dtype, uint32_t seed, double a_shift = 0.0) {
  DeltaBatch b;
  b.geometry = geo;
  b.lens = lens;
  b.starts = StartsOf(lens);
  b.slots = ScatteredSlots(lens.size(), seed);
  const int64_t tokens = b.starts.back(), pool = static_cast<int64_t>(2 * lens.size() + 1);
  b.qkv = MakeFloat({tokens, geo.width()}, dtype,
                    RandomValues(static_cast<size_t>(tokens * geo.width()), seed + 1));
  const std::vector<double> big_a = RandomValues(static_cast<size_t>(geo.hv), seed + 2, 1.0, 16.0);
  const std::vector<double> a = RandomValues(static_cast<size_t>(tokens * geo.hv), seed + 3, -4.0, 4.0);
  const std::vector<double> braw = RandomValues(a.size(), seed + 4, -3.0, 3.0);
  std::vector<double> g(a.size()), beta(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i] + a_shift + 1.0;
    g[i] = -big_a[i % static_cast<size_t>(geo.hv)] * (x > 20 ? x : std::log1p(std::exp(x)));
    beta[i] = 1.0 / (1.0 + std::exp(-braw[i]));
  }
  b.g = MakeFloat({tokens, geo.hv}, DType::kF32, g);
  b.beta = MakeFloat({tokens, geo.hv}, DType::kF32, beta);
  b.state = MakeFloat({pool, geo.hv, geo.dk, geo.dv}, DType::kF32,
                      RandomValues(static_cast<size_t>(pool * geo.hv * geo.dk * geo.dv), seed + 5, -0.5, 0.5));
  b.query_start = MakeInts<int32_t>({static_cast<int64_t>(b.starts.size())}, DType::kI32, b.starts);
  b.state_slots = MakeInts<int32_t>({static_cast<int64_t>(b.slots.size())}, DType::kI32, b.slots);
  return b;
}

struct DeltaReference {
  std::vector<double> o;       // [T, Hv, Dv]
  std::vector<double> state;   // the whole pool after the call
};

// The recurrent gated delta rule in float64 over the stored input values (the
// definition in metalrt/linear_attention_ops.h), from the batch's state pool.
inline DeltaReference DeltaRuleReference(const DeltaBatch& b, double scale) {
  const DeltaGeometry& geo = b.geometry;
  const std::vector<double> qkv = ReadFloat(b.qkv), g = ReadFloat(b.g), beta = ReadFloat(b.beta);
  DeltaReference ref{std::vector<double>(static_cast<size_t>(b.starts.back() * geo.hv * geo.dv)),
                     ReadFloat(b.state)};
  const int64_t dk = geo.dk, dv = geo.dv, width = geo.width();
  auto normalized = [&](int64_t offset, double factor) {
    double ss = 0;
    for (int64_t i = 0; i < dk; ++i) ss += qkv[offset + i] * qkv[offset + i];
    std::vector<double> x(static_cast<size_t>(dk));
    for (int64_t i = 0; i < dk; ++i) x[i] = qkv[offset + i] / std::sqrt(ss + 1e-6) * factor;
    return x;
  };
  for (size_t r = 0; r < b.lens.size(); ++r)
    for (int64_t h = 0; h < geo.hv; ++h) {
      double* s = &ref.state[static_cast<size_t>((b.slots[r] * geo.hv + h) * dk * dv)];
      const int64_t kh = h / (geo.hv / geo.hk);
      for (int64_t t = b.starts[r]; t < b.starts[r + 1]; ++t) {
        const std::vector<double> q = normalized(t * width + kh * dk, scale);
        const std::vector<double> k = normalized(t * width + (geo.hk + kh) * dk, 1.0);
        const double* v = &qkv[static_cast<size_t>(t * width + 2 * geo.hk * dk + h * dv)];
        const double decay = std::exp(g[t * geo.hv + h]), bt = beta[t * geo.hv + h];
        for (int64_t i = 0; i < dk * dv; ++i) s[i] *= decay;
        for (int64_t d = 0; d < dv; ++d) {
          double m = 0;
          for (int64_t i = 0; i < dk; ++i) m += s[i * dv + d] * k[i];
          const double delta = bt * (v[d] - m);
          for (int64_t i = 0; i < dk; ++i) s[i * dv + d] += k[i] * delta;
        }
        for (int64_t d = 0; d < dv; ++d) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += s[i * dv + d] * q[i];
          ref.o[static_cast<size_t>((t * geo.hv + h) * dv + d)] = o;
        }
      }
    }
  return ref;
}

// causal_conv1d in float64 over the stored values: y [T, C] and the state pool after.
struct ConvReference {
  std::vector<double> y, state;
};

inline ConvReference CausalConvReference(const Tensor& x, const Tensor& weight, const Tensor& state,
                                         const std::vector<int32_t>& starts,
                                         const std::vector<int32_t>& slots, bool silu) {
  const int64_t channels = x.dim(1), width = weight.dim(1), hist = width - 1;
  const std::vector<double> xs = ReadFloat(x), w = ReadFloat(weight);
  ConvReference ref{std::vector<double>(xs.size()), ReadFloat(state)};
  for (size_t r = 0; r + 1 < starts.size(); ++r) {
    const int64_t len = starts[r + 1] - starts[r];
    if (len == 0) continue;
    for (int64_t c = 0; c < channels; ++c) {
      double* st = &ref.state[static_cast<size_t>((slots[r] * channels + c) * hist)];
      std::vector<double> xpad(st, st + hist);
      for (int64_t t = 0; t < len; ++t) xpad.push_back(xs[static_cast<size_t>((starts[r] + t) * channels + c)]);
      for (int64_t t = 0; t < len; ++t) {
        double acc = 0;
        for (int64_t j = 0; j < width; ++j) acc += w[c * width + j] * xpad[t + j];
        ref.y[static_cast<size_t>((starts[r] + t) * channels + c)] = silu ? acc / (1 + std::exp(-acc)) : acc;
      }
      std::copy(xpad.end() - hist, xpad.end(), st);
    }
  }
  return ref;
}

struct DeltaRun {
  std::vector<double> o, state;   // the output and the whole state pool after the call
};

// Runs gated_delta_rule on `device` over copies of the batch (the pool is mutated),
// the output NaN-poisoned.
inline DeltaRun RunDelta(const DeltaBatch& b, ops::DeltaRuleMode mode, DeviceType device) {
  auto on = [&](const Tensor& t) { return CopyToDevice(t, device); };
  const Tensor state = on(b.state);
  const Tensor out = on(Poisoned({b.qkv.dim(0), b.geometry.hv, b.geometry.dv}, b.qkv.dtype()));
  ops::GatedDeltaRule(on(b.qkv), on(b.g), on(b.beta), state, on(b.query_start), on(b.state_slots),
                      DeltaParams(b.geometry, mode), out);
  return {ReadFloat(CopyToDevice(out, DeviceType::kCPU)), ReadFloat(CopyToDevice(state, DeviceType::kCPU))};
}

inline double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Against a reference in f32 (or the dtype's rounding): NMSE, and every element within
// 2e-5 of the largest reference value (the chunked solve mixes a chunk's rows, so the
// error scales with the rows, not the element).
inline void CheckDelta(const std::vector<double>& got, const std::vector<double>& ref, DType dtype,
                       const std::string& what) {
  const double u = UnitRoundoff(dtype);
  CHECK_MESSAGE(Nmse(got, ref) <= (dtype == DType::kF32 ? 1e-9 : 8 * u * u), what);
  CheckClose(got, ref, {2 * u, 2e-5 * MaxAbs(ref)}, what);
}

}  // namespace metalrt::testing
