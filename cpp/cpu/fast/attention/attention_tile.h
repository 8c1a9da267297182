// The per-ISA inner loops of the fast CPU decode attention (decode_attention.cpp): the
// scores of a run of cached keys against a GQA group's queries, and the weighted sum
// of a run of cached values. Each kernel file (attention_<isa>.cpp, compiled with its
// own target flags in fast.cmake) instantiates these templates with its own vector
// policy V from an unnamed namespace, so every instantiation has internal linkage and
// no instruction of one ISA can reach another ISA's caller (as gemv_kernel.h).
//
// V provides Vec, kWidth floats per vector, and Zero, Set1, Load, LoadPartial (the first
// n < kWidth floats, the rest 0), Fma(a, b, acc) = a * b + acc, Mul, Sum (a horizontal
// add), SumEach (lane i of the result = Sum(a[i]), for kWidth vectors a), Store,
// StorePartial, Add, Max, MaxOf (a horizontal max) and Exp (expf of every lane, within 2
// ulp, 0 below -87.3; see ExpPoly).
#pragma once
#include <cstdint>

#include "cpu/fast/attention/attention_kernels.h"
#include "cpu/fast/simd/exp_poly.h"

namespace metalrt::cpu::fast {
namespace {

// s[h * s_stride + j] = scale * (q[h] . k_j), k_j = k + j * k_stride, h < group, j < count.
// kWidth keys at a time, one accumulator each, so that a head's query stays in registers
// over them and their kWidth dots are reduced together (SumEach) into one vector of
// scores, not by one horizontal sum per dot (~2x fewer instructions); rows past `count`
// are never read.
template <class V>
void TileScores(const AttentionTileArgs& a, const float* k, int64_t count, float* s) {
  constexpr int64_t W = V::kWidth;
  const int64_t full = a.head_dim - a.head_dim % W, tail = a.head_dim - full;
  const auto scale = V::Set1(a.scale);
  for (int64_t h = 0; h < a.group; ++h) {
    const float* qh = a.q + h * a.head_dim;
    for (int64_t j0 = 0; j0 < count; j0 += W) {
      const int64_t n = count - j0 < W ? count - j0 : W;
      const float* kj = k + j0 * a.kv_stride;
      typename V::Vec acc[W];
#pragma GCC unroll 16
      for (int64_t t = 0; t < W; ++t) acc[t] = V::Zero();
      for (int64_t d = 0; d < full; d += W) {
        const auto qd = V::Load(qh + d);
#pragma GCC unroll 16
        for (int64_t t = 0; t < W; ++t)
          if (t < n) acc[t] = V::Fma(qd, V::Load(kj + t * a.kv_stride + d), acc[t]);
      }
      if (tail > 0) {
        const auto qd = V::LoadPartial(qh + full, tail);
#pragma GCC unroll 16
        for (int64_t t = 0; t < W; ++t)
          if (t < n) acc[t] = V::Fma(qd, V::LoadPartial(kj + t * a.kv_stride + full, tail), acc[t]);
      }
      const auto dots = V::Mul(V::SumEach(acc), scale);
      if (n == W) V::Store(s + h * a.s_stride + j0, dots);
      else V::StorePartial(s + h * a.s_stride + j0, n, dots);
    }
  }
}

// o[d0, d0 + kVecs * kWidth) += sum over j ascending of w[j] * v_j: kVecs independent FMA
// chains in registers (one chain at a time waits on the FMA's latency). kFull: every
// lane is inside head_dim, else `lanes` (< kVecs * kWidth) of them are.
constexpr int64_t kVecs = 4;
template <class V, bool kFull>
void AccumulateSpan(const AttentionTileArgs& a, const float* w, const float* v, int64_t count, float* o,
                    int64_t lanes) {
  constexpr int64_t W = V::kWidth;
  auto load = [lanes](const float* p, int64_t i) {
    if (kFull || lanes >= (i + 1) * W) return V::Load(p + i * W);
    return lanes > i * W ? V::LoadPartial(p + i * W, lanes - i * W) : V::Zero();
  };
  typename V::Vec acc[kVecs];
  for (int64_t i = 0; i < kVecs; ++i) acc[i] = load(o, i);
  for (int64_t j = 0; j < count; ++j) {
    const auto wj = V::Set1(w[j]);
    for (int64_t i = 0; i < kVecs; ++i) acc[i] = V::Fma(wj, load(v + j * a.kv_stride, i), acc[i]);
  }
  for (int64_t i = 0; i < kVecs; ++i) {
    if (kFull || lanes >= (i + 1) * W) V::Store(o + i * W, acc[i]);
    else if (lanes > i * W) V::StorePartial(o + i * W, lanes - i * W, acc[i]);
  }
}

// o[h][:] += sum over j ascending of w[h * s_stride + j] * v_j, v_j = v + j * kv_stride.
template <class V>
void TileAccumulate(const AttentionTileArgs& a, const float* w, const float* v, int64_t count, float* o) {
  constexpr int64_t span = kVecs * V::kWidth;
  for (int64_t h = 0; h < a.group; ++h) {
    float* oh = o + h * a.head_dim;
    const float* wh = w + h * a.s_stride;
    int64_t d = 0;
    for (; d + span <= a.head_dim; d += span) AccumulateSpan<V, true>(a, wh, v + d, count, oh + d, span);
    if (d < a.head_dim) AccumulateSpan<V, false>(a, wh, v + d, count, oh + d, a.head_dim - d);
  }
}

// s[0, n) <- w_j = exp(s_j - m) with m = max s, n <= cap; returns m and sets *l = sum w.
// s has room for cap values, a multiple of kWidth: the tail is padded with -inf so
// every pass runs on whole vectors (exp(-inf) = 0 adds nothing).
template <class V>
float TileSoftmax(float* s, int64_t n, int64_t cap, float* l) {
  const int64_t padded = (n + V::kWidth - 1) / V::kWidth * V::kWidth;
  for (int64_t j = n; j < padded && j < cap; ++j) s[j] = -__builtin_inff();
  auto vm = V::Set1(-__builtin_inff());
  for (int64_t j = 0; j < padded; j += V::kWidth) vm = V::Max(vm, V::Load(s + j));
  const float m = V::MaxOf(vm);
  auto vl = V::Zero();
  const auto neg_m = V::Set1(-m);
  for (int64_t j = 0; j < padded; j += V::kWidth) {
    const auto w = V::Exp(V::Add(V::Load(s + j), neg_m));
    V::Store(s + j, w);
    vl = V::Add(vl, w);
  }
  *l = V::Sum(vl);
  return m;
}

template <class V>
constexpr AttentionKernels KernelsOf() {
  return {TileScores<V>, TileAccumulate<V>, TileSoftmax<V>};
}

}  // namespace
}  // namespace metalrt::cpu::fast
