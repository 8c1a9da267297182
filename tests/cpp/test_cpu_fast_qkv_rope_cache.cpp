// Gates of the CPU device's fast qkv_rope_cache (cpp/cpu/fast/rowwise/qkv_rope_cache.cpp): in the
// op-case table, bit-exact against the oracle (the composition of the CPU qkv_split,
// rope and reshape_and_cache) at the default model's decode and prefill shapes (9 q
// heads, 3 kv heads, head_dim 64, interleaved and NeoX), Qwen3's (head_dim 128, GQA 2),
// partial rotary, a padding slot and position 131072, f32/f16/bf16, the caches as
// mutated inputs; and its kept cos/sin row never serves another position or base.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "qkv_rope_cache_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

constexpr const char* kProvider = "cpu_fast_qkv_rope_cache";

const std::vector<FusedCase>& kCases = kQkvRopeCacheCases;
constexpr int64_t kBlocks = kQkvRopeCacheBlocks, kBlockSize = kQkvRopeCacheBlockSize;

struct Batch {
  Tensor qkv, positions, key_cache, value_cache, slots;
};

// Token t at position first + t, in QkvRopeCacheSlots(tokens).
Batch MakeBatch(const FusedCase& f, DType dtype, uint32_t seed) {
  const int64_t width = (f.heads + 2 * f.kv_heads) * f.head_dim;
  const Shape cache = {kBlocks, kBlockSize, f.kv_heads, f.head_dim};
  const int64_t cache_n = kBlocks * kBlockSize * f.kv_heads * f.head_dim;
  std::vector<int32_t> positions;
  for (int64_t t = 0; t < f.tokens; ++t) positions.push_back(f.first_position + static_cast<int32_t>(t));
  return {MakeFloat({f.tokens, width}, dtype, RandomValuesOf(dtype, f.tokens * width, seed)),
          MakeInts({f.tokens}, DType::kI32, positions), MakeFloat(cache, dtype, RandomValuesOf(dtype, cache_n, seed + 1)),
          MakeFloat(cache, dtype, RandomValuesOf(dtype, cache_n, seed + 2)), MakeInts({f.tokens}, DType::kI64, QkvRopeCacheSlots(f.tokens))};
}

OpCase MakeCase(const FusedCase& f, DType dtype, uint32_t seed) {
  const Batch b = MakeBatch(f, dtype, seed);
  OpCase c;
  c.name = "qkv_rope_cache/" + std::string(DTypeName(dtype)) + "/" + f.name + "/cpu_fast";
  c.op = "qkv_rope_cache";
  c.provider = kProvider;
  c.device = DeviceType::kCPU;
  c.inputs = {b.qkv, b.positions, b.key_cache, b.value_cache, b.slots};
  c.mutated_inputs = {2, 3};
  c.outputs = {{{f.tokens, f.heads, f.head_dim}, dtype}};
  c.run = [f](const Inputs& in, const Outputs& out) {
    ops::QkvRopeCache(in[0], in[1], in[2], in[3], in[4], f.heads, f.rotary_dim, 100000.0f, f.neox, out[0]);
    return Returned{};
  };
  c.match = Match::kBitExact;   // the oracle's own cos/sin and rotation functions
  return c;
}

}  // namespace

METALRT_OP_CASES(cpu_fast_qkv_rope_cache_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 27000;
  for (const FusedCase& f : kCases)
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) cases.push_back(MakeCase(f, dtype, seed += 10));
  return cases;
}

TEST_CASE("cpu fast qkv_rope_cache: the kept cos/sin row follows the position and the base") {
  const FusedCase f = kCases[0];
  // Consecutive calls as a decode step's layers make, then the next token, then another base.
  for (auto [position, base] : {std::pair{37, 1e5f}, std::pair{37, 1e5f}, std::pair{38, 1e5f}, std::pair{38, 1e4f}}) {
    CAPTURE(position);
    FusedCase g = f;
    g.first_position = position;
    std::vector<std::vector<uint8_t>> results[2];
    for (bool fast : {true, false}) {
      const Batch b = MakeBatch(g, DType::kF32, 5);
      SetProviderEnabled(kProvider, fast);
      ResetProviderStats();
      const Tensor q = ops::QkvRopeCache(b.qkv, b.positions, b.key_cache, b.value_cache, b.slots, g.heads,
                                         g.rotary_dim, base, g.neox);
      CHECK(GetProviderStats("qkv_rope_cache", DeviceType::kCPU).last_selected ==
            (fast ? kProvider : "cpu_qkv_rope_cache"));
      results[fast] = {Bytes(q), Bytes(b.key_cache), Bytes(b.value_cache)};
    }
    SetProviderEnabled(kProvider, true);
    CHECK(results[0] == results[1]);
  }
}
