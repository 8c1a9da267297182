#include <doctest/doctest.h>

#include "metalrt/errors.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

TEST_CASE("reshape_and_cache: vLLM paged layout, padded slot skipped, untouched bytes kept") {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CAPTURE(DTypeName(dtype));
    const int64_t blocks = 5, block_size = 16, kv_heads = 3, head_dim = 33;
    const int64_t row = kv_heads * head_dim;
    const std::vector<int64_t> slots = {17, -1, 0, 79, 16, 40};   // 79 = last slot
    const int64_t tokens = static_cast<int64_t>(slots.size());
    Tensor key = MakeFloat({tokens, kv_heads, head_dim}, dtype, RandomValues(tokens * row, 3));
    Tensor value = MakeFloat({tokens, kv_heads, head_dim}, dtype, RandomValues(tokens * row, 4));
    const Shape cache_shape = {blocks, block_size, kv_heads, head_dim};
    const std::vector<double> k_before = RandomValues(blocks * block_size * row, 5);
    const std::vector<double> v_before = RandomValues(blocks * block_size * row, 6);
    Tensor key_cache = MakeFloat(cache_shape, dtype, k_before);
    Tensor value_cache = MakeFloat(cache_shape, dtype, v_before);
    // Expected caches: the old bytes, with token t's row at slot[t] (block slot/16, row slot%16).
    const std::vector<uint8_t> k_old = Bytes(key_cache);
    std::vector<uint8_t> k_expect = k_old, v_expect = Bytes(value_cache);
    const std::vector<uint8_t> k_src = Bytes(key), v_src = Bytes(value);
    const size_t row_bytes = static_cast<size_t>(row) * DTypeSize(dtype);
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      const size_t dst = static_cast<size_t>((slots[t] / block_size) * block_size + slots[t] % block_size);
      std::memcpy(k_expect.data() + dst * row_bytes, k_src.data() + t * row_bytes, row_bytes);
      std::memcpy(v_expect.data() + dst * row_bytes, v_src.data() + t * row_bytes, row_bytes);
    }
    ops::ReshapeAndCache(key, value, key_cache, value_cache,
                         MakeInts<int64_t>({tokens}, DType::kI64, slots));
    CHECK(Bytes(key_cache) == k_expect);
    CHECK(Bytes(value_cache) == v_expect);
    CHECK(Bytes(key_cache) != k_old);   // the op did write
  }
}

TEST_CASE("reshape_and_cache: bad inputs") {
  Tensor key = MakeFloat({2, 2, 4}, DType::kF32, RandomValues(16, 1));
  Tensor cache = MakeFloat({3, 4, 2, 4}, DType::kF32, RandomValues(96, 2));
  Tensor cache2 = MakeFloat({3, 4, 2, 4}, DType::kF32, RandomValues(96, 2));
  const std::vector<uint8_t> before = Bytes(cache);
  CHECK_THROWS_WITH_AS(
      ops::ReshapeAndCache(key, key, cache, cache2, MakeInts<int64_t>({2}, DType::kI64, {3, 12})),
      doctest::Contains("[reshape_and_cache] slot 12 of token 1 is beyond the cache of 3 blocks x 4 slots"),
      std::invalid_argument);
  CHECK(Bytes(cache) == before);   // checked before any write
  CHECK_THROWS_WITH_AS(
      ops::ReshapeAndCache(key, key, cache, cache2, MakeInts<int32_t>({2}, DType::kI32, {0, 1})),
      doctest::Contains("[reshape_and_cache] slot_mapping must be int64, got int32"), TypeError);
  // A cache of another float dtype is written rounded (test_kv_cache_types.cpp); an
  // integer cache holds no KV type.
  Tensor int_cache = MakeInts<int32_t>({3, 4, 2, 4}, DType::kI32, std::vector<int32_t>(96, 0));
  CHECK_THROWS_WITH_AS(
      ops::ReshapeAndCache(key, key, int_cache, int_cache, MakeInts<int64_t>({2}, DType::kI64, {0, 1})),
      doctest::Contains("[reshape_and_cache] key_cache must be [num_blocks, block_size, kv_heads, 4] of float32, "
                        "float16 or bfloat16"),
      std::invalid_argument);
  Tensor wide = MakeFloat({3, 4, 2, 8}, DType::kF32, RandomValues(192, 2));
  CHECK_THROWS_WITH_AS(
      ops::ReshapeAndCache(key, key, wide, wide, MakeInts<int64_t>({2}, DType::kI64, {0, 1})),
      doctest::Contains("[reshape_and_cache] key_cache must be [num_blocks, block_size, kv_heads, 4]"),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ops::ReshapeAndCache(key, key, cache.Reshape({12, 8}), cache2, MakeInts<int64_t>({2}, DType::kI64, {0, 1})),
      doctest::Contains("[reshape_and_cache] key_cache must have rank 4"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ops::ReshapeAndCache(key, key, cache, cache2, MakeInts<int64_t>({3}, DType::kI64, {0, 1, 2})),
      doctest::Contains("[reshape_and_cache] slot_mapping must have shape [2], got [3]"),
      std::invalid_argument);
}
