// Helpers for the op gates: build CPU tensors from float64 values, read them back,
// poison outputs, and measure errors against float64 references.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "metalrt/dtype.h"
#include "metalrt/tensor.h"

namespace metalrt::testing {

// Uniform values in [lo, hi) from a fixed seed, so every run tests the same numbers.
inline std::vector<double> RandomValues(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// A CPU tensor of a float dtype holding `values` rounded to that dtype.
inline Tensor MakeFloat(const Shape& shape, DType dtype, const std::vector<double>& values) {
  Tensor t = Tensor::Empty(shape, dtype, DeviceType::kCPU);
  for (int64_t i = 0; i < t.numel(); ++i)
    StoreFromF32(t.data(), dtype, i, static_cast<float>(values.at(static_cast<size_t>(i))));
  return t;
}

template <typename T>
Tensor MakeInts(const Shape& shape, DType dtype, const std::vector<T>& values) {
  Tensor t = Tensor::Empty(shape, dtype, DeviceType::kCPU);
  REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
  REQUIRE(DTypeSize(dtype) == sizeof(T));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
  return t;
}

// The elements of a contiguous float tensor as float64 (exactly the stored values).
inline std::vector<double> ReadFloat(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = LoadAsF32(t.data(), t.dtype(), i);
  return v;
}

inline std::vector<uint8_t> Bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}

// Fills a tensor so an op that never writes it cannot pass: NaN for floats, 0xFF bytes
// (-1 for signed ints) otherwise.
inline void Poison(const Tensor& t) {
  if (IsFloating(t.dtype())) {
    for (int64_t i = 0; i < t.numel(); ++i)
      StoreFromF32(t.data(), t.dtype(), i, std::numeric_limits<float>::quiet_NaN());
  } else {
    std::memset(t.data(), 0xFF, t.nbytes());
  }
}

// Normalised mean squared error sum((got - ref)^2) / sum(ref^2); NaN in `got` gives NaN.
inline double Nmse(const std::vector<double>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return err / norm;
}

// max |got - ref| / max(|ref|, floor); NaN in `got` gives NaN.
inline double MaxRelError(const std::vector<double>& got, const std::vector<double>& ref,
                          double floor = 1e-3) {
  REQUIRE(got.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(got[i] - ref[i]) / std::max(std::abs(ref[i]), floor);
    if (!(e <= worst)) worst = e;   // NaN propagates
  }
  return worst;
}

// Unit roundoff of a float dtype (half an ulp at 1).
inline double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace metalrt::testing
