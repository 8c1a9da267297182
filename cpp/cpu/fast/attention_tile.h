// The per-ISA inner loops of the fast CPU decode attention (decode_attention.cpp): the
// scores of a run of cached keys against a GQA group's queries, and the weighted sum
// of a run of cached values. Each kernel file (attention_<isa>.cpp, compiled with its
// own target flags in fast.cmake) instantiates these templates with its own vector
// policy V from an unnamed namespace, so every instantiation has internal linkage and
// no instruction of one ISA can reach another ISA's caller (as gemv_kernel.h).
//
// V provides kWidth floats per vector and Zero, Set1, Load, LoadPartial (the first n <
// kWidth floats, the rest 0), Fma(a, b, acc) = a * b + acc, Sum (a horizontal add),
// Store, StorePartial, Add, Max, MaxOf (a horizontal max) and Exp (expf of every lane,
// within 2 ulp, 0 below -87.3; see ExpPoly).
#pragma once
#include <cstdint>

#include "cpu/fast/attention_kernels.h"
#include "cpu/fast/exp_poly.h"

namespace metalrt::cpu::fast {
namespace {

// s[h * s_stride + j] = scale * (q[h] . k_j), k_j = k + j * k_stride, h < group, j < count.
template <class V>
void TileScores(const AttentionTileArgs& a, const float* k, int64_t count, float* s) {
  const int64_t full = a.head_dim - a.head_dim % V::kWidth, tail = a.head_dim - full;
  for (int64_t j = 0; j < count; ++j) {
    const float* kj = k + j * a.kv_stride;
    for (int64_t h = 0; h < a.group; ++h) {
      const float* qh = a.q + h * a.head_dim;
      auto acc = V::Zero();
      for (int64_t d = 0; d < full; d += V::kWidth) acc = V::Fma(V::Load(qh + d), V::Load(kj + d), acc);
      if (tail > 0) acc = V::Fma(V::LoadPartial(qh + full, tail), V::LoadPartial(kj + full, tail), acc);
      s[h * a.s_stride + j] = V::Sum(acc) * a.scale;
    }
  }
}

// o[h][:] += sum over j ascending of w[h * s_stride + j] * v_j, v_j = v + j * kv_stride.
template <class V>
void TileAccumulate(const AttentionTileArgs& a, const float* w, const float* v, int64_t count, float* o) {
  const int64_t full = a.head_dim - a.head_dim % V::kWidth, tail = a.head_dim - full;
  for (int64_t h = 0; h < a.group; ++h) {
    float* oh = o + h * a.head_dim;
    const float* wh = w + h * a.s_stride;
    for (int64_t d = 0; d < full; d += V::kWidth) {
      auto acc = V::Load(oh + d);
      for (int64_t j = 0; j < count; ++j) acc = V::Fma(V::Set1(wh[j]), V::Load(v + j * a.kv_stride + d), acc);
      V::Store(oh + d, acc);
    }
    if (tail > 0) {
      auto acc = V::LoadPartial(oh + full, tail);
      for (int64_t j = 0; j < count; ++j)
        acc = V::Fma(V::Set1(wh[j]), V::LoadPartial(v + j * a.kv_stride + full, tail), acc);
      V::StorePartial(oh + full, tail, acc);
    }
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
