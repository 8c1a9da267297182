// Gates of the fused QKV split + RoPE + KV-cache write (metal/qkv_rope_cache.metal): in
// the op-case table against the CPU oracle (the composition of the CPU qkv_split,
// rope_neox / rope_interleaved and reshape_and_cache) at the default model's shape (9
// q heads, 3 kv heads, head_dim 64), Qwen3's (head_dim 128, GQA 2), partial rotary,
// padding slots and large positions, with the caches as mutated inputs; bit-exact
// against the unfused Metal dispatches it replaces; bad arguments.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "qkv_rope_cache_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

const std::vector<FusedCase>& kCases = kQkvRopeCacheCases;
constexpr int64_t kBlocks = kQkvRopeCacheBlocks, kBlockSize = kQkvRopeCacheBlockSize;

OpCase MakeCase(const FusedCase& f, DType dtype, uint32_t seed) {
  const int64_t width = (f.heads + 2 * f.kv_heads) * f.head_dim;
  const Shape cache = {kBlocks, kBlockSize, f.kv_heads, f.head_dim};
  std::vector<int32_t> positions;
  for (int64_t t = 0; t < f.tokens; ++t) positions.push_back(f.first_position + static_cast<int32_t>(t));
  OpCase c;
  c.name = "qkv_rope_cache/" + std::string(gpu::KernelDTypeSuffix(dtype)) + "/" + f.name;
  c.op = "qkv_rope_cache";
  c.provider = "metal_qkv_rope_cache";
  c.kernels = {gpu::KernelName("qkv_rope_cache", f.neox ? "neox" : "interleaved", dtype)};
  const int64_t cache_n = kBlocks * kBlockSize * f.kv_heads * f.head_dim;
  c.inputs = {MakeFloat({f.tokens, width}, dtype, RandomValuesOf(dtype, f.tokens * width, seed)),
              MakeInts({f.tokens}, DType::kI32, positions),
              MakeFloat(cache, dtype, RandomValuesOf(dtype, cache_n, seed + 1)),
              MakeFloat(cache, dtype, RandomValuesOf(dtype, cache_n, seed + 2)),
              MakeInts({f.tokens}, DType::kI64, QkvRopeCacheSlots(f.tokens))};
  c.mutated_inputs = {2, 3};
  c.outputs = {{{f.tokens, f.heads, f.head_dim}, dtype}};
  c.run = [f](const Inputs& in, const Outputs& out) {
    ops::QkvRopeCache(in[0], in[1], in[2], in[3], in[4], f.heads, f.rotary_dim, 100000.0f, f.neox, out[0]);
    return Returned{};
  };
  // rope's bars: in-kernel cos/sin against the oracle's double-precision ones.
  c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 0.0};
  c.max_rel = 1e-6;
  return c;
}

}  // namespace

METALRT_OP_CASES(qkv_rope_cache_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 21000;
  for (const FusedCase& f : kCases)
    for (DType dtype : kFloatDTypes) cases.push_back(MakeCase(f, dtype, seed += 10));
  return cases;
}

TEST_CASE("metal qkv_rope_cache: bit-exact with qkv_split + rope + reshape_and_cache on Metal") {
  for (DType dtype : kFloatDTypes)
    for (bool neox : {true, false}) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(neox);
      const int64_t tokens = 3, heads = 9, kv = 3, dim = 64, width = (heads + 2 * kv) * dim;
      const Shape cache = {kBlocks, kBlockSize, kv, dim};
      const int64_t cache_n = kBlocks * kBlockSize * kv * dim;
      const Tensor qkv = ToMetal(MakeFloat({tokens, width}, dtype, RandomValuesOf(dtype, tokens * width, 3)));
      const Tensor positions = ToMetal(MakeInts({tokens}, DType::kI32, std::vector<int32_t>{9, 10, 11}));
      const Tensor slots = ToMetal(MakeInts({tokens}, DType::kI64, QkvRopeCacheSlots(tokens)));
      const Tensor kc_host = MakeFloat(cache, dtype, RandomValuesOf(dtype, cache_n, 4));
      const Tensor vc_host = MakeFloat(cache, dtype, RandomValuesOf(dtype, cache_n, 5));

      const Tensor kc = ToMetal(kc_host), vc = ToMetal(vc_host);
      auto [q, k, v] = ops::QkvSplit(qkv, heads * dim, kv * dim, kv * dim);
      const Tensor q3 = q.Reshape({tokens, heads, dim}), k3 = k.Reshape({tokens, kv, dim});
      const auto rope = neox ? ops::RopeNeox : ops::RopeInterleaved;
      rope(q3, positions, dim, 100000.0f, q3);
      rope(k3, positions, dim, 100000.0f, k3);
      ops::ReshapeAndCache(k3, v.Reshape({tokens, kv, dim}), kc, vc, slots);

      const Tensor fkc = ToMetal(kc_host), fvc = ToMetal(vc_host);
      const Tensor fq = PoisonedMetal({tokens, heads, dim}, dtype);
      const auto rows = ProfiledRows([&] {
        ops::QkvRopeCache(qkv, positions, fkc, fvc, slots, heads, dim, 100000.0f, neox, fq);
      });
      CHECK(rows.back().dispatches == 1);
      CHECK(ReadMetal(fq) == ReadMetal(q3));
      CHECK(ReadMetal(fkc) == ReadMetal(kc));
      CHECK(ReadMetal(fvc) == ReadMetal(vc));
      CHECK(ReadMetal(fkc) != ReadFloat(kc_host));
    }
}

TEST_CASE("qkv_rope_cache: bad arguments are errors naming the op") {
  const Tensor qkv = MakeFloat({2, 5 * 8}, DType::kF32, RandomValues(80, 1));
  const Tensor cache = MakeFloat({2, 4, 1, 8}, DType::kF32, RandomValues(64, 2));
  const Tensor cache2 = MakeFloat({2, 4, 1, 8}, DType::kF32, RandomValues(64, 3));
  const Tensor positions = MakeInts({2}, DType::kI32, std::vector<int32_t>{0, 1});
  const Tensor slots = MakeInts({2}, DType::kI64, std::vector<int64_t>{0, 1});
  // 2 heads + 2 x 1 kv head in 40 features: head_dim 10, which the 8-wide caches do not hold.
  CHECK_THROWS_WITH_AS(ops::QkvRopeCache(qkv, positions, cache, cache2, slots, 2, 8, 1e4f),
                       doctest::Contains("[qkv_rope_cache] key_cache must be [num_blocks, block_size, kv_heads, 10]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::QkvRopeCache(qkv, positions, cache, cache2, slots, 3, 7, 1e4f),
                       doctest::Contains("rotary_dim must be even"), std::invalid_argument);
  const Tensor far = MakeInts({2}, DType::kI64, std::vector<int64_t>{0, 8});
  CHECK_THROWS_WITH_AS(ops::QkvRopeCache(qkv, positions, cache, cache2, far, 3, 8, 1e4f),
                       doctest::Contains("beyond the cache"), std::invalid_argument);
}
