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
// read) and one threadgroup per (request, query head, partition) computes the
// partition's softmax state: the maximum score m, the sum s of exp(score - m) and the
// unnormalised sum of exp(score - m) * v. Its kDecodeSimdgroups SIMD-groups take
// interleaved positions (at most kDecodeSimdgroupPositions each: the serial chain), each
// folding its keys into an online softmax (Milakov & Gimelshein 2018) with the K and V
// rows read straight from the cache into registers (lane l holds features l + 32 i).
// The SIMD-groups' states are combined across the SIMD-group, as MLX's sdpa_vector does:
// the maxima and sums by one simd_max and one simd_sum over the threadgroup-memory row
// of the SIMD-groups' values, the features through a [feature lane][SIMD-group] tile in
// which SIMD-group g sums feature g + 32 i of every SIMD-group with one simd_sum.
// Then either
// * paged_attention_decode_<dtype> (the whole context fits one partition) writes the
//   normalised output at once, or
// * paged_attention_decode_split_<dtype> writes the partition's state to the partials
//   scratch and paged_attention_decode_merge_<dtype> combines the partitions of each
//   (request, head) by log-sum-exp: M = max m_p, out = sum_p acc_p e^(m_p - M) /
//   sum_p s_p e^(m_p - M).
// With sinks (args.has_sinks), head h's sink logit sinks[h] joins the denominator only,
// at the final normalisation (attention_sinks.h).
// Everything is f32; the output is rounded once to the query's dtype. Threadgroups of a
// request without exactly one query, or past its context, return at once. Under decode
// rows (args.decode_rows) the grid's rows B are the batch's query rows instead, each a
// decode query of its own (decode_row), so a speculative verify step's rows compute
// what one-row decode steps do.
#include <metal_stdlib>
#include "attention_sinks.h"
#include "kv_cache_rows.h"
#include "paged_attention_args.h"
using namespace metal;

static_assert(kAttentionHeadDimConstant == 0, "head_dim is function constant 0");
constant int head_dim [[function_constant(0)]];
// The caches' types (kv_cache_args.h: f32, f16, bf16, q8_0, q4_0), each read in place.
static_assert(kKeyTypeConstant == 2 && kValueTypeConstant == 3, "the cache types' function constants");
constant int key_type [[function_constant(2)]];
constant int value_type [[function_constant(3)]];
// Threadgroups are exactly kDecodeThreads (kDecodeMergeThreads for the merge), declared
// to the compiler ([[max_total_threads_per_threadgroup]]) so it budgets registers for
// it; the cross-SIMD-group combination needs one SIMD-group lane per SIMD-group.
static_assert(kDecodeThreads == 1024 && kDecodeMergeThreads == 32, "the kernels' thread limits");
static_assert(kDecodeSimdgroups == kAttentionSimdWidth, "a lane per SIMD-group in the combination");

// One partial row of the scratch: m, s, then head_dim accumulated features.
inline int32_t partial_stride() { return head_dim + 2; }

inline int32_t dims_per_lane() { return (head_dim + kAttentionSimdWidth - 1) / kAttentionSimdWidth; }

// Grid row `row` of the decode kernels: request `row` and its query (valid only for a
// request of one query: the prefill kernel serves the others), or with args.decode_rows
// query row `row` of the request holding it, over its context up to its own position
// (seq_len - q_len + i + 1 for its row i), as a one-row decode step of that token.
struct DecodeRow {
  int32_t b, token, context;
  bool valid;
};

inline DecodeRow decode_row(int32_t row, device const int32_t* seq_lens,
                            device const int32_t* query_start_loc, constant PagedAttentionArgs& args) {
  DecodeRow r;
  if (args.decode_rows != 0) {
    // The last request starting at or before the row (an empty request starts where the
    // next one does, so the last is the one that holds it).
    int32_t lo = 0, hi = args.requests - 1;
    while (lo < hi) {
      const int32_t mid = (lo + hi + 1) / 2;
      if (query_start_loc[mid] <= row) lo = mid;
      else hi = mid - 1;
    }
    r.b = lo;
    r.token = row;
    r.context = seq_lens[lo] - (query_start_loc[lo + 1] - row) + 1;
    r.valid = true;
  } else {
    r.b = row;
    r.token = query_start_loc[row];
    r.context = seq_lens[row];
    r.valid = query_start_loc[row + 1] - r.token == 1;
  }
  return r;
}

// What one threadgroup computes: grid row `row` (decode_row: request b, its query row
// `token`), query head `head` of kv head kv_head, positions first .. end - 1 (partition
// group.z of the positions the query sees).
struct DecodeTask {
  int32_t row, b, token, head, kv_head, first, end;
  bool valid;
};

inline DecodeTask decode_task(uint3 group, device const int32_t* seq_lens,
                              device const int32_t* query_start_loc,
                              constant PagedAttentionArgs& args) {
  DecodeTask t;
  t.row = int32_t(group.x);
  const DecodeRow r = decode_row(t.row, seq_lens, query_start_loc, args);
  t.b = r.b;
  t.token = r.token;
  t.head = int32_t(group.y);
  t.kv_head = t.head / (args.heads / args.kv_heads);
  t.first = DecodeFirstPosition(r.context, args.window) + int32_t(group.z) * kDecodePartition;
  t.end = min(r.context, t.first + kDecodePartition);
  t.valid = r.valid && t.first < t.end;
  return t;
}

// The threadgroup's softmax state of task t: max_score and sum over the whole
// partition (every thread), and in `feature` the unnormalised accumulation of feature
// simdgroup + 32 i for i < dims_per_lane() (lane 0 of each SIMD-group; features past
// head_dim are 0).
struct DecodeState {
  float max_score, sum;
  float feature[kAttentionMaxDimsPerLane];
};

// SIMD-group s folds positions first + s, first + s + kDecodeSimdgroups, ... into its
// online softmax; a SIMD-group with no position has maximum -inf, which weighs 0 in the
// combination. tg_max/tg_sum: a value per SIMD-group; tg_tile: [32 feature lanes]
// [kDecodeSimdgroups] floats, reused for each i.
template <typename T>
inline DecodeState attend_partition(DecodeTask t, device const T* query, device const uchar* key_cache,
                                    device const uchar* value_cache, device const int32_t* blocks,
                                    constant PagedAttentionArgs& args, threadgroup float* tg_max,
                                    threadgroup float* tg_sum, threadgroup float* tg_tile,
                                    uint simdgroup, uint lane) {
  float q[kAttentionMaxDimsPerLane], acc[kAttentionMaxDimsPerLane];
  device const T* row = query + (long(t.token) * args.heads + t.head) * head_dim;
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
    q[i] = d < head_dim ? float(row[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  float max_score = -INFINITY, sum = 0.0f;
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
    float partial = 0.0f;
    for (int32_t i = 0; i < dims_per_lane(); ++i) partial += q[i] * k[i];
    const float score = simd_sum(partial) * args.scale;
    const float new_max = max(max_score, score);
    const float rescale = exp(max_score - new_max);   // 0 for the first key
    const float weight = exp(score - new_max);
    sum = sum * rescale + weight;
    for (int32_t i = 0; i < dims_per_lane(); ++i) acc[i] = acc[i] * rescale + weight * v[i];
    max_score = new_max;
  }
  if (lane == 0) {
    tg_max[simdgroup] = max_score;
    tg_sum[simdgroup] = sum;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // Lane l reads SIMD-group l's state.
  DecodeState state;
  const float lane_max = tg_max[lane];
  state.max_score = simd_max(lane_max);
  state.sum = simd_sum(tg_sum[lane] * exp(lane_max - state.max_score));
  const float weight = exp(max_score - state.max_score);
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    tg_tile[lane * kDecodeSimdgroups + simdgroup] = acc[i] * weight;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    state.feature[i] = simd_sum(tg_tile[simdgroup * kDecodeSimdgroups + lane]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  return state;
}

// Single pass. Grid: (B, heads, 1) threadgroups of kDecodeThreads; every decode query
// sees at most kDecodePartition positions.
template <typename T>
[[max_total_threads_per_threadgroup(1024)]]
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
                                   uint simdgroup [[simdgroup_index_in_threadgroup]],
                                   uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float tg_max[kDecodeSimdgroups];
  threadgroup float tg_sum[kDecodeSimdgroups];
  threadgroup float tg_tile[kAttentionSimdWidth * kDecodeSimdgroups];
  const DecodeTask t = decode_task(group, seq_lens, query_start_loc, args);
  if (!t.valid) return;
  const DecodeState s = attend_partition(t, query, key_cache, value_cache,
                                         block_tables + long(t.b) * args.max_blocks, args,
                                         tg_max, tg_sum, tg_tile, simdgroup, lane);
  if (lane != 0) return;
  const SoftmaxNorm n = softmax_norm(s.max_score, s.sum, args.has_sinks != 0,
                                     args.has_sinks != 0 ? sinks[t.head] : 0.0f);
  device T* o = out + (long(t.token) * args.heads + t.head) * head_dim;
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    const int32_t d = int32_t(simdgroup) + kAttentionSimdWidth * i;
    if (d < head_dim) o[d] = T(s.feature[i] * n.scale / n.denom);
  }
}

// First pass of the split. Grid: (B, heads, partitions) threadgroups of kDecodeThreads.
// partials: [B, heads, args.partitions] rows of partial_stride() floats.
template <typename T>
[[max_total_threads_per_threadgroup(1024)]]
kernel void paged_attention_decode_split(device const T* query [[buffer(0)]],
                                         device const uchar* key_cache [[buffer(1)]],
                                         device const uchar* value_cache [[buffer(2)]],
                                         device const int32_t* block_tables [[buffer(3)]],
                                         device const int32_t* seq_lens [[buffer(4)]],
                                         device const int32_t* query_start_loc [[buffer(5)]],
                                         device float* partials [[buffer(6)]],
                                         constant PagedAttentionArgs& args [[buffer(7)]],
                                         uint3 group [[threadgroup_position_in_grid]],
                                         uint simdgroup [[simdgroup_index_in_threadgroup]],
                                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float tg_max[kDecodeSimdgroups];
  threadgroup float tg_sum[kDecodeSimdgroups];
  threadgroup float tg_tile[kAttentionSimdWidth * kDecodeSimdgroups];
  const DecodeTask t = decode_task(group, seq_lens, query_start_loc, args);
  if (!t.valid) return;
  const DecodeState s = attend_partition(t, query, key_cache, value_cache,
                                         block_tables + long(t.b) * args.max_blocks, args,
                                         tg_max, tg_sum, tg_tile, simdgroup, lane);
  if (lane != 0) return;
  const long row = (long(t.row) * args.heads + t.head) * args.partitions + group.z;
  device float* partial = partials + row * partial_stride();
  if (simdgroup == 0) {
    partial[0] = s.max_score;
    partial[1] = s.sum;
  }
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    const int32_t d = int32_t(simdgroup) + kAttentionSimdWidth * i;
    if (d < head_dim) partial[2 + d] = s.feature[i];
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
  const int32_t head = int32_t(group.y);
  const DecodeRow r = decode_row(int32_t(group.x), seq_lens, query_start_loc, args);
  if (!r.valid) return;
  const int32_t token = r.token;
  const int32_t count = DecodePartitions(r.context, args.window);
  device const float* rows =
      partials + (long(group.x) * args.heads + head) * args.partitions * partial_stride();
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
                            device const float*, uint3, uint, uint);                           \
  template [[host_name("paged_attention_decode_split_" #SUFFIX)]] kernel void                  \
  paged_attention_decode_split<T>(device const T*, device const uchar*, device const uchar*,   \
                                  device const int32_t*, device const int32_t*,                \
                                  device const int32_t*, device float*,                        \
                                  constant PagedAttentionArgs&, uint3, uint, uint);            \
  template [[host_name("paged_attention_decode_merge_" #SUFFIX)]] kernel void                  \
  paged_attention_decode_merge<T>(device const float*, device const int32_t*,                  \
                                  device const int32_t*, device T*,                            \
                                  constant PagedAttentionArgs&, device const float*, uint2, uint);

METALRT_PAGED_ATTENTION_DECODE(float, f32)
METALRT_PAGED_ATTENTION_DECODE(half, f16)
METALRT_PAGED_ATTENTION_DECODE(bfloat, bf16)
