// The quantized GEMV for arm64 NEON (Apple silicon and Linux arm64): vdotq_s32 where
// the target has the dot-product extension (every Apple M chip), else widening
// multiplies. NEON is in the arm64 baseline, so no flag or run-time check is needed.
#include "cpu/fast/gemv/gemv_args.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "cpu/fast/gemv/gemv_kernel.h"

namespace metalrt::cpu::fast {
namespace {

struct Neon {
  struct Codes {
    uint8x16_t half[2];
  };
  struct Dot {
    int32x4_t half[2];
  };
  using Acc = float32x4_t;

  static Codes Load(const uint8_t* p) { return {{vld1q_u8(p), vld1q_u8(p + 16)}}; }
  static Codes SplitNibbles16(const uint8_t* qs) {
    const uint8x16_t v = vld1q_u8(qs);
    return {{vandq_u8(v, vdupq_n_u8(15)), vshrq_n_u8(v, 4)}};
  }
  // Codes 2j and 2j + 1 in the low and high nibble of byte j (MLX affine 4-bit).
  static Codes InterleavedNibbles16(const uint8_t* q) {
    const uint8x16_t v = vld1q_u8(q), lo = vandq_u8(v, vdupq_n_u8(15)), hi = vshrq_n_u8(v, 4);
    return {{vzip1q_u8(lo, hi), vzip2q_u8(lo, hi)}};
  }
  // table[c] for each code c < 16.
  static Codes Lookup16(const Codes& c, const int8_t* table) {
    const uint8x16_t t = vld1q_u8(reinterpret_cast<const uint8_t*>(table));
    return {{vqtbl1q_u8(t, c.half[0]), vqtbl1q_u8(t, c.half[1])}};
  }
  // codes - offset as int8 (DotSigned reads them signed).
  static Codes Centered(const Codes& c, int offset) {
    const uint8x16_t o = vdupq_n_u8(uint8_t(offset));
    return {{vsubq_u8(c.half[0], o), vsubq_u8(c.half[1], o)}};
  }
  static void NibblePlanes32(const uint8_t* qs, Codes* lo, Codes* hi) {
    const Codes v = Load(qs);
    for (int h = 0; h < 2; ++h) {
      lo->half[h] = vandq_u8(v.half[h], vdupq_n_u8(15));
      hi->half[h] = vshrq_n_u8(v.half[h], 4);
    }
  }
  static int32x4_t Dot16(int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(vdupq_n_s32(0), w, x);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));
    const int16x8_t hi = vmull_high_s8(w, x);
    return vpadalq_s16(vpaddlq_s16(lo), hi);
#endif
  }
  // Codes below 128 read as signed are the same numbers, so one signed dot serves both.
  static Dot DotSigned(const Codes& c, const int8_t* x) {
    return {{Dot16(vreinterpretq_s8_u8(c.half[0]), vld1q_s8(x)), Dot16(vreinterpretq_s8_u8(c.half[1]), vld1q_s8(x + 16))}};
  }
  static Dot DotSmall(const Codes& c, const int8_t* x) { return DotSigned(c, x); }
  static Dot Combine(const Dot& coarse, const Dot& residual) {
    return {{vmlaq_n_s32(residual.half[0], coarse.half[0], kResidualSteps),
             vmlaq_n_s32(residual.half[1], coarse.half[1], kResidualSteps)}};
  }
  static Acc Zero() { return vdupq_n_f32(0.0f); }
  static Acc Fma(Acc acc, const Dot& d, float s0, float s1) {
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(d.half[0]), s0);
    return vfmaq_n_f32(acc, vcvtq_f32_s32(d.half[1]), s1);
  }
  static Acc Fma(Acc acc, const Dot& d, float s) {
    return vfmaq_n_f32(acc, vcvtq_f32_s32(vaddq_s32(d.half[0], d.half[1])), s);
  }
  static float Sum(Acc acc) { return vaddvq_f32(acc); }
};

}  // namespace

void GemvRowsNeon(const GemvArgs& args, int64_t begin, int64_t end) { GemvRows<Neon>(args, begin, end); }

}  // namespace metalrt::cpu::fast
#endif
