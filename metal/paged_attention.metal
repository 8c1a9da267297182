// paged_attention prefill: variable-length causal attention with grouped-query heads
// over a paged KV cache [num_blocks, block_size, kv_heads, head_dim] (vLLM's layout; the
// CPU oracle cpp/cpu/paged_attention.cpp is the spec; K and V each of any type, read in
// place: kv_cache_args.h), for the requests of a batch with
// more than one query (prefill, chunked prefill; the one-query decode kernels are in
// paged_attention_decode.metal). Query i of request b sits at position
// seq_lens[b] - q_len + i and attends to positions 0 .. that position of kv head
// h / (heads / kv_heads); with a sliding window (args.window > 0) only to the last
// `window` of them. With sinks (args.has_sinks), head h's logit sinks[h] joins the
// softmax denominator only (attention_sinks.h).
//
// One threadgroup per (query tile of one request, kv head) serves the kv head's whole
// GQA group: its kPrefillRows query rows are (query position, query head) pairs, row
// r = t * group_heads + h, so every K/V tile it stages serves all the group's heads at
// all the tile's positions (FlashAttention's tiling, Dao et al. 2022, with the GQA group
// folded into the query rows as in FlashAttention-2's and llama.cpp's GQA kernels). The
// context is walked in block-table order, key_tile() positions at a time: the
// threadgroup gathers the tile's K and V rows through the block table into threadgroup
// memory as f32, zero-padded to whole 8-wide blocks; then SIMD-group s, owning rows
// 8s .. 8s + 7, computes
//   S = Q K^T on 8x8 simdgroup_multiply_accumulate (Q, pre-scaled, in registers),
//   the online softmax of its rows (Milakov & Gimelshein 2018: running maximum m and sum
//   l per row, kept by lane r of the SIMD-group for its row r; the causal mask keeps keys
//   at positions <= the row's position), and
//   O = diag(e^(m_old - m_new)) O + P V on simdgroup_multiply_accumulate,
// all in f32. The output is O / l, rounded once to the query's dtype. Key tiles stop at
// the tile's last query position and, with a window, start at the first position the
// tile's first query sees: earlier positions and their block-table entries are never
// read; the mask keeps each row's keys inside its own window. Rows past the request's end or the chunk's heads
// (a partial tile) have zero queries and weights and write nothing.
//
// The accumulators' per-row scaling and the stores go through thread_elements(), whose
// lane layout MSL leaves unspecified: this kernel assumes Apple GPUs' (simdgroup_layout.h;
// the sim's shim implements it), and the host probes the device once before its first
// use, declining the call on a device that differs (cpp/gpu/simdgroup_layout_probe.cpp).
#include <metal_stdlib>
#include "attention_sinks.h"
#include "kv_cache_rows.h"
#include "paged_attention_args.h"
#include "simdgroup_layout.h"
using namespace metal;

static_assert(kAttentionHeadDimConstant == 0, "head_dim is function constant 0");
constant int head_dim [[function_constant(0)]];
// The caches' types (kv_cache_args.h: f32, f16, bf16, q8_0, q4_0), each read in place.
static_assert(kKeyTypeConstant == 2 && kValueTypeConstant == 3, "the cache types' function constants");
constant int key_type [[function_constant(2)]];
constant int value_type [[function_constant(3)]];

typedef simdgroup_matrix<float, 8, 8> Block;

// head_dim in whole 8-wide blocks, and the padded row length of the staged tiles.
inline int32_t head_blocks() { return (head_dim + 7) / 8; }
inline int32_t padded_dim() { return head_blocks() * 8; }
inline int32_t key_tile() { return PrefillKeyTile(padded_dim()); }

// What one threadgroup computes: request b's queries tile * query_tile ..
// (tile + 1) * query_tile - 1 (of q_len, the first at query row `token`), query heads
// first_head .. first_head + heads - 1 of kv head kv_head, keys at positions lo .. keys - 1.
struct PrefillTask {
  int32_t b, token, q_len, context, tile, query_tile, group_heads, kv_head, first_head, heads, lo, keys;
};

// Grid: (prefill tiles, kv_heads * chunks) threadgroups; tiles are numbered request by
// request over the requests with more than one query, ceil(q_len / query_tile) each,
// chunks = PrefillHeadChunks(group); the host counts both the same way.
inline PrefillTask prefill_task(uint2 group, device const int32_t* seq_lens,
                                device const int32_t* query_start_loc,
                                constant PagedAttentionArgs& args) {
  PrefillTask t;
  const int32_t group_size = args.heads / args.kv_heads;
  t.group_heads = PrefillGroupHeads(group_size);
  t.query_tile = PrefillQueryTile(group_size);
  t.tile = int32_t(group.x);
  for (t.b = 0;; ++t.b) {   // the grid holds exactly the host's tile count
    t.q_len = query_start_loc[t.b + 1] - query_start_loc[t.b];
    if (t.q_len < 2) continue;
    const int32_t tiles = (t.q_len + t.query_tile - 1) / t.query_tile;
    if (t.tile < tiles) break;
    t.tile -= tiles;
  }
  t.token = query_start_loc[t.b];
  t.context = seq_lens[t.b];
  const int32_t chunks = PrefillHeadChunks(group_size);
  t.kv_head = int32_t(group.y) / chunks;
  const int32_t chunk_first = (int32_t(group.y) % chunks) * t.group_heads;
  t.first_head = t.kv_head * group_size + chunk_first;
  t.heads = min(t.group_heads, group_size - chunk_first);
  // The tile's last query sees the most keys; later positions are masked for all rows.
  t.keys = t.context - t.q_len + min(t.q_len, (t.tile + 1) * t.query_tile);
  // The tile's first query sees the earliest key: its window's first position.
  t.lo = args.window > 0 ? max(0, t.context - t.q_len + t.tile * t.query_tile - args.window + 1) : 0;
  return t;
}

// Query row r (0 .. kPrefillRows - 1) of the task: whether it exists, its position, its
// query head, and the element offset of its query (and output) row.
struct QueryRow {
  bool active;
  int32_t position, head;
  long offset;
};

inline QueryRow query_row(PrefillTask t, int32_t r, constant PagedAttentionArgs& args) {
  const int32_t pos_in_tile = r / t.group_heads, h = r % t.group_heads;
  const int32_t i = t.tile * t.query_tile + pos_in_tile;   // query within the request
  QueryRow q;
  q.active = pos_in_tile < t.query_tile && h < t.heads && i < t.q_len;
  q.position = t.context - t.q_len + i;
  q.head = t.first_head + h;
  q.offset = (long(t.token + i) * args.heads + t.first_head + h) * head_dim;
  return q;
}

// k_tile/v_tile [key_tile()][padded_dim()] = K and V of kv head `kv_head` at
// context positions first .. first + count - 1 (each position's slot looked up in the
// request's block table `blocks`), zero past count and head_dim. Every thread of the
// threadgroup takes part; consecutive threads read consecutive features.
inline void stage_kv_tile(device const uchar* key_cache, device const uchar* value_cache,
                          device const int32_t* blocks, int32_t first, int32_t count,
                          int32_t kv_head, constant PagedAttentionArgs& args,
                          threadgroup float* k_tile, threadgroup float* v_tile, uint tid) {
  for (int32_t e = int32_t(tid); e < key_tile() * padded_dim(); e += kPrefillThreads) {
    const int32_t key = e / padded_dim(), d = e % padded_dim();
    float k = 0.0f, v = 0.0f;
    if (key < count && d < head_dim) {
      const int32_t position = first + key;
      const long slot = long(blocks[position / args.block_size]) * args.block_size +
                        position % args.block_size;
      const long cache_row = slot * args.kv_heads + kv_head;
      k = kv_load(key_cache, key_type, cache_row, head_dim, d);
      v = kv_load(value_cache, value_type, cache_row, head_dim, d);
    }
    k_tile[e] = k;
    v_tile[e] = v;
  }
}

// Lane r < 8's online-softmax step for its SIMD-group's row r over the staged keys:
// scores[0 .. key_tile() - 1] (the row's q . k, already scaled; the row is kPrefillKeyTile
// long) become the weights exp(score - new max), 0 where masked (the key's position is
// past `position`, before its window (window > 0), or it is not staged). Returns the
// factor e^(old max - new max) the row's accumulator takes (1 while no key has been visible).
inline float softmax_step(threadgroup float* scores, bool active, int32_t position, int32_t first,
                          int32_t count, int32_t window, thread float& row_max, thread float& row_sum) {
  const int32_t begin = window > 0 ? max(0, position - window + 1 - first) : 0;
  const int32_t visible = active ? min(count, position - first + 1) : 0;
  float tile_max = -INFINITY;
  for (int32_t j = begin; j < visible; ++j) tile_max = max(tile_max, scores[j]);
  const float new_max = max(row_max, tile_max);
  if (visible <= begin) {
    for (int32_t j = 0; j < kPrefillKeyTile; ++j) scores[j] = 0.0f;
    return 1.0f;
  }
  const float rescale = exp(row_max - new_max);   // 0 for the first visible tile
  row_sum *= rescale;
  for (int32_t j = 0; j < kPrefillKeyTile; ++j) {
    const float weight = j >= begin && j < visible ? exp(scores[j] - new_max) : 0.0f;
    row_sum += weight;
    scores[j] = weight;
  }
  row_max = new_max;
  return rescale;
}

template <typename T>
kernel void paged_attention_prefill(device const T* query [[buffer(0)]],
                                    device const uchar* key_cache [[buffer(1)]],
                                    device const uchar* value_cache [[buffer(2)]],
                                    device const int32_t* block_tables [[buffer(3)]],
                                    device const int32_t* seq_lens [[buffer(4)]],
                                    device const int32_t* query_start_loc [[buffer(5)]],
                                    device T* out [[buffer(6)]],
                                    constant PagedAttentionArgs& args [[buffer(7)]],
                                    device const float* sinks [[buffer(8)]],
                                    uint2 group [[threadgroup_position_in_grid]],
                                    uint tid [[thread_index_in_threadgroup]],
                                    uint simdgroup [[simdgroup_index_in_threadgroup]],
                                    uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float k_tile[kPrefillTileFloats];   // [key][padded_dim]
  threadgroup float v_tile[kPrefillTileFloats];
  threadgroup float p_tile[kPrefillRows * kPrefillKeyTile];           // [row][key]
  const PrefillTask t = prefill_task(group, seq_lens, query_start_loc, args);
  const int32_t row0 = 8 * int32_t(simdgroup);
  threadgroup float* scores = p_tile + row0 * kPrefillKeyTile;   // this SIMD-group's 8 rows
  // The row of this lane's matrix elements, and (lanes 0..7) the row whose softmax
  // state the lane keeps.
  const QueryRow mine = query_row(t, row0 + SimdgroupElementRow(lane), args);
  const QueryRow owned = query_row(t, row0 + int32_t(lane % 8), args);
  const int32_t col = SimdgroupElementColumn(lane);

  Block q[kAttentionMaxHeadDim / 8], o[kAttentionMaxHeadDim / 8];
  for (int32_t j = 0; j < head_blocks(); ++j) {
    for (int32_t e = 0; e < 2; ++e) {
      const int32_t d = 8 * j + col + e;
      q[j].thread_elements()[e] = mine.active && d < head_dim ? float(query[mine.offset + d]) * args.scale : 0.0f;
    }
    o[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  float row_max = -INFINITY, row_sum = 0.0f;

  device const int32_t* blocks = block_tables + long(t.b) * args.max_blocks;
  for (int32_t first = t.lo; first < t.keys; first += key_tile()) {
    const int32_t count = min(key_tile(), t.keys - first);
    stage_kv_tile(key_cache, value_cache, blocks, first, count, t.kv_head, args, k_tile, v_tile, tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // S = Q K^T: k_tile holds K's rows, so the transposed load yields the [d][key] block.
    for (int32_t kb = 0; kb < key_tile() / 8; ++kb) {
      Block s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (int32_t j = 0; j < head_blocks(); ++j) {
        Block k;
        simdgroup_load(k, k_tile + 8 * kb * padded_dim() + 8 * j, padded_dim(), ulong2(0, 0), true);
        simdgroup_multiply_accumulate(s, q[j], k, s);
      }
      simdgroup_store(s, scores + 8 * kb, kPrefillKeyTile);
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    float rescale = 1.0f;
    if (lane < 8)
      rescale = softmax_step(scores + lane * kPrefillKeyTile, owned.active, owned.position, first,
                             count, args.window, row_max, row_sum);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    // O = diag(rescale) O + P V.
    const float factor = simd_shuffle(rescale, ushort(SimdgroupElementRow(lane)));
    for (int32_t j = 0; j < head_blocks(); ++j) o[j].thread_elements() *= factor;
    for (int32_t kb = 0; kb < key_tile() / 8; ++kb) {
      Block p;
      simdgroup_load(p, scores + 8 * kb, kPrefillKeyTile);
      for (int32_t j = 0; j < head_blocks(); ++j) {
        Block v;
        simdgroup_load(v, v_tile + 8 * kb * padded_dim() + 8 * j, padded_dim());
        simdgroup_multiply_accumulate(o[j], p, v, o[j]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);   // before the next tile is staged
  }
  const bool sink = args.has_sinks != 0 && owned.active;
  const SoftmaxNorm norm = softmax_norm(row_max, row_sum, sink, sink ? sinks[owned.head] : 0.0f);
  const float scale = simd_shuffle(norm.scale, ushort(SimdgroupElementRow(lane)));
  const float denom = simd_shuffle(norm.denom, ushort(SimdgroupElementRow(lane)));
  if (!mine.active) return;
  for (int32_t j = 0; j < head_blocks(); ++j)
    for (int32_t e = 0; e < 2; ++e) {
      const int32_t d = 8 * j + col + e;
      if (d < head_dim) out[mine.offset + d] = T(o[j].thread_elements()[e] * scale / denom);
    }
}

#define METALRT_PAGED_ATTENTION(T, SUFFIX)                                                   \
  template [[host_name("paged_attention_prefill_" #SUFFIX)]] kernel void                    \
  paged_attention_prefill<T>(device const T*, device const uchar*, device const uchar*,     \
                             device const int32_t*, device const int32_t*,                  \
                             device const int32_t*, device T*, constant PagedAttentionArgs&, \
                             device const float*, uint2, uint, uint, uint);

METALRT_PAGED_ATTENTION(float, f32)
METALRT_PAGED_ATTENTION(half, f16)
METALRT_PAGED_ATTENTION(bfloat, bf16)
