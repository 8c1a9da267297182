// Gates of the MSL shim (metal/shim) that need no runtime: half and bfloat
// rounding per operation against float64 references, vector layout, swizzles,
// constructors and operators, metal:: math (incl. precise:: accuracy), integer
// functions, as_type, and atomics hammered from several std::threads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "as_type.h"
#include "float16_reference.h"
#include "atomic.h"
#include "integer.h"
#include "math_functions.h"
#include "numeric_limits.h"

using namespace metal;
using namespace float16_reference;

// The binary16 encoding of a half (as_type, MSL §2.13).
static uint16_t HalfBits(half h) { return as_type<ushort>(h); }


TEST_CASE("half: every bit pattern converts to float exactly") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = detail::half_from_bits(uint16_t(b));
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) {
      CHECK(std::isnan(f));
    } else {
      REQUIRE(double(f) == HalfValue(uint16_t(b)));
      REQUIRE(HalfBits(half(f)) == b);   // and back, bit-exact
    }
  }
}

TEST_CASE("half: float -> half rounds to nearest even (ties, subnormals, overflow)") {
  std::vector<float> inputs = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -65520.0f,
                               std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), std::ldexp(1.0f, -26),
                               std::ldexp(1.5f, -24), std::ldexp(2.5f, -24), 1.0f + std::ldexp(1.0f, -11),
                               1.0f + std::ldexp(3.0f, -11), std::ldexp(1.0f, -14), std::ldexp(1023.5f, -24)};
  // Every midpoint between neighbouring halves (exact ties) and one float either side.
  for (uint32_t k = 0; k < 0x7bff; k += 7) {
    const float mid = float((Binary16Value(k) + Binary16Value(k + 1)) / 2);
    inputs.insert(inputs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  for (int i = 0; i < 20000; ++i) inputs.push_back(std::exp2(exponent(rng)) * (i % 2 ? 1.0f : -1.0f));
  for (float f : inputs) {
    INFO("f = " << f);
    REQUIRE(HalfBits(half(f)) == RefHalfBits(f));
  }
  CHECK(HalfBits(half(NAN)) == 0x7e00);
  CHECK(std::isnan(float(half(-NAN))));
  CHECK(HalfBits(half(INFINITY)) == 0x7c00);
  CHECK(HalfBits(half(-INFINITY)) == 0xfc00);
}

TEST_CASE("half: each arithmetic operation is rounded once, to nearest even") {
  // Random half operands spanning subnormals to near-overflow; the exact result is
  // computed in float64 (exact for +, -, * of halves) and rounded by the reference.
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits(0, 0xfbff);
  for (int i = 0; i < 40000; ++i) {
    uint32_t ba = bits(rng), bb = bits(rng);
    if ((ba & 0x7c00) == 0x7c00) ba &= 0x83ff;   // keep operands finite
    if ((bb & 0x7c00) == 0x7c00) bb &= 0x83ff;
    const half a = detail::half_from_bits(uint16_t(ba)), b = detail::half_from_bits(uint16_t(bb));
    const double x = HalfValue(HalfBits(a)), y = HalfValue(HalfBits(b));
    INFO("a = " << x << " b = " << y);
    REQUIRE(HalfBits(a + b) == RefHalfBits(x + y));
    REQUIRE(HalfBits(a - b) == RefHalfBits(x - y));
    REQUIRE(HalfBits(a * b) == RefHalfBits(x * y));
    if (y != 0) REQUIRE(HalfBits(a / b) == RefHalfBits(x / y));
  }
  // Overflow and underflow at the edges.
  CHECK(HalfBits(half(65504.0f) + half(16.0f)) == 0x7c00);   // 65520: tie -> Inf (even)
  CHECK(HalfBits(half(65504.0f) + half(8.0f)) == 0x7bff);    // 65512 -> 65504
  CHECK(HalfBits(half(std::ldexp(1.0f, -24)) * half(0.5f)) == 0x0000);   // tie -> 0
  CHECK(HalfBits(half(std::ldexp(1.0f, -24)) * half(1.5f)) == 0x0002);   // tie -> 2 units
  // The result type: half with half/int stays half, with float becomes float.
  static_assert(std::is_same_v<decltype(half(1) + half(2)), half>);
  static_assert(std::is_same_v<decltype(half(1) * 3), half>);
  static_assert(std::is_same_v<decltype(half(1) * 3.0f), float>);
  // Conditionals mixing a 16-bit float with float or int take MSL's usual arithmetic
  // conversions (§2.12), as ggml's dequantizers write them (`c ? xb->d : xb->d / 16.f`).
  volatile bool pick = false;
#ifdef METAL_HALF_IS_FLOAT16
  static_assert(std::is_same_v<decltype(true ? half(1) : 1.0f), float>);
  static_assert(std::is_same_v<decltype(true ? half(1) : 0), half>);
  CHECK((pick ? half(0.1f) : half(0.1f) / 16.f) == float(half(0.1f)) / 16.f);
#endif
  static_assert(std::is_same_v<decltype(true ? bfloat(1) : 0), bfloat>);
  CHECK(float(pick ? bfloat(3) : 0) == 0.0f);
  float acc = 1.0f;   // arithmetic op= a 16-bit float: acc = acc + b (float)
  acc += bfloat(2.5f);
  acc *= bfloat(2);
  int count = 3;
  count += bfloat(1.5f);   // 3 + 1.5 -> bfloat 4.5 -> int 4
  CHECK(acc == 7.0f);
  CHECK(count == 4);
  half h = 1.0h;
  h += 0.5f;
  h *= 2;
  CHECK(float(h) == 3.0f);
  CHECK(-h < h);
  CHECK(h == 3);
  CHECK(int(half(2.75f)) == 2);
}

TEST_CASE("bfloat: conversion and per-operation rounding to nearest even") {
  for (uint32_t k = 0; k < 0x7f80; k += 3) {
    const double mid = (Bfloat16Value(k) + Bfloat16Value(k + 1)) / 2;   // exact in float
    const float f = float(mid);
    REQUIRE(bfloat(f).bits() == RefBfloatBits(f));
    REQUIRE(bfloat(std::nextafter(f, 0.0f)).bits() == RefBfloatBits(std::nextafter(f, 0.0f)));
    REQUIRE(bfloat(-std::nextafter(f, INFINITY)).bits() == RefBfloatBits(-std::nextafter(f, INFINITY)));
  }
  CHECK(bfloat(std::numeric_limits<float>::max()).bits() == 0x7f80);   // overflow -> Inf
  CHECK(std::isnan(float(bfloat(NAN))));
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits(0, 0xff7f);
  for (int i = 0; i < 40000; ++i) {
    uint32_t ba = bits(rng), bb = bits(rng);
    if ((ba & 0x7f80) == 0x7f80) ba &= 0x807f;
    if ((bb & 0x7f80) == 0x7f80) bb &= 0x807f;
    const bfloat a = bfloat::from_bits(uint16_t(ba)), b = bfloat::from_bits(uint16_t(bb));
    const double x = float(a), y = float(b);
    INFO("a = " << x << " b = " << y);
    REQUIRE((a * b).bits() == RefBfloatBits(x * y));   // exact in float64
    if (std::fabs(std::log2(std::fabs(x) + 1e-300) - std::log2(std::fabs(y) + 1e-300)) < 40)
      REQUIRE((a + b).bits() == RefBfloatBits(x + y));   // exact in float64 within 53 bits
  }
  static_assert(std::is_same_v<decltype(bfloat(1) + bfloat(2)), bfloat>);
  static_assert(std::is_same_v<decltype(bfloat(1) + half(2)), float>);
  CHECK(float(half(bfloat(1.5f))) == 1.5f);
}

TEST_CASE("numeric_limits and constants of the 16-bit types") {
  CHECK(float(numeric_limits<half>::max()) == 65504.0f);
  CHECK(float(HALF_MAX) == 65504.0f);
  CHECK(float(HALF_MIN) == std::ldexp(1.0f, -14));
  CHECK(float(HALF_EPSILON) == std::ldexp(1.0f, -10));
  CHECK(float(numeric_limits<half>::denorm_min()) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(float(numeric_limits<half>::infinity())));
  CHECK(float(numeric_limits<bfloat>::max()) == float(Bfloat16Value(0x7f7f)));
  CHECK(float(numeric_limits<bfloat>::epsilon()) == std::ldexp(1.0f, -7));
  CHECK(float(M_PI_H) == float(half(3.14159265358979)));
  CHECK(M_PI_F == float(3.14159265358979323846));
}

// Sizes and alignments of every MSL vector type (MSL spec §2.2 Table 2.3, §2.2.3).
#define CHECK_VECTOR_LAYOUT(T)                                                                   \
  static_assert(sizeof(vec<T, 2>) == 2 * sizeof(T) && alignof(vec<T, 2>) == 2 * sizeof(T));     \
  static_assert(sizeof(vec<T, 3>) == 4 * sizeof(T) && alignof(vec<T, 3>) == 4 * sizeof(T));     \
  static_assert(sizeof(vec<T, 4>) == 4 * sizeof(T) && alignof(vec<T, 4>) == 4 * sizeof(T));     \
  static_assert(sizeof(packed_vec<T, 2>) == 2 * sizeof(T) && alignof(packed_vec<T, 2>) == alignof(T)); \
  static_assert(sizeof(packed_vec<T, 3>) == 3 * sizeof(T) && alignof(packed_vec<T, 3>) == alignof(T)); \
  static_assert(sizeof(packed_vec<T, 4>) == 4 * sizeof(T) && alignof(packed_vec<T, 4>) == alignof(T));
CHECK_VECTOR_LAYOUT(bool)
CHECK_VECTOR_LAYOUT(char)
CHECK_VECTOR_LAYOUT(uchar)
CHECK_VECTOR_LAYOUT(short)
CHECK_VECTOR_LAYOUT(ushort)
CHECK_VECTOR_LAYOUT(int)
CHECK_VECTOR_LAYOUT(uint)
CHECK_VECTOR_LAYOUT(long)
CHECK_VECTOR_LAYOUT(ulong)
CHECK_VECTOR_LAYOUT(half)
CHECK_VECTOR_LAYOUT(bfloat)
CHECK_VECTOR_LAYOUT(float)
#undef CHECK_VECTOR_LAYOUT
static_assert(sizeof(float3) == 16 && sizeof(half4) == 8 && sizeof(packed_float3) == 12);

TEST_CASE("vectors: constructors and conversions") {
  const float4 a(1, 2, 3, 4);
  CHECK((a.x == 1 && a.y == 2 && a.z == 3 && a.w == 4));
  const float4 splat = 7;   // a scalar is replicated
  CHECK(all(splat == float4(7, 7, 7, 7)));
  const float2 xy(5, 6);
  const float4 b(xy, 0, 1), c(0, xy, 1), d(xy, xy), e(float3(1, 2, 3), 9);
  CHECK(all(b == float4(5, 6, 0, 1)));
  CHECK(all(c == float4(0, 5, 6, 1)));
  CHECK(all(d == float4(5, 6, 5, 6)));
  CHECK(all(e == float4(1, 2, 3, 9)));
  const half4 h(float4(1.0f, 1.0f + std::ldexp(1.0f, -11), 65520.0f, -0.1f));   // rounds per component
  CHECK(HalfBits(h.x) == 0x3c00);
  CHECK(HalfBits(h.y) == 0x3c00);   // tie -> even
  CHECK(HalfBits(h.z) == 0x7c00);   // tie -> Inf
  CHECK(HalfBits(h.w) == HalfBits(half(-0.1f)));
  const float4 back(h);
  CHECK(back.x == 1.0f);
  CHECK(std::isinf(back.z));
  const int4 truncated(float4(1.9f, -1.9f, 0.5f, -0.5f));
  CHECK(all(truncated == int4(1, -1, 0, 0)));
  const uint2 u(3u, 4u);
  CHECK((u.x == 3u && u.y == 4u));
  const packed_float3 p = float3(1, 2, 3);
  const float3 q = p;
  CHECK((p[0] == 1 && p[2] == 3 && q.z == 3));
  float4 zero = {};
  CHECK(all(zero == 0.0f));
}

TEST_CASE("vectors: swizzle reads and writes") {
  float4 v(1, 2, 3, 4);
  CHECK(all(float3(v.zyx) == float3(3, 2, 1)));
  CHECK(all(float4(v.wwxy) == float4(4, 4, 1, 2)));
  CHECK(all(float2(v.ba) == float2(3, 4)));
  CHECK(all(float4(v.abgr) == float4(4, 3, 2, 1)));
  CHECK(v.r == 1);
  v.xy = float2(10, 20);
  CHECK(all(v == float4(10, 20, 3, 4)));
  v.xw = v.wx;   // overlapping source and destination: read first, then write
  CHECK(all(v == float4(4, 20, 3, 10)));
  v.zyx = float3(7, 8, 9);
  CHECK(all(v == float4(9, 8, 7, 10)));
  v.yw += 1;
  CHECK(all(v == float4(9, 9, 7, 11)));
  v.gb = v.gb * 2.0f;
  CHECK(all(v == float4(9, 18, 14, 11)));
  float4 w(0);
  w.xy = v.xy;   // the same swizzle type on both sides writes only its components
  CHECK(all(w == float4(9, 18, 0, 0)));
  v.x = 100;   // single components are plain scalars
  float& ref = v.y;
  ref = 200;
  CHECK(all(v == float4(100, 200, 14, 11)));
  const float3 s = v.xyz + v.yzw;
  CHECK(all(s == float3(300, 214, 25)));
  uint3 u3(1, 2, 3);
  u3.zx = uint2(5, 6);
  CHECK(all(u3 == uint3(6, 2, 5)));
  CHECK(dot(v.xy, float2(1, 1)) == 300);
  // From a const vector the same swizzle type still writes only its components.
  const float4 c(-1, -2, -3, -4);
  w.zw = c.zw;
  w.xz = c.xz;
  CHECK(all(w == float4(-1, 18, -3, -4)));
  float3 t(1, 2, 3);
  const float3 ct(7, 8, 9);
  t.xz = ct.xz;
  CHECK(all(t == float3(7, 2, 9)));
  float2 p(1, 2);
  const float2 cp(5, 6);
  p.yx = cp.yx;
  CHECK(all(p == float2(5, 6)));
}

// ggml-common.h's block_q4_1 (MSL's vectors are plain values that unions can hold).
struct BlockWithHalf2 {
  union {
    struct { half d, m; };
    half2 dm;
  };
  uchar qs[16];
};

TEST_CASE("vectors of two components are trivially copyable and live in unions") {
  static_assert(std::is_trivially_copyable_v<half2> && std::is_trivially_copyable_v<float2> &&
                std::is_trivially_copyable_v<packed_half2> && std::is_trivially_copyable_v<ushort2>);
  static_assert(std::is_trivially_copyable_v<BlockWithHalf2>);
  BlockWithHalf2 a{}, b{};
  b.dm = half2(1.5f, -2.25f);
  b.qs[15] = 7;
  a = b;
  CHECK(float(a.d) == 1.5f);
  CHECK(float(a.m) == -2.25f);
  CHECK(a.qs[15] == 7);
  float4 v(1, 2, 3, 4), u(5, 6, 7, 8);
  v = u;   // wider vectors copy as values too
  CHECK(all(v == float4(5, 6, 7, 8)));
}

TEST_CASE("vectors: component-wise operators") {
  const float4 a(1, 2, 3, 4), b(4, 3, 2, 1);
  CHECK(all(a + b == 5.0f));
  CHECK(all(a * 2 == float4(2, 4, 6, 8)));       // the int scalar becomes float
  CHECK(all(2.0f - a == float4(1, 0, -1, -2)));
  CHECK(all(-a == float4(-1, -2, -3, -4)));
  CHECK(all((a < b) == bool4(true, true, false, false)));
  CHECK(all((!(a < b)) == bool4(false, false, true, true)));
  CHECK(any(a == b) == false);
  const uint4 u(1, 2, 4, 8);
  CHECK(all((u << 1u) == uint4(2, 4, 8, 16)));
  CHECK(all((u & 6u) == uint4(0, 2, 4, 0)));
  CHECK(all((u % 3u) == uint4(1, 2, 1, 2)));
  CHECK(all(~uint2(0u, 1u) == uint2(0xffffffffu, 0xfffffffeu)));
  const half4 h(1, 2, 3, 4);
  const half4 hh = h * 2.0f + half(1);   // stays half4
  CHECK(float(hh.w) == 9.0f);
  const char2 c2(100, 100);
  CHECK(all(c2 + c2 == char2(char(200), char(200))));   // wraps like the 8-bit type
  float4 acc = 0;
  acc += a;
  acc *= b;
  CHECK(all(acc == float4(4, 6, 6, 4)));
}

TEST_CASE("math: select, clamp, mix, min/max and friends") {
  CHECK(select(1.0f, 2.0f, true) == 2.0f);
  CHECK(select(1.0f, 2.0f, false) == 1.0f);
  CHECK(all(select(float4(1), float4(2), bool4(true, false, true, false)) == float4(2, 1, 2, 1)));
  CHECK(all(clamp(float4(-1, 0.5f, 2, 1), 0.0f, 1.0f) == float4(0, 0.5f, 1, 1)));
  CHECK(clamp(5u, 1u, 3u) == 3u);
  CHECK(clamp(-5, -2, 3) == -2);
  CHECK(mix(2.0f, 4.0f, 0.25f) == 2.5f);
  CHECK(all(mix(float2(0, 10), float2(10, 20), float2(0.5f, 0.1f)) == float2(5, 11)));
  CHECK(min(3u, 7u) == 3u);
  CHECK(max(-1.0f, NAN) == -1.0f);   // fmax semantics
  CHECK(all(max(int3(1, 5, -3), int3(2, 4, -4)) == int3(2, 5, -3)));
  CHECK(float(max(half(1.5f), half(2.5f))) == 2.5f);
  CHECK(abs(-3) == 3);
  CHECK(all(abs(float2(-1.5f, 2)) == float2(1.5f, 2)));
  CHECK(fma(2.0f, 3.0f, 1.0f) == 7.0f);
  CHECK(step(0.5f, 0.4f) == 0.0f);
  CHECK(step(0.5f, 0.5f) == 1.0f);
  CHECK(smoothstep(0.0f, 1.0f, 0.5f) == 0.5f);
  CHECK(sign(-2.0f) == -1.0f);
  CHECK(fract(-0.25f) == 0.75f);
  CHECK(fmod(7.5f, 2.0f) == 1.5f);
  CHECK(round(2.5f) == 3.0f);
  CHECK(rint(2.5f) == 2.0f);
  CHECK(all(isnan(float2(NAN, 1)) == bool2(true, false)));
  CHECK(isinf(-INFINITY));
  CHECK(!isnan(half(1)));
  CHECK(std::fabs(length(float3(2, 3, 6)) - 7.0f) == 0.0f);
  CHECK(all(normalize(float2(3, 4)) == float2(0.6f, 0.8f)));
  CHECK(all(cross(float3(1, 0, 0), float3(0, 1, 0)) == float3(0, 0, 1)));
  float c;
  const float s = sincos(0.5f, c);
  CHECK(s == std::sin(0.5f));
  CHECK(c == std::cos(0.5f));
  CHECK(float(sqrt(half(2))) == float(half(std::sqrt(2.0f))));
  CHECK(std::fabs(rsqrt(4.0f) - 0.5f) == 0.0f);
}

TEST_CASE("math: precise:: is correctly rounded, plain within a few ulp, fast:: trig drifts with |x|") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> angle(-200000.0, 200000.0), small(-10.0, 10.0);
  auto ulp_error = [](float got, double exact) {
    const double ulp = std::ldexp(1.0, std::ilogb(float(exact)) - 23);
    return std::fabs(double(got) - exact) / ulp;
  };
  for (int i = 0; i < 20000; ++i) {
    const float x = float(angle(rng)), y = float(small(rng));
    // Reference: long double libm on the exact float input.
    const long double xl = x, yl = y;
    REQUIRE(ulp_error(precise::sin(x), double(std::sin(xl))) <= 0.5001);
    REQUIRE(ulp_error(precise::cos(x), double(std::cos(xl))) <= 0.5001);
    REQUIRE(ulp_error(precise::exp(y), double(std::exp(yl))) <= 0.5001);
    REQUIRE(ulp_error(precise::tanh(y), double(std::tanh(yl))) <= 0.5001);
    REQUIRE(ulp_error(precise::pow(std::fabs(y), 1.7f), double(std::pow(std::fabs(yl), (long double)1.7f))) <= 0.5001);
    REQUIRE(ulp_error(metal::cos(x), double(std::cos(xl))) <= 4);
    REQUIRE(ulp_error(metal::exp(y), double(std::exp(yl))) <= 4);
  }
  // fast:: trig reduces its argument in float like a GPU's fast path: a few ulp in
  // [-pi, pi], an absolute error that grows with |x| beyond (RoPE angles at long
  // positions), so a kernel that needs accurate angles fails here as on a Mac.
  std::uniform_real_distribution<double> principal(-3.14159, 3.14159), far(100000.0, 140000.0);
  double worst_far = 0.0;
  for (int i = 0; i < 20000; ++i) {
    const float p = float(principal(rng)), x = float(far(rng));
    const long double pl = p, xl = x;
    REQUIRE(ulp_error(fast::sin(p), double(std::sin(pl))) <= 4);
    REQUIRE(ulp_error(fast::cos(p), double(std::cos(pl))) <= 4);
    const double err = std::fabs(double(fast::cos(x)) - double(std::cos(xl)));
    REQUIRE(err <= 2e-2);
    worst_far = std::max(worst_far, err);
  }
  CHECK(worst_far > 1e-3);
  float fast_c;
  const float fast_s = fast::sincos(131072.5f, fast_c);
  CHECK(fast_s == fast::sin(131072.5f));
  CHECK(fast_c == fast::cos(131072.5f));
  // Vectors go component by component.
  const float4 v(0.1f, 1.0f, 100.0f, 131072.5f);
  const float4 s = precise::sin(v);
  for (int i = 0; i < 4; ++i) CHECK(s[i] == float(std::sin(double(v[i]))));
}

TEST_CASE("integer functions: popcount, clz, ctz, mulhi") {
  CHECK(popcount(0xf0f0u) == 8u);
  CHECK(all(popcount(uint2(0u, 0xffffffffu)) == uint2(0u, 32u)));
  CHECK(clz(0u) == 32u);
  CHECK(clz(uchar(0)) == 8);
  CHECK(clz(ushort(1)) == 15);
  CHECK(clz(1u) == 31u);
  CHECK(clz(-1) == 0);
  CHECK(ctz(0u) == 32u);
  CHECK(ctz(8u) == 3u);
  CHECK(ctz(ulong(1) << 40) == 40u);
  std::mt19937_64 rng(9);
  for (int i = 0; i < 1000; ++i) {
    const uint a = uint(rng()), b = uint(rng());
    const int sa = int(rng()), sb = int(rng());
    const ulong la = rng(), lb = rng();
    REQUIRE(mulhi(a, b) == uint((uint64_t(a) * uint64_t(b)) >> 32));
    REQUIRE(mulhi(sa, sb) == int((int64_t(sa) * int64_t(sb)) >> 32));
    REQUIRE(mulhi(la, lb) == ulong((static_cast<unsigned __int128>(la) * lb) >> 64));
  }
}

TEST_CASE("as_type reinterprets bits between types of one size") {
  CHECK(as_type<uint>(1.0f) == 0x3f800000u);
  CHECK(as_type<float>(0x40000000u) == 2.0f);
  CHECK(as_type<ushort>(half(1)) == 0x3c00);
  CHECK(as_type<uint>(half2(half(1), half(-2))) == 0xc0003c00u);
  const float4 v(1, 2, 3, 4);
  const uint2 bits = as_type<uint2>(v.zw);   // a swizzle reinterprets its value
  CHECK(bits.x == as_type<uint>(3.0f));
  CHECK(bits.y == as_type<uint>(4.0f));
  CHECK(as_type<float>(as_type<uint>(-0.0f)) == 0.0f);
  CHECK(std::signbit(as_type<float>(as_type<uint>(-0.0f))));
}

TEST_CASE("atomics: real atomics under several std::threads, layout of the scalar") {
  constexpr int kThreads = 4, kIters = 20000;
  uint counters[2] = {0, 0};
  float sum = 0.0f;
  int extremes[2] = {0, 0};
  uint bits = 0;
  // As kernels do: atomic views over plain scalars in a buffer.
  auto* count = reinterpret_cast<atomic_uint*>(&counters[0]);
  auto* cas_count = reinterpret_cast<atomic_uint*>(&counters[1]);
  auto* fsum = reinterpret_cast<atomic_float*>(&sum);
  auto* lo = reinterpret_cast<atomic_int*>(&extremes[0]);
  auto* hi = reinterpret_cast<atomic_int*>(&extremes[1]);
  auto* mask = reinterpret_cast<atomic_uint*>(&bits);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([=] {
      for (int i = 0; i < kIters; ++i) {
        atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);
        atomic_fetch_add_explicit(fsum, 0.5f, memory_order_relaxed);   // exact in float
        const int v = (i * 7919 + t * 104729) % 100003 - 50000;
        atomic_fetch_min_explicit(lo, v, memory_order_relaxed);
        atomic_fetch_max_explicit(hi, v, memory_order_relaxed);
        atomic_fetch_or_explicit(mask, 1u << ((i + t) % 32), memory_order_relaxed);
        uint expected = atomic_load_explicit(cas_count, memory_order_relaxed);
        while (!atomic_compare_exchange_weak_explicit(cas_count, &expected, expected + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(counters[0] == uint(kThreads * kIters));
  CHECK(counters[1] == uint(kThreads * kIters));
  CHECK(sum == 0.5f * kThreads * kIters);
  int want_lo = 0, want_hi = 0;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIters; ++i) {
      const int v = (i * 7919 + t * 104729) % 100003 - 50000;
      want_lo = std::min(want_lo, v);
      want_hi = std::max(want_hi, v);
    }
  CHECK(extremes[0] == want_lo);
  CHECK(extremes[1] == want_hi);
  CHECK(bits == 0xffffffffu);
  CHECK(atomic_exchange_explicit(count, 5u, memory_order_relaxed) == uint(kThreads * kIters));
  CHECK(atomic_fetch_sub_explicit(count, 2u, memory_order_relaxed) == 5u);
  CHECK(atomic_fetch_and_explicit(count, 2u, memory_order_relaxed) == 3u);
  CHECK(atomic_fetch_xor_explicit(count, 3u, memory_order_relaxed) == 2u);
  CHECK(counters[0] == 1u);
  atomic_store_explicit(fsum, -1.5f, memory_order_relaxed);
  CHECK(atomic_fetch_sub_explicit(fsum, 1.0f, memory_order_relaxed) == -1.5f);
  CHECK(sum == -2.5f);
}
