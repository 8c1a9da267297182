// The fast GEMV's decoders of the 2- and 3-bit K-quants (Q3_K, Q2_K): each 256-value
// super-block as eight 32-value blocks of codes plus the scales of their 16-value
// halves, which gemv_kernel.h's VisitRow feeds to its sink. Layouts: ggml-common.h
// block_q3_K / block_q2_K, as the oracle reads them (cpu/quantized_blocks.cpp): value
// e = 128h + 32s + l takes its 2 low bits from qs[32h + l] at bit 2s, so block
// j = 4h + s reads one 32-byte run of qs at one shift and the loops vectorise.
#pragma once
#include <cstdint>

namespace metalrt::cpu::fast {

inline constexpr int kQ3KBytes = 110;   // hmask[32], qs[64], scales[12], d
inline constexpr int kQ2KBytes = 84;    // scales[16], qs[64], d, dmin

// Q3_K block j's codes u = q + 4 in 0..7: low bits from qs, bit j of hmask[l] as bit 2
// (q = low - 4 when that bit is clear).
inline void Q3KCodes(const uint8_t* block, int j, uint8_t* u) {
  const uint8_t* hmask = block;
  const uint8_t* qs = block + 32 + 32 * (j / 4);
  const int shift = 2 * (j % 4);
  for (int l = 0; l < 32; ++l) u[l] = uint8_t(((qs[l] >> shift) & 3) | ((hmask[l] >> j) & 1) << 2);
}

// Q3_K's sixteen signed 6-bit scales: low nibble of byte i % 8 (the high one for i >= 8),
// top two bits of byte 8 + i % 4 at bit 2 (i / 4), minus 32.
inline void Q3KScales(const uint8_t* block, int* sc) {
  const uint8_t* s = block + 96;
  for (int i = 0; i < 16; ++i)
    sc[i] = (((s[i % 8] >> (4 * (i / 8))) & 15) | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32;
}

// Q2_K block j's codes in 0..3.
inline void Q2KCodes(const uint8_t* block, int j, uint8_t* u) {
  const uint8_t* qs = block + 16 + 32 * (j / 4);
  const int shift = 2 * (j % 4);
  for (int l = 0; l < 32; ++l) u[l] = uint8_t((qs[l] >> shift) & 3);
}

}  // namespace metalrt::cpu::fast
