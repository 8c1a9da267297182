// paged_attention decode: the requests of a batch with exactly one query (the query at
// position seq_len - 1 attends to positions lo .. seq_len - 1 of its kv head, lo = 0, or
// seq_len - window with a sliding window: DecodeFirstPosition), over the
// paged KV cache [num_blocks, block_size, kv_heads, head_dim] (vLLM's layout; the CPU
// oracle cpp/cpu/paged_attention.cpp is the spec), K and V each of any type
// (kv_cache_args.h: function constants key_type / value_type), read in place.
//
// Split-KV (FlashDecoding, Dao et al. 2023; vLLM's paged attention v2): the visible
// positions lo .. seq_len - 1 are cut into partitions of kDecodePartition positions (a
// window's positions only: those before it, and their block-table entries, are never
// read) and one threadgroup per (request,
// kv head, partition) computes, for the query heads of the GQA group it serves, the
// partition's softmax state: the maximum score m, the sum s of exp(score - m) and the
// unnormalised sum of exp(score - m) * v. Each K and V row is read once, straight from
// the cache into registers (lane l holds features l + 32 i), and serves every query
// head of the threadgroup. The threadgroup's SIMD-groups take interleaved positions, each
// folding its keys into an online softmax (Milakov & Gimelshein 2018); the SIMD-groups'
// states are combined through threadgroup memory, added in turn into one accumulator. Then either
// * paged_attention_decode_<dtype> (the whole context fits one partition) writes the
//   normalised output at once, or
// * paged_attention_decode_split_<dtype> writes the partition's state to the partials
//   scratch and paged_attention_decode_merge_<dtype> combines the partitions of each
//   (request, head) by log-sum-exp: M = max m_p, out = sum_p acc_p e^(m_p - M) /
//   sum_p s_p e^(m_p - M).
// With sinks (args.has_sinks), head h's sink logit sinks[h] joins the denominator only,
// at the final normalisation (attention_sinks.h).
// Everything is f32; the output is rounded once to the query's dtype. Threadgroups of a
// request without exactly one query, or past its context, return at once.
#include <metal_stdlib>
#include "attention_sinks.h"
#include "kv_cache_rows.h"
#include "paged_attention_args.h"
using namespace metal;

static_assert(kAttentionHeadDimConstant == 0, "head_dim is function constant 0");
constant int head_dim [[function_constant(0)]];
// The split and single-pass kernels' query heads per threadgroup (1..kDecodeGroupHeads):
// every loop over a thread's per-head arrays runs to it, so they unroll into registers.
static_assert(kDecodeGroupHeadsConstant == 1, "group_heads is function constant 1");
constant int group_heads [[function_constant(1)]];
// The caches' types (kv_cache_args.h: f32, f16, bf16, q8_0, q4_0), each read in place.
static_assert(kKeyTypeConstant == 2 && kValueTypeConstant == 3, "the cache types' function constants");
constant int key_type [[function_constant(2)]];
constant int value_type [[function_constant(3)]];
// Threadgroups are exactly kDecodeThreads (kDecodeMergeThreads for the merge), declared
// to the compiler ([[max_total_threads_per_threadgroup]]) so it budgets registers for it.
static_assert(kDecodeThreads == 128 && kDecodeMergeThreads == 32, "the kernels' thread limits");

// One partial row of the scratch: m, s, then head_dim accumulated features.
inline int32_t partial_stride() { return head_dim + 2; }

inline int32_t dims_per_lane() { return (head_dim + kAttentionSimdWidth - 1) / kAttentionSimdWidth; }

// What one threadgroup computes: request b (its query row `token`), query heads
// first_head .. first_head + heads - 1 (all of kv head kv_head), positions first .. end - 1
// (partition group.z of the positions the query sees).
struct DecodeTask {
  int32_t b, token, kv_head, first_head, heads, first, end;
  bool valid;
};

inline DecodeTask decode_task(uint3 group, device const int32_t* seq_lens,
                              device const int32_t* query_start_loc,
                              constant PagedAttentionArgs& args) {
  DecodeTask t;
  t.b = int32_t(group.x);
  t.token = query_start_loc[t.b];
  const int32_t group_size = args.heads / args.kv_heads;
  const int32_t chunks = (group_size + group_heads - 1) / group_heads;
  t.kv_head = int32_t(group.y) / chunks;
  const int32_t chunk_first = (int32_t(group.y) % chunks) * group_heads;
  t.first_head = t.kv_head * group_size + chunk_first;
  t.heads = min(group_heads, group_size - chunk_first);
  t.first = DecodeFirstPosition(seq_lens[t.b], args.window) + int32_t(group.z) * kDecodePartition;
  t.end = min(seq_lens[t.b], t.first + kDecodePartition);
  t.valid = query_start_loc[t.b + 1] - t.token == 1 && t.first < t.end;
  return t;
}

// Head h's maximum score over the threadgroup's SIMD-groups.
inline float combined_max(threadgroup const float* tg_max, int32_t h) {
  float m = -INFINITY;
  for (int32_t s = 0; s < kDecodeSimdgroups; ++s) m = max(m, tg_max[s * kDecodeGroupHeads + h]);
  return m;
}

// The threadgroup's softmax state of task t, left in threadgroup memory: SIMD-group s
// folds positions first + s, first + s + kDecodeSimdgroups, ... and stores its maximum of
// head h at tg_max[s * kDecodeGroupHeads + h]; then every SIMD-group rescales its sum and
// features to the heads' maxima over the SIMD-groups and they add them, in SIMD-group
// order, into tg_sum[h] and tg_acc[h * head_dim + d] (one [heads][head_dim] accumulator, so
// head_dim 256 fits the 32 KiB of threadgroup memory). A SIMD-group with no position has
// maximum -inf, which weighs 0. The head loops run to group_heads: heads past t.heads (the
// last chunk of a group that group_heads does not divide) attend with a zero query and
// are never written out.
template <typename T>
inline void attend_partition(DecodeTask t, device const T* query, device const uchar* key_cache,
                             device const uchar* value_cache, device const int32_t* blocks,
                             constant PagedAttentionArgs& args, threadgroup float* tg_max,
                             threadgroup float* tg_sum, threadgroup float* tg_acc,
                             uint simdgroup, uint lane) {
  float q[kDecodeGroupHeads][kAttentionMaxDimsPerLane];
  float acc[kDecodeGroupHeads][kAttentionMaxDimsPerLane];
  float max_score[kDecodeGroupHeads], sum[kDecodeGroupHeads];
  for (int32_t h = 0; h < group_heads; ++h) {
    device const T* row = query + (long(t.token) * args.heads + t.first_head + h) * head_dim;
    for (int32_t i = 0; i < dims_per_lane(); ++i) {
      const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
      q[h][i] = h < t.heads && d < head_dim ? float(row[d]) : 0.0f;
      acc[h][i] = 0.0f;
    }
    max_score[h] = -INFINITY;
    sum[h] = 0.0f;
  }
  for (int32_t position = t.first + int32_t(simdgroup); position < t.end;
       position += kDecodeSimdgroups) {
    const long slot = long(blocks[position / args.block_size]) * args.block_size +
                      position % args.block_size;
    const long cache_row = slot * args.kv_heads + t.kv_head;
    float k[kAttentionMaxDimsPerLane], v[kAttentionMaxDimsPerLane];
    for (int32_t i = 0; i < dims_per_lane(); ++i) {
      const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
      k[i] = d < head_dim ? kv_load(key_cache, key_type, cache_row, head_dim, d) : 0.0f;
      v[i] = d < head_dim ? kv_load(value_cache, value_type, cache_row, head_dim, d) : 0.0f;
    }
    for (int32_t h = 0; h < group_heads; ++h) {
      float partial = 0.0f;
      for (int32_t i = 0; i < dims_per_lane(); ++i) partial += q[h][i] * k[i];
      const float score = simd_sum(partial) * args.scale;
      const float new_max = max(max_score[h], score);
      const float rescale = exp(max_score[h] - new_max);   // 0 for the first key
      const float weight = exp(score - new_max);
      sum[h] = sum[h] * rescale + weight;
      for (int32_t i = 0; i < dims_per_lane(); ++i) acc[h][i] = acc[h][i] * rescale + weight * v[i];
      max_score[h] = new_max;
    }
  }
  if (lane == 0)
    for (int32_t h = 0; h < group_heads; ++h) tg_max[int32_t(simdgroup) * kDecodeGroupHeads + h] = max_score[h];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int32_t h = 0; h < group_heads; ++h) {
    const float weight = exp(max_score[h] - combined_max(tg_max, h));
    sum[h] *= weight;
    for (int32_t i = 0; i < dims_per_lane(); ++i) acc[h][i] *= weight;
  }
  for (int32_t s = 0; s < kDecodeSimdgroups; ++s) {
    if (int32_t(simdgroup) == s)
      for (int32_t h = 0; h < group_heads; ++h) {
        if (lane == 0) tg_sum[h] = s == 0 ? sum[h] : tg_sum[h] + sum[h];
        for (int32_t i = 0; i < dims_per_lane(); ++i) {
          const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
          if (d < head_dim) tg_acc[h * head_dim + d] = s == 0 ? acc[h][i] : tg_acc[h * head_dim + d] + acc[h][i];
        }
      }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// Single pass. Grid: (B, kv_heads * ceil(group / group_heads), 1) threadgroups of
// kDecodeThreads; every decode query sees at most kDecodePartition positions.
template <typename T>
[[max_total_threads_per_threadgroup(128)]]
kernel void paged_attention_decode(device const T* query [[buffer(0)]],
                                   device const uchar* key_cache [[buffer(1)]],
                                   device const uchar* value_cache [[buffer(2)]],
                                   device const int32_t* block_tables [[buffer(3)]],
                                   device const int32_t* seq_lens [[buffer(4)]],
                                   device const int32_t* query_start_loc [[buffer(5)]],
                                   device T* out [[buffer(6)]],
                                   constant PagedAttentionArgs& args [[buffer(7)]],
                                   device const float* sinks [[buffer(8)]],
                                   uint3 group [[threadgroup_position_in_grid]],
                                   uint tid [[thread_index_in_threadgroup]],
                                   uint simdgroup [[simdgroup_index_in_threadgroup]],
                                   uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float tg_max[kDecodeSimdgroups * kDecodeGroupHeads];
  threadgroup float tg_sum[kDecodeGroupHeads];
  threadgroup float tg_acc[kDecodeGroupHeads * kAttentionMaxHeadDim];
  const DecodeTask t = decode_task(group, seq_lens, query_start_loc, args);
  if (!t.valid) return;
  attend_partition(t, query, key_cache, value_cache, block_tables + long(t.b) * args.max_blocks,
                   args, tg_max, tg_sum, tg_acc, simdgroup, lane);
  for (int32_t e = int32_t(tid); e < t.heads * head_dim; e += kDecodeThreads) {
    const int32_t h = e / head_dim, d = e % head_dim;
    const SoftmaxNorm n = softmax_norm(combined_max(tg_max, h), tg_sum[h], args.has_sinks != 0,
                                       args.has_sinks != 0 ? sinks[t.first_head + h] : 0.0f);
    out[(long(t.token) * args.heads + t.first_head + h) * head_dim + d] = T(tg_acc[e] * n.scale / n.denom);
  }
}

// First pass of the split. Grid: (B, kv_heads * ceil(group / group_heads), partitions)
// threadgroups of kDecodeThreads. partials: [B, heads, args.partitions] rows of
// partial_stride() floats.
template <typename T>
[[max_total_threads_per_threadgroup(128)]]
kernel void paged_attention_decode_split(device const T* query [[buffer(0)]],
                                         device const uchar* key_cache [[buffer(1)]],
                                         device const uchar* value_cache [[buffer(2)]],
                                         device const int32_t* block_tables [[buffer(3)]],
                                         device const int32_t* seq_lens [[buffer(4)]],
                                         device const int32_t* query_start_loc [[buffer(5)]],
                                         device float* partials [[buffer(6)]],
                                         constant PagedAttentionArgs& args [[buffer(7)]],
                                         uint3 group [[threadgroup_position_in_grid]],
                                         uint tid [[thread_index_in_threadgroup]],
                                         uint simdgroup [[simdgroup_index_in_threadgroup]],
                                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float tg_max[kDecodeSimdgroups * kDecodeGroupHeads];
  threadgroup float tg_sum[kDecodeGroupHeads];
  threadgroup float tg_acc[kDecodeGroupHeads * kAttentionMaxHeadDim];
  const DecodeTask t = decode_task(group, seq_lens, query_start_loc, args);
  if (!t.valid) return;
  attend_partition(t, query, key_cache, value_cache, block_tables + long(t.b) * args.max_blocks,
                   args, tg_max, tg_sum, tg_acc, simdgroup, lane);
  for (int32_t e = int32_t(tid); e < t.heads * head_dim; e += kDecodeThreads) {
    const int32_t h = e / head_dim, d = e % head_dim;
    const long row = (long(t.b) * args.heads + t.first_head + h) * args.partitions + group.z;
    device float* partial = partials + row * partial_stride();
    if (d == 0) {
      partial[0] = combined_max(tg_max, h);
      partial[1] = tg_sum[h];
    }
    partial[2 + d] = tg_acc[e];
  }
}

// Second pass. Grid: (B, heads) threadgroups of kDecodeMergeThreads (one SIMD-group,
// lane l holding features l + 32 i); reads the DecodePartitions(seq_len, window)
// partitions the first pass wrote for the request.
template <typename T>
[[max_total_threads_per_threadgroup(32)]]
kernel void paged_attention_decode_merge(device const float* partials [[buffer(0)]],
                                         device const int32_t* seq_lens [[buffer(1)]],
                                         device const int32_t* query_start_loc [[buffer(2)]],
                                         device T* out [[buffer(3)]],
                                         constant PagedAttentionArgs& args [[buffer(4)]],
                                         device const float* sinks [[buffer(5)]],
                                         uint2 group [[threadgroup_position_in_grid]],
                                         uint lane [[thread_index_in_simdgroup]]) {
  const int32_t b = int32_t(group.x), head = int32_t(group.y);
  const int32_t token = query_start_loc[b];
  if (query_start_loc[b + 1] - token != 1) return;
  const int32_t count = DecodePartitions(seq_lens[b], args.window);
  device const float* rows =
      partials + (long(b) * args.heads + head) * args.partitions * partial_stride();
  float m = -INFINITY;
  for (int32_t p = 0; p < count; ++p) m = max(m, rows[p * partial_stride()]);
  float sum = 0.0f, acc[kAttentionMaxDimsPerLane];
  for (int32_t i = 0; i < dims_per_lane(); ++i) acc[i] = 0.0f;
  for (int32_t p = 0; p < count; ++p) {
    device const float* partial = rows + p * partial_stride();
    const float weight = exp(partial[0] - m);
    sum += partial[1] * weight;
    for (int32_t i = 0; i < dims_per_lane(); ++i) {
      const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
      if (d < head_dim) acc[i] += partial[2 + d] * weight;
    }
  }
  const SoftmaxNorm n = softmax_norm(m, sum, args.has_sinks != 0, args.has_sinks != 0 ? sinks[head] : 0.0f);
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
    if (d < head_dim) out[(long(token) * args.heads + head) * head_dim + d] = T(acc[i] * n.scale / n.denom);
  }
}

#define METALRT_PAGED_ATTENTION_DECODE(T, SUFFIX)                                               \
  template [[host_name("paged_attention_decode_" #SUFFIX)]] kernel void                        \
  paged_attention_decode<T>(device const T*, device const uchar*, device const uchar*,         \
                            device const int32_t*, device const int32_t*,                      \
                            device const int32_t*, device T*, constant PagedAttentionArgs&,    \
                            device const float*, uint3, uint, uint, uint);                     \
  template [[host_name("paged_attention_decode_split_" #SUFFIX)]] kernel void                  \
  paged_attention_decode_split<T>(device const T*, device const uchar*, device const uchar*,   \
                                  device const int32_t*, device const int32_t*,                \
                                  device const int32_t*, device float*,                        \
                                  constant PagedAttentionArgs&, uint3, uint, uint, uint);      \
  template [[host_name("paged_attention_decode_merge_" #SUFFIX)]] kernel void                  \
  paged_attention_decode_merge<T>(device const float*, device const int32_t*,                  \
                                  device const int32_t*, device T*,                            \
                                  constant PagedAttentionArgs&, device const float*, uint2, uint);

METALRT_PAGED_ATTENTION_DECODE(float, f32)
METALRT_PAGED_ATTENTION_DECODE(half, f16)
METALRT_PAGED_ATTENTION_DECODE(bfloat, bf16)
