// Arguments and tuning constants of the paged attention kernels
// (metal/paged_attention.metal), shared by the host dispatch (cpp/gpu/paged_attention.cpp)
// and MSL so grid math and kernel code cannot disagree.
#ifndef METALRT_METAL_PAGED_ATTENTION_ARGS_H_
#define METALRT_METAL_PAGED_ATTENTION_ARGS_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// head_dim is the function constant of this index (set per pipeline, so the feature
// loops are specialised); the kernels serve 1 <= head_dim <= kAttentionMaxHeadDim and
// the host declines larger heads.
METALRT_CONSTANT uint32_t kAttentionHeadDimConstant = 0;
METALRT_CONSTANT int32_t kAttentionSimdWidth = 32;
// 256: Gemma 3 and the Qwen3-Next / Qwen3.5 full-attention layers.
METALRT_CONSTANT int32_t kAttentionMaxHeadDim = 256;
// Lane l of a query row's SIMD-group holds features l, l + 32, ..., l + 224.
METALRT_CONSTANT int32_t kAttentionMaxDimsPerLane = kAttentionMaxHeadDim / kAttentionSimdWidth;
// Decode (metal/paged_attention_decode.metal): the context of a request is cut into
// partitions of kDecodePartition positions, and one threadgroup of kDecodeSimdgroups
// SIMD-groups per (request, query head, partition) serves it, SIMD-group s taking
// positions s, s + kDecodeSimdgroups, ... of the partition: at most
// kDecodeSimdgroupPositions positions in one SIMD-group's serial chain, and a context of
// 512 positions launches 32 SIMD-groups per query head (the layout of MLX's sdpa_vector).
// A context of 4,096 takes 8 threadgroups per (request, query head).
METALRT_CONSTANT int32_t kDecodeSimdgroups = 32;
METALRT_CONSTANT int32_t kDecodeSimdgroupPositions = 16;
METALRT_CONSTANT int32_t kDecodePartition = kDecodeSimdgroups * kDecodeSimdgroupPositions;
METALRT_CONSTANT int32_t kDecodeThreads = kDecodeSimdgroups * kAttentionSimdWidth;
// The merge pass: one SIMD-group per (request, query head).
METALRT_CONSTANT int32_t kDecodeMergeThreads = kAttentionSimdWidth;
// The first context position a decode query (the last of a context of seq_len) sees:
// partitions cover DecodeFirstPosition .. seq_len - 1 only.
inline int32_t DecodeFirstPosition(int32_t seq_len, int32_t window) {
  return window > 0 && seq_len > window ? seq_len - window : 0;
}
// Partitions of a decode query's visible positions.
inline int32_t DecodePartitions(int32_t seq_len, int32_t window) {
  return (seq_len - DecodeFirstPosition(seq_len, window) + kDecodePartition - 1) / kDecodePartition;
}
// Prefill: one threadgroup per (query tile of one request, kv head) holds kPrefillRows
// query rows, (query position, query head) pairs of the kv head's GQA group, as four
// 8-row blocks of SIMD-group matrices (one SIMD-group each). A group of more than
// kPrefillRows heads takes several threadgroups per kv head, each kPrefillRows heads
// (the last fewer) of one position.
METALRT_CONSTANT int32_t kPrefillRows = 32;
METALRT_CONSTANT int32_t kPrefillSimdgroups = kPrefillRows / 8;
METALRT_CONSTANT int32_t kPrefillThreads = kPrefillSimdgroups * kAttentionSimdWidth;
// Context positions staged per step in threadgroup memory: K and V tiles of
// [key tile][head_dim rounded up to 8] f32 in kPrefillTileFloats each, 2 x 8 KiB (of the
// 32 KiB a threadgroup may hold): kPrefillKeyTile positions up to head_dim 128, 8 above.
METALRT_CONSTANT int32_t kPrefillKeyTile = 16;
METALRT_CONSTANT int32_t kPrefillTileFloats = kPrefillKeyTile * 128;
// Positions per staged tile at a padded head_dim (a multiple of 8, <= kAttentionMaxHeadDim).
inline int32_t PrefillKeyTile(int32_t padded_dim) {
  return kPrefillTileFloats / padded_dim >= kPrefillKeyTile ? kPrefillKeyTile : 8;
}
// Query heads one prefill threadgroup serves, of a GQA group of `group` heads.
inline int32_t PrefillGroupHeads(int32_t group) { return group < kPrefillRows ? group : kPrefillRows; }
// Query positions per prefill tile.
inline int32_t PrefillQueryTile(int32_t group) { return kPrefillRows / PrefillGroupHeads(group); }
// Prefill threadgroups per (query tile, kv head): 1 unless the group is wider than kPrefillRows.
inline int32_t PrefillHeadChunks(int32_t group) {
  return (group + PrefillGroupHeads(group) - 1) / PrefillGroupHeads(group);
}

struct PagedAttentionArgs {
  int32_t heads;          // query heads
  int32_t kv_heads;
  int32_t block_size;     // cache slots per block
  int32_t max_blocks;     // block_tables row stride
  int32_t partitions;     // decode split: partial rows per (request, query head)
  float scale;            // softmax scale applied to q . k
  // Sliding window: the query at position p sees p - window + 1 .. p; 0 = full causal.
  // Positions before a query's window are never read (nor their block-table entries).
  int32_t window;
  // 1: buffer `sinks` holds a logit per query head that joins only the softmax
  // denominator (gpt-oss); 0: no sinks (the buffer bound there is not read).
  int32_t has_sinks;
  int32_t requests;       // rows of block_tables and seq_lens
  // 1: decode rows (DecodeRows, op_registry.h): the decode kernels' grid rows are query
  // rows, each attending as a decode step of its own over the context up to its
  // position, whatever its request's query count; 0: grid rows are requests of one query.
  int32_t decode_rows;
};
static_assert(sizeof(PagedAttentionArgs) == 40, "PagedAttentionArgs must match between host and MSL");

#endif  // METALRT_METAL_PAGED_ATTENTION_ARGS_H_
