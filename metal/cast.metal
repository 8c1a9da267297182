// cast: every dtype pair, one thread per element, bit-exact with the CPU oracle
// (cpp/cpu/cast.cpp), whose rules it implements:
// * same dtype: the element is copied unchanged (NaN payloads kept);
// * float -> float: widened exactly to f32, then rounded to nearest even;
// * int -> float: rounded to nearest even straight to the target's significand width
//   (no double rounding through f32, which would differ for e.g. int64 -> bfloat16);
// * float -> int: truncation toward zero, saturating at the type's range, NaN -> 0
//   (a plain float -> int conversion is undefined out of range, so it is never used
//   there);
// * int -> int: two's-complement wraparound (the low bits).
// NaNs and bfloat16 are converted on the bits (quiet bit set, payload's top bits
// kept, as the oracle does) so no GPU's NaN canonicalisation or f32-denormal flushing
// can change a result.
#include <metal_stdlib>
#include "cast_args.h"
using namespace metal;

// How each dtype widens to its carrier (float for the float dtypes, long for the
// integers) and narrows back.
template <typename T>
struct CastType;

template <>
struct CastType<float> {
  enum { kFloat = 1, kSignificand = 24 };
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};

template <>
struct CastType<half> {
  enum { kFloat = 1, kSignificand = 11 };
  static float load(half v) {
    const uint bits = as_type<ushort>(v);
    if ((bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0)   // NaN: quiet, payload << 13
      return as_type<float>(((bits & 0x8000u) << 16) | 0x7fc00000u | ((bits & 0x3ffu) << 13));
    return float(v);
  }
  static half store(float v) {
    if (isnan(v)) {
      const uint bits = as_type<uint>(v);
      return as_type<half>(ushort(((bits >> 16) & 0x8000u) | 0x7e00u | ((bits >> 13) & 0x3ffu)));
    }
    return half(v);
  }
};

template <>
struct CastType<bfloat> {
  enum { kFloat = 1, kSignificand = 8 };
  static float load(bfloat v) { return as_type<float>(uint(as_type<ushort>(v)) << 16); }
  static bfloat store(float v) {
    const uint bits = as_type<uint>(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return as_type<bfloat>(ushort((bits >> 16) | 0x40u));
    return as_type<bfloat>(ushort((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16));
  }
};

// Saturation of float -> int: values at or beyond the float bounds give the type's
// min / max. Where max is not a float (int32, uint32, int64) its bound is the power of
// two it rounds up to; no float lies between max and that bound, so `v >= hi` catches
// exactly the values above max, as the oracle's comparison in double does.
#define METALRT_CAST_INT_TYPE(T, MIN, MAX, LO, HI)   \
  template <>                                        \
  struct CastType<T> {                               \
    enum { kFloat = 0 };                             \
    static long min() { return MIN; }                \
    static long max() { return MAX; }                \
    static float lo() { return LO; }                 \
    static float hi() { return HI; }                 \
    static long load(T v) { return long(v); }        \
    static T store(long v) { return T(v); }          \
  };

METALRT_CAST_INT_TYPE(char, -128l, 127l, -128.0f, 127.0f)
METALRT_CAST_INT_TYPE(uchar, 0l, 255l, 0.0f, 255.0f)
METALRT_CAST_INT_TYPE(int, -2147483648l, 2147483647l, -2147483648.0f, 2147483648.0f)
METALRT_CAST_INT_TYPE(uint, 0l, 4294967295l, 0.0f, 4294967296.0f)
METALRT_CAST_INT_TYPE(long, -9223372036854775807l - 1l, 9223372036854775807l, -9223372036854775808.0f,
                      9223372036854775808.0f)

// v rounded to nearest even with `bits` significant bits; the result is exact in f32.
inline float round_int_to_float(long v, int bits) {
  ulong magnitude = v < 0 ? 0ul - ulong(v) : ulong(v);
  const int length = 64 - int(clz(magnitude));
  const int shift = max(0, length - bits);
  if (shift > 0) {
    const ulong rest = magnitude & ((1ul << shift) - 1ul);
    const ulong halfway = 1ul << (shift - 1);
    magnitude >>= shift;
    if (rest > halfway || (rest == halfway && (magnitude & 1ul) != 0)) ++magnitude;
  }
  const float value = ldexp(float(magnitude), shift);   // magnitude <= 2^24: exact
  return v < 0 ? -value : value;
}

// Narrowing from a carrier to Dst, by whether Dst is a float dtype.
template <typename Dst, int kFloat = CastType<Dst>::kFloat>
struct Narrow;

template <typename Dst>
struct Narrow<Dst, 1> {
  static Dst from(float v) { return CastType<Dst>::store(v); }
  static Dst from(long v) { return CastType<Dst>::store(round_int_to_float(v, CastType<Dst>::kSignificand)); }
};

template <typename Dst>
struct Narrow<Dst, 0> {
  static Dst from(float v) {
    if (isnan(v)) return Dst(0);
    if (v >= CastType<Dst>::hi()) return Dst(CastType<Dst>::max());
    if (v <= CastType<Dst>::lo()) return Dst(CastType<Dst>::min());
    return Dst(long(v));   // |v| < 2^63 here: truncates toward zero
  }
  static Dst from(long v) { return CastType<Dst>::store(v); }   // wraparound
};

template <typename Src, typename Dst>
kernel void cast_convert(device const Src* x [[buffer(0)]],
                         device Dst* out [[buffer(1)]],
                         constant CastArgs& args [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  out[i] = Narrow<Dst>::from(CastType<Src>::load(x[i]));
}

template <typename T>
kernel void cast_copy(device const T* x [[buffer(0)]],
                      device T* out [[buffer(1)]],
                      constant CastArgs& args [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
  if (i >= args.n) return;
  out[i] = x[i];
}

// cast_<src>_<dst>: the same dtype copies, every other pair converts.
#define METALRT_CAST_COPY(T, SUFFIX)                                                          \
  template [[host_name("cast_" #SUFFIX "_" #SUFFIX)]] kernel void cast_copy<T>(              \
      device const T*, device T*, constant CastArgs&, uint);
#define METALRT_CAST(SRC, SRC_SUFFIX, DST, DST_SUFFIX)                                        \
  template [[host_name("cast_" #SRC_SUFFIX "_" #DST_SUFFIX)]] kernel void cast_convert<SRC, DST>( \
      device const SRC*, device DST*, constant CastArgs&, uint);

METALRT_CAST_COPY(float, f32)
METALRT_CAST_COPY(half, f16)
METALRT_CAST_COPY(bfloat, bf16)
METALRT_CAST_COPY(char, i8)
METALRT_CAST_COPY(uchar, u8)
METALRT_CAST_COPY(int, i32)
METALRT_CAST_COPY(long, i64)
METALRT_CAST_COPY(uint, u32)

METALRT_CAST(float, f32, half, f16)
METALRT_CAST(float, f32, bfloat, bf16)
METALRT_CAST(float, f32, char, i8)
METALRT_CAST(float, f32, uchar, u8)
METALRT_CAST(float, f32, int, i32)
METALRT_CAST(float, f32, long, i64)
METALRT_CAST(float, f32, uint, u32)
METALRT_CAST(half, f16, float, f32)
METALRT_CAST(half, f16, bfloat, bf16)
METALRT_CAST(half, f16, char, i8)
METALRT_CAST(half, f16, uchar, u8)
METALRT_CAST(half, f16, int, i32)
METALRT_CAST(half, f16, long, i64)
METALRT_CAST(half, f16, uint, u32)
METALRT_CAST(bfloat, bf16, float, f32)
METALRT_CAST(bfloat, bf16, half, f16)
METALRT_CAST(bfloat, bf16, char, i8)
METALRT_CAST(bfloat, bf16, uchar, u8)
METALRT_CAST(bfloat, bf16, int, i32)
METALRT_CAST(bfloat, bf16, long, i64)
METALRT_CAST(bfloat, bf16, uint, u32)
METALRT_CAST(char, i8, float, f32)
METALRT_CAST(char, i8, half, f16)
METALRT_CAST(char, i8, bfloat, bf16)
METALRT_CAST(char, i8, uchar, u8)
METALRT_CAST(char, i8, int, i32)
METALRT_CAST(char, i8, long, i64)
METALRT_CAST(char, i8, uint, u32)
METALRT_CAST(uchar, u8, float, f32)
METALRT_CAST(uchar, u8, half, f16)
METALRT_CAST(uchar, u8, bfloat, bf16)
METALRT_CAST(uchar, u8, char, i8)
METALRT_CAST(uchar, u8, int, i32)
METALRT_CAST(uchar, u8, long, i64)
METALRT_CAST(uchar, u8, uint, u32)
METALRT_CAST(int, i32, float, f32)
METALRT_CAST(int, i32, half, f16)
METALRT_CAST(int, i32, bfloat, bf16)
METALRT_CAST(int, i32, char, i8)
METALRT_CAST(int, i32, uchar, u8)
METALRT_CAST(int, i32, long, i64)
METALRT_CAST(int, i32, uint, u32)
METALRT_CAST(long, i64, float, f32)
METALRT_CAST(long, i64, half, f16)
METALRT_CAST(long, i64, bfloat, bf16)
METALRT_CAST(long, i64, char, i8)
METALRT_CAST(long, i64, uchar, u8)
METALRT_CAST(long, i64, int, i32)
METALRT_CAST(long, i64, uint, u32)
METALRT_CAST(uint, u32, float, f32)
METALRT_CAST(uint, u32, half, f16)
METALRT_CAST(uint, u32, bfloat, bf16)
METALRT_CAST(uint, u32, char, i8)
METALRT_CAST(uint, u32, uchar, u8)
METALRT_CAST(uint, u32, int, i32)
METALRT_CAST(uint, u32, long, i64)
