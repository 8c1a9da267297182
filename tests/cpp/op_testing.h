// Helpers for the op gates: build CPU tensors from float64 values, read them back,
// poison outputs, measure errors against float64 references with per-dtype bars, and
// check error messages.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "metalrt/dtype.h"
#include "metalrt/errors.h"
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

// A CPU tensor of any dtype filled with random bytes from a fixed seed: every bit
// pattern (NaN payloads, subnormals, extremes) for the gates of bit-exact copies.
inline Tensor RandomBits(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::Empty(shape, dtype, DeviceType::kCPU);
  std::mt19937 gen(seed);
  auto* bytes = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(gen() >> 24);
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

constexpr DType kFloatDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8,
                                DType::kU8,  DType::kI32, DType::kI64,  DType::kU32};

inline int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The value a float tensor of `dtype` holds for x: rounded to f32, then to dtype
// (both nearest even).
inline double RoundTo(double x, DType dtype) {
  float v = static_cast<float>(x);
  if (dtype == DType::kF16) v = F16ToF32(F32ToF16(v));
  if (dtype == DType::kBF16) v = BF16ToF32(F32ToBF16(v));
  return v;
}

// RandomValues already rounded to dtype, so a tensor made from them holds them exactly
// and a float64 reference can use them directly.
inline std::vector<double> RandomValuesOf(DType dtype, size_t n, uint32_t seed, double lo = -1.0,
                                          double hi = 1.0) {
  std::vector<double> v = RandomValues(n, seed, lo, hi);
  for (double& x : v) x = RoundTo(x, dtype);
  return v;
}

// A new CPU tensor of a float dtype, poisoned with NaN.
inline Tensor Poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Empty(shape, dtype, DeviceType::kCPU);
  Poison(t);
  return t;
}

// |got - ref| <= rel * |ref| + abs for every element.
struct Bar {
  double rel;
  double abs;
};

// Rounding a float64 result to f16/bf16 costs up to half an ulp (2^-11, 2^-8 relative);
// the bars add the f32 computation's own error and an absolute floor for subnormals.
inline Bar RoundingBar(DType dtype, Bar f32_bar) {
  if (dtype == DType::kF16) return {f32_bar.rel + 1.0 / 2048, std::max(f32_bar.abs, 6.0e-8)};
  if (dtype == DType::kBF16) return {f32_bar.rel + 1.0 / 256, std::max(f32_bar.abs, 1e-38)};
  return f32_bar;
}

// CHECKs every element against its bar; reports the count and the worst element.
inline void CheckClose(const std::vector<double>& got, const std::vector<double>& ref, Bar bar,
                       const std::string& what) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double limit = bar.rel * std::fabs(ref[i]) + bar.abs;
    const double err = std::fabs(got[i] - ref[i]);
    const bool ok = err <= limit || (std::isnan(got[i]) && std::isnan(ref[i])) ||
                    (std::isinf(ref[i]) && got[i] == ref[i]);
    if (!ok) ++bad;
    const double excess = std::isnan(err) ? INFINITY : err / (limit > 0 ? limit : 1e-300);
    if (!ok && excess > worst_excess) { worst_excess = excess; worst = i; }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements out of bar (rel "
                                << bar.rel << ", abs " << bar.abs << "); worst [" << worst
                                << "] got " << got[worst] << ", want " << ref[worst]);
}

// CHECKs that f throws E with a message starting with `prefix` (e.g. "[add] ").
template <typename E, typename F>
void CheckThrows(F&& f, const std::string& prefix) {
  bool thrown = false;
  try {
    f();
  } catch (const E& e) {
    thrown = true;
    CHECK_MESSAGE(std::string(e.what()).rfind(prefix, 0) == 0,
                  "message '" << std::string(e.what()) << "' does not start with '" << prefix << "'");
  } catch (const std::exception& e) {
    thrown = true;
    FAIL_CHECK("wrong exception type for '" << prefix << "': " << std::string(e.what()));
  }
  CHECK_MESSAGE(thrown, "expected an exception starting with '" << prefix << "'");
}

}  // namespace metalrt::testing
