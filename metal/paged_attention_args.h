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
METALRT_CONSTANT int32_t kAttentionMaxHeadDim = 128;
// Lane l of a query row's SIMD-group holds features l, l + 32, l + 64, l + 96.
METALRT_CONSTANT int32_t kAttentionMaxDimsPerLane = kAttentionMaxHeadDim / kAttentionSimdWidth;
// Context positions staged per step in threadgroup memory: K and V tiles of
// [kAttentionKeyTile][head_dim] f32, 2 x 16 x 128 x 4 = 16 KiB at most.
METALRT_CONSTANT int32_t kAttentionKeyTile = 16;
// Decode (metal/paged_attention_decode.metal): the context of a request is cut into
// partitions of kDecodePartition positions, and one threadgroup per (request, kv head,
// partition) serves up to kDecodeGroupHeads query heads of the GQA group (larger groups
// take several threadgroups per kv head). 256 positions give context 4,096 sixteen
// threadgroups per (request, kv head). Its kDecodeSimdgroups SIMD-groups take every
// kDecodeSimdgroups-th position of the partition.
METALRT_CONSTANT int32_t kDecodePartition = 256;
METALRT_CONSTANT int32_t kDecodeGroupHeads = 8;
METALRT_CONSTANT int32_t kDecodeSimdgroups = 4;
METALRT_CONSTANT int32_t kDecodeThreads = kDecodeSimdgroups * kAttentionSimdWidth;
// The merge pass: one SIMD-group per (request, query head).
METALRT_CONSTANT int32_t kDecodeMergeThreads = kAttentionSimdWidth;
// Prefill: one threadgroup per (tile of kPrefillQueryTile queries of one request, head),
// one SIMD-group per query.
METALRT_CONSTANT int32_t kPrefillQueryTile = 8;
METALRT_CONSTANT int32_t kPrefillThreads = kPrefillQueryTile * kAttentionSimdWidth;

struct PagedAttentionArgs {
  int32_t heads;          // query heads
  int32_t kv_heads;
  int32_t block_size;     // cache slots per block
  int32_t max_blocks;     // block_tables row stride
  int32_t group_heads;    // decode: query heads per threadgroup (<= kDecodeGroupHeads)
  int32_t partitions;     // decode split: partial rows per (request, query head)
  float scale;            // softmax scale applied to q . k
  int32_t unused;         // keeps the size a multiple of 8
};
static_assert(sizeof(PagedAttentionArgs) == 32, "PagedAttentionArgs must match between host and MSL");

#endif  // METALRT_METAL_PAGED_ATTENTION_ARGS_H_
