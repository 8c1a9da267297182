// paged_attention: variable-length causal attention with grouped-query heads over a paged
// KV cache [num_blocks, block_size, kv_heads, head_dim] (vLLM's layout; the CPU oracle
// cpp/cpu/paged_attention.cpp is the spec). Query i of request b sits at position
// seq_lens[b] - q_len + i and attends to positions 0 .. that position of kv head
// h / (heads / kv_heads).
//
// The prefill kernel walks the context in block-table order, kAttentionKeyTile positions at a
// time: the threadgroup gathers the tile's K and V rows through the block table into
// threadgroup memory as f32 (consecutive threads read consecutive features, so the
// loads coalesce), then every query row of the threadgroup — one SIMD-group, lane l
// holding features l + 32 i — folds the tile into an online softmax (Milakov &
// Gimelshein 2018; tiled as in FlashAttention, Dao et al. 2022): scores by simd_sum,
// one rescale of the running sum and accumulator per tile. Everything in f32; the
// output is rounded once to the query's dtype.
// paged_attention_prefill_<dtype> serves the requests with more than one query (the
// decode kernels are in paged_attention_decode.metal): one threadgroup per (tile of
// kPrefillQueryTile queries of one request, head); the tile's queries share each staged
// K/V tile; key tiles stop at the tile's last query position, and within the diagonal
// tile each query masks the keys after its own position. Queries past the request's end
// (a partial tile) help stage but write nothing.
#include <metal_stdlib>
#include "paged_attention_args.h"
using namespace metal;

static_assert(kAttentionHeadDimConstant == 0, "head_dim is function constant 0");
constant int head_dim [[function_constant(0)]];

// One query row's online-softmax state, per lane: the running maximum score and sum of
// exp(score - max) (the same on every lane), and the lane's features of
// sum_j exp(score_j - max) * v_j.
struct RowState {
  float max_score;
  float sum;
  float acc[kAttentionMaxDimsPerLane];
};

inline int32_t dims_per_lane() { return (head_dim + kAttentionSimdWidth - 1) / kAttentionSimdWidth; }

inline RowState start_row() {
  RowState row;
  row.max_score = -INFINITY;
  row.sum = 0.0f;
  for (int32_t i = 0; i < kAttentionMaxDimsPerLane; ++i) row.acc[i] = 0.0f;
  return row;
}

// This lane's features of a query row (zero past head_dim).
template <typename T>
inline void load_query(device const T* src, thread float* q, uint lane) {
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
    q[i] = d < head_dim ? float(src[d]) : 0.0f;
  }
}

// k_tile/v_tile [count][head_dim] = K and V of kv head `kv_head` at context positions
// first .. first + count - 1, each position's slot looked up in the request's block
// table `blocks`. Every thread of the threadgroup takes part.
template <typename T>
inline void stage_kv_tile(device const T* key_cache, device const T* value_cache,
                          device const int32_t* blocks, int32_t first, int32_t count,
                          int32_t kv_head, constant PagedAttentionArgs& args,
                          threadgroup float* k_tile, threadgroup float* v_tile, uint tid,
                          int32_t threads) {
  for (int32_t e = int32_t(tid); e < count * head_dim; e += threads) {
    const int32_t position = first + e / head_dim;
    const long slot = long(blocks[position / args.block_size]) * args.block_size +
                      position % args.block_size;
    const long src = (slot * args.kv_heads + kv_head) * head_dim + e % head_dim;
    k_tile[e] = float(key_cache[src]);
    v_tile[e] = float(value_cache[src]);
  }
}

// Folds the first `count` (>= 1) staged keys into the row: their scores, one rescale of
// the state to the new maximum, then their weighted values. All lanes of the SIMD-group
// call it together (simd_sum).
inline void attend_tile(thread RowState& row, thread const float* q,
                        threadgroup const float* k_tile, threadgroup const float* v_tile,
                        int32_t count, float scale, uint lane) {
  float scores[kAttentionKeyTile];
  float tile_max = -INFINITY;
  for (int32_t r = 0; r < count; ++r) {
    float partial = 0.0f;
    for (int32_t i = 0; i < dims_per_lane(); ++i) {
      const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
      if (d < head_dim) partial += q[i] * k_tile[r * head_dim + d];
    }
    scores[r] = simd_sum(partial) * scale;
    tile_max = max(tile_max, scores[r]);
  }
  const float new_max = max(row.max_score, tile_max);
  const float rescale = exp(row.max_score - new_max);   // 0 for the first tile
  row.sum *= rescale;
  for (int32_t i = 0; i < dims_per_lane(); ++i) row.acc[i] *= rescale;
  for (int32_t r = 0; r < count; ++r) {
    const float weight = exp(scores[r] - new_max);
    row.sum += weight;
    for (int32_t i = 0; i < dims_per_lane(); ++i) {
      const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
      if (d < head_dim) row.acc[i] += weight * v_tile[r * head_dim + d];
    }
  }
  row.max_score = new_max;
}

template <typename T>
inline void store_row(thread const RowState& row, device T* dst, uint lane) {
  for (int32_t i = 0; i < dims_per_lane(); ++i) {
    const int32_t d = int32_t(lane) + kAttentionSimdWidth * i;
    if (d < head_dim) dst[d] = T(row.acc[i] / row.sum);
  }
}

// Grid: (prefill tiles, heads) threadgroups of kPrefillThreads. Tiles are numbered
// request by request over the requests with more than one query, ceil(q_len /
// kPrefillQueryTile) each; the host counts them from the same query_start_loc.
template <typename T>
kernel void paged_attention_prefill(device const T* query [[buffer(0)]],
                                    device const T* key_cache [[buffer(1)]],
                                    device const T* value_cache [[buffer(2)]],
                                    device const int32_t* block_tables [[buffer(3)]],
                                    device const int32_t* seq_lens [[buffer(4)]],
                                    device const int32_t* query_start_loc [[buffer(5)]],
                                    device T* out [[buffer(6)]],
                                    constant PagedAttentionArgs& args [[buffer(7)]],
                                    uint2 group [[threadgroup_position_in_grid]],
                                    uint tid [[thread_index_in_threadgroup]],
                                    uint simdgroup [[simdgroup_index_in_threadgroup]],
                                    uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float k_tile[kAttentionKeyTile * kAttentionMaxHeadDim];
  threadgroup float v_tile[kAttentionKeyTile * kAttentionMaxHeadDim];
  // Find the request and tile within it (the grid holds exactly the host's tile count).
  int32_t tile = int32_t(group.x), b = 0, q_len = 0;
  for (;; ++b) {
    q_len = query_start_loc[b + 1] - query_start_loc[b];
    if (q_len < 2) continue;
    const int32_t tiles = (q_len + kPrefillQueryTile - 1) / kPrefillQueryTile;
    if (tile < tiles) break;
    tile -= tiles;
  }
  const int32_t i = tile * kPrefillQueryTile + int32_t(simdgroup);   // query within the request
  const bool active = i < q_len;
  const int32_t context = seq_lens[b];
  const int32_t position = context - q_len + i;
  // The tile's last query sees the most keys; later positions are masked for all.
  const int32_t keys = context - q_len + min(q_len, (tile + 1) * kPrefillQueryTile);
  const int32_t head = int32_t(group.y);
  const int32_t kv_head = head / (args.heads / args.kv_heads);
  const long row_offset = (long(query_start_loc[b] + i) * args.heads + head) * head_dim;
  float q[kAttentionMaxDimsPerLane];
  if (active) load_query(query + row_offset, q, lane);
  RowState row = start_row();
  device const int32_t* blocks = block_tables + long(b) * args.max_blocks;
  for (int32_t first = 0; first < keys; first += kAttentionKeyTile) {
    const int32_t count = min(kAttentionKeyTile, keys - first);
    stage_kv_tile(key_cache, value_cache, blocks, first, count, kv_head, args, k_tile, v_tile,
                  tid, kPrefillThreads);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // Causal mask: this query sees the staged keys up to its own position.
    const int32_t visible = active ? min(count, position - first + 1) : 0;
    if (visible > 0) attend_tile(row, q, k_tile, v_tile, visible, args.scale, lane);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (active) store_row(row, out + row_offset, lane);
}

#define METALRT_PAGED_ATTENTION(T, SUFFIX)                                                   \
  template [[host_name("paged_attention_prefill_" #SUFFIX)]] kernel void                    \
  paged_attention_prefill<T>(device const T*, device const T*, device const T*,             \
                             device const int32_t*, device const int32_t*,                  \
                             device const int32_t*, device T*, constant PagedAttentionArgs&, \
                             uint2, uint, uint, uint);

METALRT_PAGED_ATTENTION(float, f32)
METALRT_PAGED_ATTENTION(half, f16)
METALRT_PAGED_ATTENTION(bfloat, bf16)
