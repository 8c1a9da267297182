// The element types a paged KV cache holds (llama.cpp's -ctk / -ctv types).
//
// A float cache is a tensor of its dtype [num_blocks, block_size, kv_heads, head_dim].
// A quantized cache is a uint8 tensor [num_blocks, block_size, kv_heads, row_bytes]: each
// (slot, kv head) row of head_dim features is head_dim / 32 blocks of 32 features, in
// GGML's block layouts (ggml-common.h's block_q8_0 / block_q4_0):
//   q8_0: 34 bytes = f16 scale d, then 32 int8 q;        x = d * q
//   q4_0: 18 bytes = f16 scale d, then 16 bytes of nibbles (byte i: feature i in the low
//         nibble, feature i + 16 in the high one);     x = d * (q - 8)
// so the type of a cache follows from its dtype and last dimension (KvTypeOf).
#pragma once
#include <cstdint>
#include <string>

#include "metalrt/tensor.h"

namespace metalrt {

// The values are metal/kv_cache_types.h's kKv* codes (the kernels' function constants).
enum class KvType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ4_0 = 4 };

constexpr int64_t kKvQuantBlock = 32;   // features per quantized block

inline bool IsQuantized(KvType type) { return type == KvType::kQ8_0 || type == KvType::kQ4_0; }

// Bytes of one quantized block (34, 18), or of one element of a float type.
int64_t KvBlockBytes(KvType type);
// Bytes of one (slot, kv head) row of head_dim features.
int64_t KvRowBytes(KvType type, int64_t head_dim);
// The cache's last dimension for head_dim features: head_dim, or the row's bytes.
int64_t KvRowWidth(KvType type, int64_t head_dim);
const char* KvTypeName(KvType type);   // "float32", "float16", "bfloat16", "q8_0", "q4_0"

// The type of `cache` ([num_blocks, block_size, kv_heads, width]) holding rows of
// head_dim features; std::invalid_argument naming `op`, `arg` and the accepted layouts
// when it holds none.
KvType KvTypeOf(const Tensor& cache, int64_t head_dim, const char* op, const char* arg);

}  // namespace metalrt
