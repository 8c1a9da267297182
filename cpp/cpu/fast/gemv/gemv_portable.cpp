// The quantized GEMV in portable C++: the kernel for CPUs without a SIMD path here,
// written as plain loops over 16 values the compiler vectorises for the baseline ISA.
#include "cpu/fast/gemv/gemv_kernel.h"

namespace metalrt::cpu::fast {
namespace {

struct Portable {
  struct Codes {
    uint8_t v[32];
  };
  struct Dot {
    int32_t half[2];
  };
  using Acc = float;

  static Codes Load(const uint8_t* p) {
    Codes c;
    std::memcpy(c.v, p, 32);
    return c;
  }
  static Codes SplitNibbles16(const uint8_t* qs) {
    Codes c;
    for (int j = 0; j < 16; ++j) {
      c.v[j] = qs[j] & 15;
      c.v[j + 16] = qs[j] >> 4;
    }
    return c;
  }
  // Codes 2j and 2j + 1 in the low and high nibble of byte j (MLX affine 4-bit).
  static Codes InterleavedNibbles16(const uint8_t* q) {
    Codes c;
    for (int j = 0; j < 16; ++j) {
      c.v[2 * j] = q[j] & 15;
      c.v[2 * j + 1] = q[j] >> 4;
    }
    return c;
  }
  // table[c] for each code c < 16.
  static Codes Lookup16(Codes c, const int8_t* table) {
    for (uint8_t& v : c.v) v = uint8_t(table[v]);
    return c;
  }
  // codes - offset as int8 (DotSigned reads them signed).
  static Codes Centered(Codes c, int offset) {
    for (uint8_t& v : c.v) v = uint8_t(v - offset);
    return c;
  }
  static void NibblePlanes32(const uint8_t* qs, Codes* lo, Codes* hi) {
    for (int j = 0; j < 32; ++j) {
      lo->v[j] = qs[j] & 15;
      hi->v[j] = qs[j] >> 4;
    }
  }
  template <typename Code>
  static Dot DotAs(const Codes& c, const int8_t* x) {
    Dot d{{0, 0}};
    for (int h = 0; h < 2; ++h)
      for (int i = 16 * h; i < 16 * h + 16; ++i) d.half[h] += int32_t(static_cast<Code>(c.v[i])) * x[i];
    return d;
  }
  static Dot DotSmall(const Codes& c, const int8_t* x) { return DotAs<uint8_t>(c, x); }
  static Dot DotSigned(const Codes& c, const int8_t* x) { return DotAs<int8_t>(c, x); }
  static Dot Combine(const Dot& coarse, const Dot& residual) {
    return {{kResidualSteps * coarse.half[0] + residual.half[0], kResidualSteps * coarse.half[1] + residual.half[1]}};
  }
  static Acc Zero() { return 0.0f; }
  static Acc Fma(Acc acc, const Dot& d, float s0, float s1) {
    return acc + (s0 * float(d.half[0]) + s1 * float(d.half[1]));
  }
  static Acc Fma(Acc acc, const Dot& d, float s) { return acc + s * float(d.half[0] + d.half[1]); }
  static float Sum(Acc acc) { return acc; }
};

}  // namespace

void GemvRowsPortable(const GemvArgs& args, int64_t begin, int64_t end) { GemvRows<Portable>(args, begin, end); }

}  // namespace metalrt::cpu::fast
