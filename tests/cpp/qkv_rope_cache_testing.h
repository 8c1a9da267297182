// The qkv_rope_cache gates' shapes, shared by the Metal kernel's
// (test_metal_qkv_rope_cache.cpp) and the fast CPU provider's
// (test_cpu_fast_qkv_rope_cache.cpp): the default model's (9 q heads, 3 kv heads,
// head_dim 64), Qwen3's (head_dim 128, GQA 2), partial rotary, padding slots and large
// positions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace metalrt::testing {

struct FusedCase {
  std::string name;
  int64_t tokens, heads, kv_heads, head_dim, rotary_dim;
  bool neox;
  int32_t first_position;
};

inline const std::vector<FusedCase> kQkvRopeCacheCases = {
    {"smollm2/decode", 1, 9, 3, 64, 64, false, 37},
    {"smollm2/prefill7", 7, 9, 3, 64, 64, false, 0},
    {"smollm2/neox_decode", 1, 9, 3, 64, 64, true, 4095},
    {"qwen3/gqa2", 3, 4, 2, 128, 128, true, 100},
    {"partial_rotary", 2, 2, 1, 64, 32, true, 5},
    {"position131072", 2, 3, 1, 64, 64, true, 131072},
};

inline constexpr int64_t kQkvRopeCacheBlocks = 4, kQkvRopeCacheBlockSize = 16;

// Token t at position first + t, in slot 3 + 5 t; token 1 of a batch of >= 3 is
// padding (-1).
inline std::vector<int64_t> QkvRopeCacheSlots(int64_t tokens) {
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < tokens; ++t) slots.push_back(tokens >= 3 && t == 1 ? -1 : 3 + 5 * t);
  return slots;
}

}  // namespace metalrt::testing
