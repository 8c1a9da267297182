// The fast CPU provider of qkv_rope_cache (split q|k|v, RoPE of q and k, k and v written
// to their cache slots), the op a decode step runs once per layer. The oracle
// (cpu/qkv_rope_cache.cpp) composes qkv_split (three new tensors), two rope calls that
// each compute the token's cos/sin row (rotary_dim / 2 pow, cos and sin in double) and
// reshape_and_cache. Here each token is read once from qkv and written straight to
// q_out and its cache slot, and the cos/sin row is computed once per token and kept for
// the next call at the same position (the other layers of a decode step), by the
// oracle's own functions (cpu/rope_rows.h), so every byte equals the oracle's; a cache of
// another type than qkv's gets each row rounded or quantized as reshape_and_cache does.
#include <cstring>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/kv_blocks.h"
#include "cpu/parallel.h"
#include "cpu/rope_rows.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

// The cos/sin row of (position, rotary_dim, base), recomputed only when one changes.
struct CosSinRowCache {
  int32_t position = 0;
  int64_t rotary_dim = 0;
  float base = 0.0f;
  std::vector<float> row;

  const float* Get(int32_t pos, int64_t dim, float b) {
    if (row.empty() || pos != position || dim != rotary_dim || b != base) {
      row.resize(static_cast<size_t>(dim));
      RopeCosSinRow(pos, dim, b, row.data());
      position = pos;
      rotary_dim = dim;
      base = b;
    }
    return row.data();
  }
};

// Writes an f32 row that holds a value of qkv's dtype to row `dst_row` of a cache of
// `type`: as the oracle's reshape_and_cache writes the rope's output (rounded to qkv's
// dtype first, then to the cache's type).
void StoreCacheRow(const Tensor& qkv, void* dst, KvType type, int64_t dst_row, int64_t head_dim,
                   std::vector<float>& row) {
  if (qkv.dtype() == DType::kF16)   // the rope's rounding, kept through the conversion
    for (int64_t d = 0; d < head_dim; ++d) row[d] = F16ToF32(F32ToF16(row[d]));
  if (qkv.dtype() == DType::kBF16)
    for (int64_t d = 0; d < head_dim; ++d) row[d] = BF16ToF32(F32ToBF16(row[d]));
  StoreKvRow(dst, type, dst_row, head_dim, row.data());
}

// Head rows [first, first + heads) of qkv token t, rotated, to dst rows dst_row + h (q_out
// when `type` is null, else a cache of *type).
void RotateHeads(const Tensor& qkv, int64_t t, int64_t first, int64_t heads, int64_t head_dim, const float* cos_sin,
                 const ops::QkvRopeCacheParams& p, void* dst, int64_t dst_row, std::vector<float>& row,
                 const KvType* type = nullptr) {
  for (int64_t h = 0; h < heads; ++h) {
    LoadRowF32(qkv.data(), qkv.dtype(), t * qkv.dim(1) + (first + h) * head_dim, head_dim, row.data());
    RopeRotateRow(row.data(), cos_sin, p.rotary_dim, p.neox);
    if (type)
      StoreCacheRow(qkv, dst, *type, dst_row + h, head_dim, row);
    else
      StoreRowF32(dst, qkv.dtype(), (dst_row + h) * head_dim, head_dim, row.data());
  }
}

bool FastQkvRopeCache(const OpCall& call) {
  const auto& p = call.param<ops::QkvRopeCacheParams>();
  const Tensor& qkv = call.inputs[0];
  const int32_t* positions = call.inputs[1].data_as<int32_t>();
  const int64_t* slots = call.inputs[2].data_as<int64_t>();
  const Tensor& q_out = call.outputs[0];
  const Tensor& key_cache = call.outputs[1];
  const Tensor& value_cache = call.outputs[2];
  // Metal tensors (the registry's reference tier) are left to the composition.
  for (const Tensor* t : {&qkv, &q_out, &key_cache})
    if (t->device() != DeviceType::kCPU) return false;
  if (q_out.dtype() != qkv.dtype()) return false;
  const int64_t kv_heads = key_cache.dim(2), head_dim = qkv.dim(1) / (p.heads + 2 * kv_heads);
  const int64_t num_slots = key_cache.dim(0) * key_cache.dim(1);
  const KvType key_type = KvTypeOf(key_cache, head_dim, "qkv_rope_cache", "key_cache");
  const KvType value_type = KvTypeOf(value_cache, head_dim, "qkv_rope_cache", "value_cache");
  // A float cache of qkv's dtype is written as it stands (stored / copied).
  const bool key_as_is = !IsQuantized(key_type) && key_cache.dtype() == qkv.dtype();
  const bool value_as_is = !IsQuantized(value_type) && value_cache.dtype() == qkv.dtype();
  const size_t v_bytes = static_cast<size_t>(kv_heads * head_dim) * DTypeSize(qkv.dtype());
  // A token is ~(heads + kv_heads) rows of a few dozen multiplies: a decode step's one
  // token stays on the calling thread.
  ParallelFor(qkv.dim(0), 4, [&](int64_t begin, int64_t end) {
    thread_local CosSinRowCache angles;
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(head_dim));
    for (int64_t t = begin; t < end; ++t) {
      const float* cos_sin = angles.Get(positions[t], p.rotary_dim, p.base);
      RotateHeads(qkv, t, 0, p.heads, head_dim, cos_sin, p, q_out.data(), t * p.heads, row);
      const int64_t slot = slots[t];
      if (slot < 0 || slot >= num_slots) continue;   // padding, as reshape_and_cache
      RotateHeads(qkv, t, p.heads, kv_heads, head_dim, cos_sin, p, key_cache.data(), slot * kv_heads, row,
                  key_as_is ? nullptr : &key_type);
      const int64_t v_first = t * qkv.dim(1) + (p.heads + kv_heads) * head_dim;
      if (value_as_is) {
        std::memcpy(static_cast<char*>(value_cache.data()) + slot * v_bytes,
                    static_cast<const char*>(qkv.data()) + v_first * static_cast<int64_t>(DTypeSize(qkv.dtype())),
                    v_bytes);
        continue;
      }
      for (int64_t g = 0; g < kv_heads; ++g) {
        LoadRowF32(qkv.data(), qkv.dtype(), v_first + g * head_dim, head_dim, row.data());
        StoreKvRow(value_cache.data(), value_type, slot * kv_heads + g, head_dim, row.data());
      }
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("qkv_rope_cache", DeviceType::kCPU, ProviderTier::kFast, FastQkvRopeCache);

}  // namespace metalrt::cpu::fast
