// qkv_rope_cache: the decode layer's qkv_split, RoPE of q and k, and KV-cache write
// (reshape_and_cache) in one kernel. One threadgroup per token: the token's cos|sin are
// computed once (metal/rope_math.h) and serve its q and k heads; q is rotated into the
// q output [T, heads, head_dim], k is rotated straight into its cache slot and v copied
// there (slot = slot_mapping[token]; a slot < 0, padding, or past the cache is skipped,
// as reshape_and_cache skips it). The rotation is rope.metal's, so the result is
// bit-exact with qkv_split + rope_<neox|interleaved> + reshape_and_cache.
#include <metal_stdlib>
#include "kv_cache_rows.h"
#include "qkv_rope_cache_args.h"
#include "rope_math.h"
using namespace metal;

// Grid: (T) threadgroups of kRopeThreads.
template <typename T, bool kNeox>
kernel void qkv_rope_cache(device const T* qkv [[buffer(0)]],
                           device const int32_t* positions [[buffer(1)]],
                           device const int64_t* slot_mapping [[buffer(2)]],
                           constant float* freq [[buffer(3)]],
                           device T* q_out [[buffer(4)]],
                           device T* key_cache [[buffer(5)]],
                           device T* value_cache [[buffer(6)]],
                           constant QkvRopeCacheArgs& args [[buffer(7)]],
                           uint token [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float cos_sin[kRopeMaxRotaryDim];
  rope_token_cos_sin(positions[token], freq, args.rotary_dim / 2, cos_sin, tid, kRopeThreads);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup const float* cs = cos_sin;
  const long q_width = long(args.heads) * args.head_dim, kv_width = long(args.kv_heads) * args.head_dim;
  device const T* row = qkv + long(token) * (q_width + 2 * kv_width);
  rope_rotate_heads<T, kNeox>(row, q_out + long(token) * q_width, args.heads, args.head_dim,
                              args.rotary_dim, cs, tid, kRopeThreads);
  const long slot = slot_mapping[token];
  if (slot < 0 || slot >= args.cache_slots) return;
  const long cache_row = slot * kv_width;
  rope_rotate_heads<T, kNeox>(row + q_width, key_cache + cache_row, args.kv_heads, args.head_dim,
                              args.rotary_dim, cs, tid, kRopeThreads);
  for (long e = long(tid); e < kv_width; e += kRopeThreads)
    value_cache[cache_row + e] = row[q_width + kv_width + e];
}

static_assert(kKeyTypeConstant == 2 && kValueTypeConstant == 3, "the cache types' function constants");
constant int key_type [[function_constant(2)]];
constant int value_type [[function_constant(3)]];

// qkv_rope_cache_kv_<neox|interleaved>_<dtype>: the same for caches of other types than
// qkv's (function constants key_type / value_type: a float type, or q8_0 / q4_0). The
// rotated k (rounded to T, as the unfused rope's output is) and v are staged as f32 in
// threadgroup memory (kv_width <= kQkvRopeCacheMaxKvWidth, else the host declines), then
// each thread stores 32-feature units of them (a quantized block each) into the slot.
template <typename T, bool kNeox>
kernel void qkv_rope_cache_kv(device const T* qkv [[buffer(0)]],
                              device const int32_t* positions [[buffer(1)]],
                              device const int64_t* slot_mapping [[buffer(2)]],
                              constant float* freq [[buffer(3)]],
                              device T* q_out [[buffer(4)]],
                              device uchar* key_cache [[buffer(5)]],
                              device uchar* value_cache [[buffer(6)]],
                              constant QkvRopeCacheArgs& args [[buffer(7)]],
                              uint token [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float cos_sin[kRopeMaxRotaryDim];
  threadgroup float k_rows[kQkvRopeCacheMaxKvWidth];
  threadgroup float v_rows[kQkvRopeCacheMaxKvWidth];
  rope_token_cos_sin(positions[token], freq, args.rotary_dim / 2, cos_sin, tid, kRopeThreads);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup const float* cs = cos_sin;
  const int32_t head_dim = args.head_dim;
  const long q_width = long(args.heads) * head_dim, kv_width = long(args.kv_heads) * head_dim;
  device const T* row = qkv + long(token) * (q_width + 2 * kv_width);
  rope_rotate_heads<T, kNeox>(row, q_out + long(token) * q_width, args.heads, head_dim, args.rotary_dim, cs, tid,
                              kRopeThreads);
  const long slot = slot_mapping[token];
  if (slot < 0 || slot >= args.cache_slots) return;
  const int32_t half_dim = args.rotary_dim / 2;
  for (int32_t e = int32_t(tid); e < int32_t(kv_width); e += kRopeThreads) {
    const int32_t h = e / head_dim, f = e % head_dim;
    device const T* x = row + q_width + long(h) * head_dim;
    // Feature f's rotation pair (rope_rotate_heads's): a in the first half, b its partner.
    const int32_t j = kNeox ? (f < half_dim ? f : f - half_dim) : f / 2;
    float k = float(x[f]);
    if (f < args.rotary_dim) {
      const int32_t ia = kNeox ? j : 2 * j, ib = kNeox ? j + half_dim : 2 * j + 1;
      const float2 r = rope_rotate(float(x[ia]), float(x[ib]), cs[j], cs[half_dim + j]);
      k = float(T(f == ia ? r.x : r.y));
    }
    k_rows[e] = k;
    v_rows[e] = float(row[q_width + kv_width + e]);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int32_t units = (head_dim + kKvQuantBlock - 1) / kKvQuantBlock;
  for (int32_t u = int32_t(tid); u < args.kv_heads * units; u += kRopeThreads) {
    const int32_t h = u / units, d0 = (u % units) * kKvQuantBlock, n = min(kKvQuantBlock, head_dim - d0);
    float x[kKvQuantBlock];
    // Bounded by the constant block (the unit's own n may be shorter) so x stays in registers.
    for (int32_t i = 0; i < kKvQuantBlock; ++i) x[i] = i < n ? k_rows[h * head_dim + d0 + i] : 0.0f;
    kv_store(key_cache, key_type, slot * args.kv_heads + h, head_dim, d0, n, x);
    for (int32_t i = 0; i < kKvQuantBlock; ++i) x[i] = i < n ? v_rows[h * head_dim + d0 + i] : 0.0f;
    kv_store(value_cache, value_type, slot * args.kv_heads + h, head_dim, d0, n, x);
  }
}

#define METALRT_QKV_ROPE_CACHE_KV(T, SUFFIX)                                                    \
  template [[host_name("qkv_rope_cache_kv_neox_" #SUFFIX)]] kernel void                         \
  qkv_rope_cache_kv<T, true>(device const T*, device const int32_t*, device const int64_t*,      \
                             constant float*, device T*, device uchar*, device uchar*,           \
                             constant QkvRopeCacheArgs&, uint, uint);                            \
  template [[host_name("qkv_rope_cache_kv_interleaved_" #SUFFIX)]] kernel void                  \
  qkv_rope_cache_kv<T, false>(device const T*, device const int32_t*, device const int64_t*,     \
                              constant float*, device T*, device uchar*, device uchar*,          \
                              constant QkvRopeCacheArgs&, uint, uint);

METALRT_QKV_ROPE_CACHE_KV(float, f32)
METALRT_QKV_ROPE_CACHE_KV(half, f16)
METALRT_QKV_ROPE_CACHE_KV(bfloat, bf16)

#define METALRT_QKV_ROPE_CACHE(T, SUFFIX)                                                        \
  template [[host_name("qkv_rope_cache_neox_" #SUFFIX)]] kernel void qkv_rope_cache<T, true>(    \
      device const T*, device const int32_t*, device const int64_t*, constant float*, device T*,  \
      device T*, device T*, constant QkvRopeCacheArgs&, uint, uint);                             \
  template [[host_name("qkv_rope_cache_interleaved_" #SUFFIX)]] kernel void                      \
  qkv_rope_cache<T, false>(device const T*, device const int32_t*, device const int64_t*,        \
                           constant float*, device T*, device T*, device T*,                     \
                           constant QkvRopeCacheArgs&, uint, uint);

METALRT_QKV_ROPE_CACHE(float, f32)
METALRT_QKV_ROPE_CACHE(half, f16)
METALRT_QKV_ROPE_CACHE(bfloat, bf16)
