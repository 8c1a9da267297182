// qkv_rope_cache: the decode layer's qkv_split, RoPE of q and k, and KV-cache write
// (reshape_and_cache) in one kernel. One threadgroup per token: the token's cos|sin are
// computed once (metal/rope_math.h) and serve its q and k heads; q is rotated into the
// q output [T, heads, head_dim], k is rotated straight into its cache slot and v copied
// there (slot = slot_mapping[token]; a slot < 0, padding, or past the cache is skipped,
// as reshape_and_cache skips it). The rotation is rope.metal's, so the result is
// bit-exact with qkv_split + rope_<neox|interleaved> + reshape_and_cache.
#include <metal_stdlib>
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
