// The bf16 prefill GEMM on AMX tiles (compiled with -mamx-tile -mamx-bf16 and AVX-512
// F, see fast.cmake; called only where cpu_features.cpp found AMX-BF16 and the OS
// granted the tile state). Internal linkage for everything but the entry point.
//
// TDPBF16PS C, A, B adds to each f32 C[i][j] the 32-term dot product of A's row i (32
// bf16, 16 pairs) and B's column j of pairs (B's 16 rows hold pair p of 16 columns).
// Here A is 16 weight rows straight from the bf16 rows (stride k), and B is 16 pairs of
// a packed block of 16 activation rows (gemm_bf16.h: 64 contiguous bytes per pair), so
// C is the output's 16 x 16 tile transposed (weight rows down): it is transposed in
// ZMM registers on the way out.
//
// Register blocking: 2 x 2 C tiles (32 weight rows x 32 activation rows) in tmm0-3, the
// two A tiles in tmm4-5 and the two B tiles in tmm6-7: per 32 k, 4 tile loads of 1 KB
// and 4 TDPBF16PS.
#include "cpu/fast/prefill/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace metalrt::cpu::fast {
namespace {

constexpr int kTile = 16;   // rows of every tile; 64 bytes (16 f32, 32 bf16, 16 pairs) a row

// The LDTILECFG operand, palette 1: tile t has rows[t] rows of colsb[t] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void ConfigureTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kTile;
  }
  _tile_loadconfig(&cfg);
}

// Writes the transpose of tile[16][16] (rows: weight rows) into c: c[l * ldc + i] =
// tile[i][l] for activation rows l < acts and weight rows i < weights.
void StoreTransposed(const float* tile, float* c, int64_t ldc, int64_t acts, int64_t weights) {
  __m512 r[kTile], t[kTile];
  for (int i = 0; i < kTile; ++i) r[i] = _mm512_load_ps(tile + i * kTile);
  // Pairs of rows interleaved (32-bit), then quads (64-bit): u[4 g + q]'s 128-bit lane j
  // holds column 4 j + q of rows 4 g .. 4 g + 3.
  for (int i = 0; i < kTile; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    const __m512 lo0 = t[4 * g], hi0 = t[4 * g + 1], lo1 = t[4 * g + 2], hi1 = t[4 * g + 3];
    r[4 * g] = _mm512_shuffle_ps(lo0, lo1, 0x44);
    r[4 * g + 1] = _mm512_shuffle_ps(lo0, lo1, 0xEE);
    r[4 * g + 2] = _mm512_shuffle_ps(hi0, hi1, 0x44);
    r[4 * g + 3] = _mm512_shuffle_ps(hi0, hi1, 0xEE);
  }
  // Then the 128-bit lanes: column 4 j + q is lane j of r[q], r[4 + q], r[8 + q], r[12 + q].
  const __mmask16 mask = static_cast<__mmask16>((1u << weights) - 1);
  for (int q = 0; q < 4; ++q) {
    const __m512 v_even = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88), v_odd = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
    const __m512 w_even = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88),
                 w_odd = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
    const __m512 columns[4] = {_mm512_shuffle_f32x4(v_even, w_even, 0x88), _mm512_shuffle_f32x4(v_odd, w_odd, 0x88),
                               _mm512_shuffle_f32x4(v_even, w_even, 0xDD), _mm512_shuffle_f32x4(v_odd, w_odd, 0xDD)};
    for (int j = 0; j < 4; ++j) {
      const int64_t l = 4 * j + q;
      if (l < acts) _mm512_mask_storeu_ps(c + l * ldc, mask, columns[j]);
    }
  }
}

// One register block: kGroups (1-2) tiles of 16 weight rows (w0, w1: row-major, stride
// k) by kBlocks (1-2) packed activation blocks (a0, a1: k / 2 pairs of 16 rows each).
// tile[i][l] = c[l * ldc + i] for activation rows l < acts and weight rows i < weights,
// else 0: the C tile that StoreTransposed wrote.
void LoadTransposed(const float* c, int64_t ldc, int64_t acts, int64_t weights, float* tile) {
  std::fill(tile, tile + kTile * kTile, 0.0f);
  for (int64_t l = 0; l < std::min<int64_t>(kTile, acts); ++l)
    for (int64_t i = 0; i < std::min<int64_t>(kTile, weights); ++i) tile[i * kTile + l] = c[l * ldc + i];
}

template <int kGroups, int kBlocks>
void Block(const uint16_t* w0, const uint16_t* w1, const uint32_t* a0, const uint32_t* a1, int64_t k, float* c,
           int64_t ldc, int64_t acts, int64_t weights, bool accumulate) {
  const int64_t w_stride = k * static_cast<int64_t>(sizeof(uint16_t));
  alignas(64) float tile[kTile * kTile];
  // C tile t = group * 2 + block, from c's values (accumulate) or 0. The tile number of
  // _tile_loadd must be a constant.
  auto start = [&](int64_t group, int64_t block) {
    LoadTransposed(c + block * kTile * ldc + group * kTile, ldc, acts - block * kTile, weights - group * kTile, tile);
  };
  if (accumulate) {
    start(0, 0);
    _tile_loadd(0, tile, 64);
    if constexpr (kBlocks == 2) {
      start(0, 1);
      _tile_loadd(1, tile, 64);
    }
    if constexpr (kGroups == 2) {
      start(1, 0);
      _tile_loadd(2, tile, 64);
    }
    if constexpr (kGroups == 2 && kBlocks == 2) {
      start(1, 1);
      _tile_loadd(3, tile, 64);
    }
  } else {
    _tile_zero(0);
    if constexpr (kBlocks == 2) _tile_zero(1);
    if constexpr (kGroups == 2) _tile_zero(2);
    if constexpr (kGroups == 2 && kBlocks == 2) _tile_zero(3);
  }
  for (int64_t kk = 0; kk < k; kk += kAmxK) {
    const int64_t pair = kk / 2;
    _tile_loadd(4, w0 + kk, w_stride);
    _tile_loadd(6, a0 + pair * kTile, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kBlocks == 2) {
      _tile_loadd(7, a1 + pair * kTile, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kGroups == 2) {
      _tile_loadd(5, w1 + kk, w_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kBlocks == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  auto store = [&](int64_t group, int64_t block) {
    StoreTransposed(tile, c + block * kTile * ldc + group * kTile, ldc, std::min<int64_t>(kTile, acts - block * kTile),
                    std::min<int64_t>(kTile, weights - group * kTile));
  };
  _tile_stored(0, tile, 64);
  store(0, 0);
  if constexpr (kBlocks == 2) {
    _tile_stored(1, tile, 64);
    store(0, 1);
  }
  if constexpr (kGroups == 2) {
    _tile_stored(2, tile, 64);
    store(1, 0);
  }
  if constexpr (kGroups == 2 && kBlocks == 2) {
    _tile_stored(3, tile, 64);
    store(1, 1);
  }
}

using BlockFn = void (*)(const uint16_t*, const uint16_t*, const uint32_t*, const uint32_t*, int64_t, float*, int64_t,
                         int64_t, int64_t, bool);
constexpr BlockFn kBlocks[2][2] = {{Block<1, 1>, Block<1, 2>}, {Block<2, 1>, Block<2, 2>}};

}  // namespace

void GemmBf16Amx(const uint32_t* packed_a, int64_t m, int64_t k, const uint16_t* w, int64_t count, float* c,
                 int64_t ldc, bool accumulate) {
  const int64_t pairs = k / 2, blocks = (m + kTile - 1) / kTile, groups = (count + kTile - 1) / kTile;
  // A partial last group of weight rows is read from a zero-padded copy: a tile load
  // reads 16 whole rows, and the caller's rows end at `count`.
  const int64_t tail_rows = count % kTile;
  static thread_local std::vector<uint16_t> tail;
  if (tail_rows != 0) {
    tail.assign(static_cast<size_t>(kTile * k), 0);
    std::memcpy(tail.data(), w + (count - tail_rows) * k, static_cast<size_t>(tail_rows * k) * sizeof(uint16_t));
  }
  auto group_rows = [&](int64_t g) { return tail_rows != 0 && g == groups - 1 ? tail.data() : w + g * kTile * k; };
  ConfigureTiles();
  for (int64_t b = 0; b < blocks; b += 2) {
    const int64_t nb = std::min<int64_t>(2, blocks - b);
    const uint32_t* a0 = packed_a + b * pairs * kTile;
    const uint32_t* a1 = nb == 2 ? a0 + pairs * kTile : nullptr;
    for (int64_t g = 0; g < groups; g += 2) {
      const int64_t ng = std::min<int64_t>(2, groups - g);
      kBlocks[ng - 1][nb - 1](group_rows(g), ng == 2 ? group_rows(g + 1) : nullptr, a0, a1, k,
                              c + b * kTile * ldc + g * kTile, ldc, m - b * kTile, count - g * kTile, accumulate);
    }
  }
  _tile_release();   // back to the init state: no 8 KB of tile data saved at each context switch
}

}  // namespace metalrt::cpu::fast
#else
#include <stdexcept>

namespace metalrt::cpu::fast {
// Off x86 CpuHasAmxBf16() is false; this only satisfies the linker.
void GemmBf16Amx(const uint32_t*, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t, bool) {
  throw std::logic_error("the AMX GEMM exists only on x86-64");
}
}  // namespace metalrt::cpu::fast
#endif
