// Gates of cast: every pair of the 8 dtypes against references written here.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct IntRange {
  __int128 lo, hi;
  int bits;
  bool is_signed;
};

IntRange RangeOf(DType d) {
  switch (d) {
    case DType::kI8: return {-128, 127, 8, true};
    case DType::kU8: return {0, 255, 8, false};
    case DType::kI32: return {INT32_MIN, INT32_MAX, 32, true};
    case DType::kU32: return {0, UINT32_MAX, 32, false};
    default: return {INT64_MIN, INT64_MAX, 64, true};
  }
}

int64_t ReadInt(const Tensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.data()) + i * DTypeSize(t.dtype());
  switch (t.dtype()) {
    case DType::kI8: return *reinterpret_cast<const int8_t*>(p);
    case DType::kU8: return *reinterpret_cast<const uint8_t*>(p);
    case DType::kI32: return *reinterpret_cast<const int32_t*>(p);
    case DType::kU32: return *reinterpret_cast<const uint32_t*>(p);
    default: return *reinterpret_cast<const int64_t*>(p);
  }
}

Tensor MakeIntTensor(DType d, const std::vector<int64_t>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, d, DeviceType::kCPU);
  for (size_t i = 0; i < v.size(); ++i) {
    char* p = static_cast<char*>(t.data()) + i * DTypeSize(d);
    switch (d) {
      case DType::kI8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v[i]); break;
      case DType::kU8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v[i]); break;
      case DType::kI32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v[i]); break;
      case DType::kU32: *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v[i]); break;
      default: *reinterpret_cast<int64_t*>(p) = v[i];
    }
  }
  return t;
}

// Every finite value of a 16-bit float dtype in increasing order is found by scanning
// bit patterns; the correctly rounded value of an integer is the nearest of them (ties
// to the even bit pattern), found by search: an independent route to the answer.
double NearestFloat(int64_t v, DType d) {
  if (d == DType::kF32) {
    if (v > -(1 << 24) && v < (1 << 24)) return static_cast<double>(v);   // exact
    // Otherwise the neighbours of (float)v are integers: compare them exactly in __int128.
    const float guess = static_cast<float>(v);
    float best = guess;
    __int128 best_err = -1;
    for (float c : {std::nextafter(guess, -INFINITY), guess, std::nextafter(guess, INFINITY)}) {
      const __int128 err = static_cast<__int128>(c) - v;
      const __int128 abs_err = err < 0 ? -err : err;
      uint32_t bits, best_bits;
      std::memcpy(&bits, &c, 4);
      std::memcpy(&best_bits, &best, 4);
      if (best_err < 0 || abs_err < best_err || (abs_err == best_err && (bits & 1) == 0 && (best_bits & 1))) {
        best = c, best_err = abs_err;
      }
    }
    return best;
  }
  // 16-bit formats: scan all finite positive patterns for the nearest to |v|.
  const long double target = std::fabs(static_cast<long double>(v));
  long double best = 0;
  long double best_err = target;
  uint16_t best_bits = 0;
  for (uint32_t bits = 0; bits < 0x7f80; ++bits) {
    const double c = d == DType::kF16 ? F16ToF32(static_cast<uint16_t>(bits))
                                      : BF16ToF32(static_cast<uint16_t>(bits));
    if (std::isinf(c) || std::isnan(c)) break;
    const long double err = std::fabs(static_cast<long double>(c) - target);
    if (err < best_err || (err == best_err && (bits & 1) == 0 && (best_bits & 1) == 1)) {
      best = c, best_err = err, best_bits = static_cast<uint16_t>(bits);
    }
  }
  // Beyond the largest finite value by half an ulp or more, IEEE rounds to infinity.
  const double max_finite = d == DType::kF16 ? 65504.0 : 3.3895313892515355e38;
  const double half_ulp = d == DType::kF16 ? 16.0 : std::ldexp(1.0, 127 - 8);
  if (target >= max_finite + half_ulp) best = INFINITY;
  return v < 0 ? -static_cast<double>(best) : static_cast<double>(best);
}

}  // namespace

TEST_CASE("cast float -> float: round to nearest even through exact f32, NaN and Inf kept") {
  for (DType from : kFloatDTypes) {
    for (DType to : kFloatDTypes) {
      CAPTURE(std::string(DTypeName(from)));
      CAPTURE(std::string(DTypeName(to)));
      std::vector<double> x = RandomValuesOf(from, 33, 500, -70000.0, 70000.0);
      const double specials[] = {0.0, -0.0, 1.0 + std::ldexp(1.0, -11), 1.0 + std::ldexp(3.0, -11),
                                 std::ldexp(1.0, -24), std::ldexp(1.0, -25), 65519.0, 65520.0,
                                 INFINITY, -INFINITY, std::numeric_limits<double>::quiet_NaN()};
      for (double s : specials) x.push_back(RoundTo(s, from));
      const Shape shape{static_cast<int64_t>(x.size())};
      Tensor out = Poisoned(shape, to);
      ops::Cast(MakeFloat(shape, from, x), to, out);
      const std::vector<double> got = ReadFloat(out);
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(x[i]);
        if (std::isnan(x[i])) CHECK(std::isnan(got[i]));
        else CHECK(got[i] == RoundTo(x[i], to));   // exact: one rounding of an f32-exact value
      }
    }
  }
}

TEST_CASE("cast int -> float: correctly rounded (no double rounding through f32)") {
  const std::vector<int64_t> values = {
      0, 1, -1, 127, -128, 255, 256, 2049, 2051, 65504, 65519, 65520, -65520, 100000,
      (1 << 24) + 1, (1 << 24) + 3, (int64_t{1} << 24) + (1 << 16) + 1,   // bf16 double-rounding trap
      (int64_t{1} << 24) + (1 << 16), INT32_MAX, INT32_MIN, UINT32_MAX,
      (int64_t{1} << 53) + 1, (int64_t{1} << 40) + (int64_t{1} << 16) + 1, INT64_MAX, INT64_MIN};
  for (DType from : {DType::kI8, DType::kU8, DType::kI32, DType::kU32, DType::kI64}) {
    const IntRange r = RangeOf(from);
    std::vector<int64_t> v;
    for (int64_t x : values)
      if (x >= r.lo && x <= r.hi) v.push_back(x);
    for (DType to : kFloatDTypes) {
      CAPTURE(std::string(DTypeName(from)));
      CAPTURE(std::string(DTypeName(to)));
      const Shape shape{static_cast<int64_t>(v.size())};
      Tensor out = Poisoned(shape, to);
      ops::Cast(MakeIntTensor(from, v), to, out);
      const std::vector<double> got = ReadFloat(out);
      for (size_t i = 0; i < v.size(); ++i) {
        CAPTURE(v[i]);
        CHECK(got[i] == NearestFloat(v[i], to));
      }
    }
  }
}

TEST_CASE("cast float -> int: truncation toward zero, saturation, NaN -> 0") {
  const std::vector<double> values = {0.0, -0.0, 0.5, -0.5, 1.9, -1.9, 127.9, 128.0, -128.9, -129.5,
                                      255.5, 256.0, 65504.0, -65504.0, 3e9, -3e9, 4294967296.0,
                                      9.3e18, -9.3e18, 1e30, INFINITY, -INFINITY,
                                      std::numeric_limits<double>::quiet_NaN()};
  for (DType from : kFloatDTypes) {
    std::vector<double> x;
    for (double v : values) x.push_back(RoundTo(v, from));
    for (DType to : {DType::kI8, DType::kU8, DType::kI32, DType::kU32, DType::kI64}) {
      CAPTURE(std::string(DTypeName(from)));
      CAPTURE(std::string(DTypeName(to)));
      const IntRange r = RangeOf(to);
      const Shape shape{static_cast<int64_t>(x.size())};
      Tensor out = Tensor::Empty(shape, to, DeviceType::kCPU);
      Poison(out);
      ops::Cast(MakeFloat(shape, from, x), to, out);
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(x[i]);
        __int128 want;
        if (std::isnan(x[i])) want = 0;
        else if (x[i] >= static_cast<double>(r.hi)) want = r.hi;
        else if (x[i] <= static_cast<double>(r.lo)) want = r.lo;
        else want = static_cast<__int128>(std::trunc(x[i]));
        CHECK(ReadInt(out, static_cast<int64_t>(i)) == static_cast<int64_t>(want));
      }
    }
  }
}

TEST_CASE("cast int -> int: two's-complement wraparound; same dtype is a byte copy") {
  const std::vector<int64_t> values = {0, 1, -1, 127, 128, -129, 255, 256, 65537, INT32_MAX,
                                       int64_t{INT32_MAX} + 1, INT32_MIN, UINT32_MAX,
                                       int64_t{UINT32_MAX} + 2, INT64_MAX, INT64_MIN};
  for (DType from : {DType::kI8, DType::kU8, DType::kI32, DType::kU32, DType::kI64}) {
    const IntRange rf = RangeOf(from);
    std::vector<int64_t> v;
    for (int64_t x : values)
      if (x >= rf.lo && x <= rf.hi) v.push_back(x);
    for (DType to : {DType::kI8, DType::kU8, DType::kI32, DType::kU32, DType::kI64}) {
      CAPTURE(std::string(DTypeName(from)));
      CAPTURE(std::string(DTypeName(to)));
      const IntRange r = RangeOf(to);
      Tensor out = Tensor::Empty({static_cast<int64_t>(v.size())}, to, DeviceType::kCPU);
      Poison(out);
      ops::Cast(MakeIntTensor(from, v), to, out);
      const __int128 modulus = static_cast<__int128>(1) << r.bits;
      for (size_t i = 0; i < v.size(); ++i) {
        __int128 m = ((static_cast<__int128>(v[i]) % modulus) + modulus) % modulus;
        if (r.is_signed && m > r.hi) m -= modulus;
        CHECK(ReadInt(out, static_cast<int64_t>(i)) == static_cast<int64_t>(m));
      }
    }
  }
  // Same dtype: NaN payloads survive (a byte copy, not a round trip through f32).
  Tensor nan = Tensor::Empty({1}, DType::kF16, DeviceType::kCPU);
  *nan.data_as<uint16_t>() = 0x7d01;   // signalling-NaN pattern
  CHECK(*ops::Cast(nan, DType::kF16).data_as<uint16_t>() == 0x7d01);
  for (DType d : kAllDTypes) {
    CAPTURE(std::string(DTypeName(d)));
    Tensor x = Tensor::Empty({9}, d, DeviceType::kCPU);
    for (size_t i = 0; i < x.nbytes(); ++i) static_cast<uint8_t*>(x.data())[i] = static_cast<uint8_t>(37 * i + 11);
    CHECK(Bytes(ops::Cast(x, d)) == Bytes(x));
  }
}

TEST_CASE("cast: bad inputs raise with the op name") {
  Tensor x = Tensor::Empty({2, 4}, DType::kF32, DeviceType::kCPU);
  CheckThrows<std::invalid_argument>([&] { ops::Cast(x, DType::kF16, Tensor::Empty({4, 2}, DType::kF16, DeviceType::kCPU)); }, "[cast] ");
  CheckThrows<TypeError>([&] { ops::Cast(x, DType::kF16, Tensor::Empty({2, 4}, DType::kBF16, DeviceType::kCPU)); }, "[cast] ");
  CheckThrows<std::invalid_argument>([&] { ops::Cast(x.Slice(1, 0, 2), DType::kF16); }, "[cast] ");
  CheckThrows<std::invalid_argument>([&] { ops::Cast(x, DType::kF32, x); }, "[cast] ");
  CheckThrows<std::invalid_argument>([&] { ops::Cast(Tensor(), DType::kF32); }, "[cast] ");
}
