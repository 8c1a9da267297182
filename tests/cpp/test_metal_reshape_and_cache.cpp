// Gates of the Metal reshape_and_cache kernels (metal/reshape_and_cache.metal): the
// paged KV-cache write at OPT-125m (12 kv heads x 64) and Qwen3 (8 x 128) geometry with
// block_size 16, every dtype on a small geometry, padded -1 slots; bit-exact against
// the CPU oracle through the op-case table, comparing the whole caches (random bytes
// beforehand, so a stray or missing write anywhere shows). Plus the kernel's own
// answer to a slot beyond the cache, and the entry point's check.
#include <doctest/doctest.h>

#include <cstring>

#include "metal_op_testing.h"
#include "op_cases.h"
#include "reshape_and_cache_args.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct Geometry {
  int64_t num_blocks, block_size, kv_heads, head_dim;
};

OpCase CacheCase(DType dtype, Geometry g, std::vector<int64_t> slots, uint32_t seed,
                 const std::string& variant) {
  const auto tokens = static_cast<int64_t>(slots.size());
  OpCase c;
  c.name = CaseName("reshape_and_cache", dtype, {tokens, g.kv_heads, g.head_dim}, variant);
  c.op = "reshape_and_cache";
  c.provider = "metal_reshape_and_cache";
  c.kernels = {gpu::KernelName("reshape_and_cache", "", dtype)};
  const Shape rows = {tokens, g.kv_heads, g.head_dim};
  const Shape cache = {g.num_blocks, g.block_size, g.kv_heads, g.head_dim};
  c.inputs = {RandomBits(rows, dtype, seed), RandomBits(rows, dtype, seed + 1),
              RandomBits(cache, dtype, seed + 2), RandomBits(cache, dtype, seed + 3),
              MakeInts<int64_t>({tokens}, DType::kI64, slots)};
  c.mutated_inputs = {2, 3};
  c.run = [](const Inputs& in, const Outputs&) {
    ops::ReshapeAndCache(in[0], in[1], in[2], in[3], in[4]);
    return Returned{};
  };
  c.match = Match::kBitExact;
  return c;
}

// Slots of a prefill of `tokens` tokens from slot `first` on, then `padding` -1 slots.
std::vector<int64_t> PrefillSlots(int64_t first, int64_t tokens, int64_t padding) {
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < tokens; ++t) slots.push_back(first + t);
  slots.insert(slots.end(), static_cast<size_t>(padding), -1);
  return slots;
}

}  // namespace

METALRT_OP_CASES(reshape_and_cache_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1300;
  const Geometry opt{6, 16, 12, 64}, qwen3{5, 16, 8, 128};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    // Batched decode: three requests' next tokens in different blocks, one padded row.
    cases.push_back(CacheCase(dtype, opt, {17, -1, 3, 95}, seed += 4, "opt125m/decode"));
    cases.push_back(CacheCase(dtype, qwen3, {79, 40, -1}, seed += 4, "qwen3/decode"));
    // A prefill crossing a block boundary (slots 13..45), padded to 36 rows.
    cases.push_back(CacheCase(dtype, opt, PrefillSlots(13, 33, 3), seed += 4, "opt125m/prefill"));
    cases.push_back(CacheCase(dtype, qwen3, PrefillSlots(30, 33, 1), seed += 4, "qwen3/prefill"));
  }
  for (DType dtype : kAllDTypes)
    cases.push_back(CacheCase(dtype, {3, 16, 2, 3}, {0, -1, 47, 16, 15}, seed += 4, "small"));
  return cases;
}

TEST_CASE("metal reshape_and_cache: a slot beyond the cache that reaches the kernel is skipped") {
  // The entry point rejects such slots when it can read them, so the kernel is
  // launched directly here, as a device whose slots the host cannot read would run it.
  const Tensor rows_cpu = RandomBits({3, 1, 4}, DType::kF32, 1390);
  const Tensor expected = RandomBits({2, 2, 1, 4}, DType::kF32, 1391);
  const Tensor rows = ToMetal(rows_cpu);
  const Tensor cache = ToMetal(expected);
  const Tensor slots = ToMetal(MakeInts<int64_t>({3}, DType::kI64, {4, 1, -1}));
  gpu::KernelLaunch("reshape_and_cache_f32")
      .input(0, rows)
      .input(1, rows)
      .input(2, slots)
      .output(3, cache)
      .output(4, cache)
      .bytes(5, ReshapeAndCacheArgs{4, 4, 0})
      .threads({4, 3, 1}, {kReshapeAndCacheThreads, 1, 1});
  // Only token 1 (slot 1: the cache's second row) is written.
  std::memcpy(static_cast<char*>(expected.data()) + 16, static_cast<const char*>(rows_cpu.data()) + 16, 16);
  CHECK(Bytes(CopyToDevice(cache, DeviceType::kCPU)) == Bytes(expected));
}

TEST_CASE("metal reshape_and_cache: the entry point rejects a slot beyond the cache, leaving it untouched") {
  const Tensor init = RandomBits({2, 4, 1, 8}, DType::kF16, 1392);
  const Tensor cache = ToMetal(init);
  const Tensor rows = ToMetal(RandomBits({2, 1, 8}, DType::kF16, 1393));
  ResetProviderStats();
  CheckThrows<std::invalid_argument>(
      [&] { ops::ReshapeAndCache(rows, rows, cache, cache, ToMetal(MakeInts<int64_t>({2}, DType::kI64, {0, 8}))); },
      "[reshape_and_cache] slot 8 of token 1 is beyond the cache of 2 blocks x 4 slots");
  CHECK(GetProviderStats("reshape_and_cache", DeviceType::kMETAL).calls == 0);
  CHECK(Bytes(CopyToDevice(cache, DeviceType::kCPU)) == Bytes(init));
}
