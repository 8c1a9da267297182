// Rows of a paged KV cache of any KvType (metalrt/kv_type.h) to and from f32: the CPU
// oracle of the cache write's quantization and of the attention's dequantization.
//
// Quantization of one block of 32 features x (GGML's reference quantizers):
//   q8_0: a = max |x|; d = a / 127; q = round-half-away(x / d) (0 when d == 0); d stored
//         as f16 (rounded after q is found, as GGML does).
//   q4_0: m = the x of largest |x| (the first of equal ones); d = m / -8;
//         q = min(15, trunc(x / d + 8.5)) (8 when d == 0); d stored as f16.
// Division is x * (1 / d) in f32, as GGML computes it. Dequantization: x = f16(d) * q
// (q8_0) or f16(d) * (q - 8) (q4_0), in f32.
#pragma once
#include <cstdint>

#include "metalrt/kv_type.h"

namespace metalrt::cpu {

// Quantizes / rounds the f32 features src[0 .. head_dim) into row `row` of a cache of
// `type` (row: slot * kv_heads + kv head).
void StoreKvRow(void* cache, KvType type, int64_t row, int64_t head_dim, const float* src);
// dst[0 .. rows * head_dim) = rows row .. row + rows - 1 of the cache, as f32.
void LoadKvRows(const void* cache, KvType type, int64_t row, int64_t rows, int64_t head_dim, float* dst);

}  // namespace metalrt::cpu
