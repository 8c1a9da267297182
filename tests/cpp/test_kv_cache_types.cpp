// Op cases of the KV cache types (metalrt/kv_type.h: q8_0 and q4_0 blocks, a float
// cache of another dtype than the rows'), each against the CPU oracle through the
// op-case table (poisoned outputs with guards, the kernels counted by the profiler,
// the native provider serving every call):
// * reshape_and_cache and qkv_rope_cache writing q8_0 / q4_0 / float16 caches: Metal
//   (reshape_and_cache_kv_*, qkv_rope_cache_kv_*) and the CPU fast qkv_rope_cache,
//   bit-exact (Metal's fused keys at rope's bars), the whole caches compared as mutated
//   inputs (random bytes beforehand, so a stray or missing write shows);
// * paged_attention reading them in place: the Metal decode, split-decode and prefill
//   kernels and the CPU fast decode provider, at the oracle's bars.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "metal_op_testing.h"
#include "metalrt/kv_type.h"
#include "op_cases.h"
#include "paged_attention_args.h"
#include "paged_attention_testing.h"
#include "qkv_rope_cache_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct KvPair {
  KvType key, value;
  const char* name;
};
const std::vector<KvPair> kPairs = {{KvType::kQ8_0, KvType::kQ8_0, "q8_0"},
                                    {KvType::kQ4_0, KvType::kQ4_0, "q4_0"},
                                    {KvType::kQ8_0, KvType::kF16, "q8_0_f16"}};
// Metal's fused write: RoPE's in-kernel cos/sin are not the oracle's (rope's bars), so a
// rotated key can differ by an ulp and its quantized block by a code; its keys go to a
// float16 cache (compared at rope's bars) and its values, copied, are quantized
// bit-exactly. (Fused against unfused Metal ops, byte for byte with quantized keys:
// tests/python/test_kv_types.py.)
const std::vector<KvPair> kMetalFusedPairs = {{KvType::kF16, KvType::kQ8_0, "f16_q8_0"},
                                              {KvType::kF16, KvType::kQ4_0, "f16_q4_0"}};

DType StorageDType(KvType type) {
  return IsQuantized(type) ? DType::kU8
                           : type == KvType::kF32 ? DType::kF32 : type == KvType::kF16 ? DType::kF16 : DType::kBF16;
}

Shape CacheShape(int64_t blocks, int64_t block_size, int64_t kv_heads, int64_t head_dim, KvType type) {
  return {blocks, block_size, kv_heads, KvRowWidth(type, head_dim)};
}

// A cache of `type` holding the rows of the float cache `cache` (the CPU oracle's write).
Tensor ConvertCache(const Tensor& cache, KvType type) {
  const int64_t slots = cache.dim(0) * cache.dim(1), kv_heads = cache.dim(2), head_dim = cache.dim(3);
  const Tensor out = Tensor::Empty(CacheShape(cache.dim(0), cache.dim(1), kv_heads, head_dim, type),
                                   StorageDType(type), DeviceType::kCPU);
  std::vector<int64_t> all(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) all[static_cast<size_t>(s)] = s;
  const Tensor rows = cache.Reshape({slots, kv_heads, head_dim});
  ops::ReshapeAndCache(rows, rows, out, Tensor::Empty(out.shape(), out.dtype(), DeviceType::kCPU),
                       MakeInts<int64_t>({slots}, DType::kI64, all));
  return out;
}

// A cache's contents before a write: random bytes for a quantized side, random values
// (no NaN patterns, which a close comparison would take for unwritten) for a float one.
Tensor InitialCache(const Shape& shape, KvType type, uint32_t seed) {
  if (IsQuantized(type)) return RandomBits(shape, DType::kU8, seed);
  const DType dtype = StorageDType(type);
  return MakeFloat(shape, dtype, RandomValuesOf(dtype, static_cast<size_t>(Numel(shape)), seed));
}

OpCase WriteCase(const KvPair& kv, DType dtype, int64_t kv_heads, int64_t head_dim, std::vector<int64_t> slots,
                 uint32_t seed, const std::string& variant) {
  const auto tokens = static_cast<int64_t>(slots.size());
  const Shape rows = {tokens, kv_heads, head_dim};
  OpCase c;
  c.name = CaseName("reshape_and_cache", dtype, rows, std::string(kv.name) + "/" + variant);
  c.op = "reshape_and_cache";
  c.provider = "metal_reshape_and_cache";
  c.kernels = {gpu::KernelName("reshape_and_cache", "kv", dtype)};
  c.inputs = {MakeFloat(rows, dtype, RandomValuesOf(dtype, tokens * kv_heads * head_dim, seed, -4.0, 4.0)),
              MakeFloat(rows, dtype, RandomValuesOf(dtype, tokens * kv_heads * head_dim, seed + 1, -4.0, 4.0)),
              InitialCache(CacheShape(4, 16, kv_heads, head_dim, kv.key), kv.key, seed + 2),
              InitialCache(CacheShape(4, 16, kv_heads, head_dim, kv.value), kv.value, seed + 3),
              MakeInts<int64_t>({tokens}, DType::kI64, slots)};
  c.mutated_inputs = {2, 3};
  c.run = [](const Inputs& in, const Outputs&) {
    ops::ReshapeAndCache(in[0], in[1], in[2], in[3], in[4]);
    return Returned{};
  };
  c.match = Match::kBitExact;
  return c;
}

OpCase FusedWriteCase(const FusedCase& f, const KvPair& kv, DType dtype, DeviceType device, uint32_t seed) {
  const int64_t width = (f.heads + 2 * f.kv_heads) * f.head_dim;
  std::vector<int32_t> positions;
  for (int64_t t = 0; t < f.tokens; ++t) positions.push_back(f.first_position + static_cast<int32_t>(t));
  OpCase c;
  c.name = "qkv_rope_cache/" + std::string(DTypeName(dtype)) + "/" + f.name + "/" + kv.name +
           (device == DeviceType::kCPU ? "/cpu_fast" : "");
  c.op = "qkv_rope_cache";
  c.device = device;
  c.provider = device == DeviceType::kCPU ? "cpu_fast_qkv_rope_cache" : "metal_qkv_rope_cache";
  if (device == DeviceType::kMETAL)
    c.kernels = {gpu::KernelName("qkv_rope_cache", f.neox ? "kv_neox" : "kv_interleaved", dtype)};
  const Shape k_shape = CacheShape(kQkvRopeCacheBlocks, kQkvRopeCacheBlockSize, f.kv_heads, f.head_dim, kv.key);
  const Shape v_shape = CacheShape(kQkvRopeCacheBlocks, kQkvRopeCacheBlockSize, f.kv_heads, f.head_dim, kv.value);
  c.inputs = {MakeFloat({f.tokens, width}, dtype, RandomValuesOf(dtype, f.tokens * width, seed, -3.0, 3.0)),
              MakeInts({f.tokens}, DType::kI32, positions), InitialCache(k_shape, kv.key, seed + 1),
              InitialCache(v_shape, kv.value, seed + 2),
              MakeInts({f.tokens}, DType::kI64, QkvRopeCacheSlots(f.tokens))};
  c.mutated_inputs = {2, 3};
  c.outputs = {{{f.tokens, f.heads, f.head_dim}, dtype}};
  c.run = [f](const Inputs& in, const Outputs& out) {
    ops::QkvRopeCache(in[0], in[1], in[2], in[3], in[4], f.heads, f.rotary_dim, 100000.0f, f.neox, out[0]);
    return Returned{};
  };
  if (device == DeviceType::kCPU) {
    c.match = Match::kBitExact;   // the oracle's own cos/sin and rotation functions
  } else {
    c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 0.0};
    c.max_rel = 1e-6;
  }
  return c;
}

// The kernels a Metal batch dispatches (test_metal_paged_attention.cpp's rule).
std::vector<std::string> AttentionKernels(const Lens& lens, DType dtype) {
  int32_t partitions = 0;
  bool prefill = false;
  for (const auto& [q_len, seq_len] : lens) {
    if (q_len == 1) partitions = std::max(partitions, DecodePartitions(seq_len, 0));
    prefill |= q_len > 1;
  }
  const std::string suffix = gpu::KernelDTypeSuffix(dtype);
  std::vector<std::string> kernels;
  if (partitions > 1) {
    kernels = {"paged_attention_decode_split_" + suffix, "paged_attention_decode_merge_" + suffix};
  } else if (partitions > 0) {
    kernels = {"paged_attention_decode_" + suffix};
  }
  if (prefill) kernels.push_back("paged_attention_prefill_" + suffix);
  return kernels;
}

OpCase AttentionCaseOf(const AttentionCase& a, const KvPair& kv, DType dtype, DeviceType device, uint32_t seed) {
  AttentionGeometry g{a.heads, a.kv_heads, a.head_dim, a.block_size, 0, 0};
  const AttentionBatch bt = MakeAttentionBatch(ShuffledRequests(a.lens, g, seed), g, DType::kF32, seed);
  OpCase c;
  c.name = std::string("paged_attention/") + DTypeName(dtype) + "/" + a.name + "/" + kv.name +
           (device == DeviceType::kCPU ? "/cpu_fast" : "");
  c.op = "paged_attention";
  c.device = device;
  c.provider = device == DeviceType::kCPU ? "cpu_fast_paged_attention" : "metal_paged_attention";
  if (device == DeviceType::kMETAL) c.kernels = AttentionKernels(a.lens, dtype);
  c.inputs = {dtype == DType::kF32 ? bt.query : ops::Cast(bt.query, dtype),
              ConvertCache(bt.key_cache, kv.key), ConvertCache(bt.value_cache, kv.value), bt.block_tables,
              bt.seq_lens, bt.query_start_loc};
  c.outputs = {{bt.query.shape(), dtype}};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  c.run = [scale](const Inputs& in, const Outputs& out) {
    ops::PagedAttention(in[0], in[1], in[2], in[3], in[4], in[5], scale, out[0]);
    return Returned{};
  };
  // The same dequantized values on both sides: only the order of the f32 sums differs.
  c.nmse = dtype == DType::kF32 ? 1e-10 : 5e-4;
  c.bar = {dtype == DType::kF32 ? 0.0 : 2 * UnitRoundoff(dtype), 1e-5};
  return c;
}

const std::vector<AttentionCase> kAttention = {
    {"smollm2/decode/ctx128", 9, 3, 64, 16, {{1, 128}}},
    {"smollm2/decode/ctx1024", 9, 3, 64, 16, {{1, 1024}}},
    {"smollm2/mixed", 9, 3, 64, 16, {{1, 33}, {17, 17}, {5, 40}}},
    {"qwen3/prefill_d128", 16, 8, 128, 16, {{13, 53}, {1, 77}}},
};

}  // namespace

METALRT_OP_CASES(kv_cache_type_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 36000;
  for (const KvPair& kv : kPairs)
    for (DType dtype : {DType::kF32, DType::kF16}) {
      cases.push_back(WriteCase(kv, dtype, 3, 64, {17, -1, 3, 63}, seed += 10, "smollm2/decode"));
      cases.push_back(WriteCase(kv, dtype, 8, 128, {10, 11, 12, 13, 14, 15, 16, -1}, seed += 10, "qwen3/prefill"));
      for (const FusedCase& f : {kQkvRopeCacheCases[1], kQkvRopeCacheCases[3]})
        cases.push_back(FusedWriteCase(f, kv, dtype, DeviceType::kCPU, seed += 10));
    }
  for (const KvPair& kv : kMetalFusedPairs)
    for (DType dtype : {DType::kF32, DType::kF16})
      for (const FusedCase& f : {kQkvRopeCacheCases[1], kQkvRopeCacheCases[3]})
        cases.push_back(FusedWriteCase(f, kv, dtype, DeviceType::kMETAL, seed += 10));
  for (const KvPair& kv : kPairs) {
    for (const AttentionCase& a : kAttention)
      for (DType dtype : {DType::kF32, DType::kF16})
        cases.push_back(AttentionCaseOf(a, kv, dtype, DeviceType::kMETAL, seed += 10));
    for (const AttentionCase& a : {kAttention[0], kAttention[1]})
      cases.push_back(AttentionCaseOf(a, kv, DType::kF32, DeviceType::kCPU, seed += 10));
  }
  return cases;
}
