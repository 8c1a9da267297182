// The constants of the fast CPU kernels' vectorised expf, one definition for every ISA
// (the decode attention's policies, attention_<isa>.cpp, and the AVX-512 rows of
// exp_avx512.cpp): x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split
// in two constants so n ln2 is exact), e^r = 1 + r + r^2 P(r) by Cephes' expf
// polynomial (Moshier 1984: relative error ~1e-7 on that range), times 2^n. Below
// kMin, 2^n would leave the normal range: the attention kernels give 0 there.
#pragma once

namespace metalrt::cpu::fast {

struct ExpPoly {
  static constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  static constexpr float kMin = -87.3f;
  static constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
};

}  // namespace metalrt::cpu::fast
