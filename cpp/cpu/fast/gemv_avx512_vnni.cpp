// The quantized GEMV for AVX-512 VNNI (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni, see fast.cmake; called only when SelectedGemvIsa() found the CPU bits
// and the OS's ZMM state in XCR0). The codes are loaded and unpacked as for AVX2
// (gemv_x86.h); the dot is on full 512-bit vectors: the 32 codes widened to int16
// against the activation's int16 codes c = 254 q + r (q8_activation.h) in one vpdpwssd,
// instead of two int8 dots, a multiply and an add on 256 bits. Lane l holds values
// 2l and 2l + 1 (|u c| <= 255 * 32385, two per lane: exact in int32, and below 2^24,
// so exact in the f32 the lanes are converted to); lanes 0-7 are the block's first half.
#include "cpu/fast/gemv_args.h"

#if defined(__x86_64__)
#include "cpu/fast/gemv_x86.h"

namespace metalrt::cpu::fast {
namespace {

struct Avx512 : X86<true> {
  using Dot = __m512i;
  using Acc = __m512;
  static constexpr bool kWideDot = true;

  template <bool kSigned>
  static Dot BlockDot(const Codes& codes, const Q8Block& xb) {
    const __m512i w = kSigned ? _mm512_cvtepi8_epi16(codes) : _mm512_cvtepu8_epi16(codes);
    return _mm512_dpwssd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xb.c));
  }
  static Acc Zero() { return _mm512_setzero_ps(); }
  static Acc Fma(Acc acc, const Dot& d, float s) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(s), acc); }
  static Acc Fma(Acc acc, const Dot& d, float s0, float s1) {
    const __m512d halves = _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(s0)),
                                              _mm256_castps_pd(_mm256_set1_ps(s1)), 1);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_castpd_ps(halves), acc);
  }
  static float Sum(Acc acc) { return _mm512_reduce_add_ps(acc); }
};

}  // namespace

void GemvRowsAvx512Vnni(const GemvArgs& args, int64_t begin, int64_t end) { GemvRows<Avx512>(args, begin, end); }
}  // namespace metalrt::cpu::fast
#endif
