// Metal dispatch of paged_attention (kernels and constants: metal/paged_attention.metal,
// metal/paged_attention_args.h).
//
// Kernel choice, per request, from query_start_loc (read on the host: the batch
// description is host-written, and the entry point has validated it):
// * requests with one query go to the split-KV decode kernels
//   (metal/paged_attention_decode.metal): when every decode context fits one partition
//   of kDecodePartition positions, paged_attention_decode_<dtype> alone (a threadgroup
//   of kDecodeThreads per (request, query head)); otherwise
//   paged_attention_decode_split_<dtype> over (request, query head, partition)
//   threadgroups, the partitions' softmax states in an f32
//   scratch, then paged_attention_decode_merge_<dtype> over (request, head). The
//   scratch is a fresh tensor sized [B, heads, partitions, head_dim + 2]: its size moves
//   only when the longest decode context crosses a partition boundary, so repeat sizes
//   come from the buffer cache;
// * requests with more than one query (prefill, chunked prefill) go to
//   paged_attention_prefill_<dtype>, a threadgroup per (query tile, kv head) serving
//   the kv head's GQA group (PrefillGroupHeads heads, PrefillQueryTile positions; a
//   group wider than kPrefillRows heads takes ceil(group / kPrefillRows) threadgroups);
// * under DecodeRows (op_registry.h) every query row of every request goes to the decode
//   kernels as a decode query of its own (args.decode_rows), so a row's result is a
//   one-row decode step's;
// * a mixed batch encodes both kernels; each serves only its own requests and writes
//   only their rows, so the two run over disjoint request sets and in either order.
// A pure decode batch therefore dispatches the decode kernel only, a prefill-only batch
// the prefill kernel only. Requests with no query are skipped by both.
// A sliding window (args.window) is skipped, not masked: the decode partitions cover
// only the positions the query sees (DecodePartitions: at context 4,096 with window 1,024,
// 2 partitions, not 8), and prefill tiles start at their first query's window. Sinks
// (float32 [heads]) are bound at the kernels' sinks index; without them the query is
// bound there and has_sinks = 0 says it is not read.
// head_dim and the caches' types (kv_cache_args.h) are function constants (specialised
// pipelines); heads above
// kAttentionMaxHeadDim are declined (the reference tier serves them), and so is a
// batch with prefill requests on a device whose simdgroup_matrix lane layout differs
// from the one the prefill kernel assumes (probed once: simdgroup_layout_probe.h).
#include <algorithm>
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "gpu/metal_backend.h"
#include "gpu/op_capture.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "kv_cache_args.h"
#include "metalrt/kv_type.h"
#include "paged_attention_args.h"

static_assert(static_cast<int32_t>(metalrt::KvType::kQ4_0) == kKvQ4_0 &&
                  static_cast<int32_t>(metalrt::KvType::kQ8_0) == kKvQ8_0 &&
                  static_cast<int32_t>(metalrt::KvType::kBF16) == kKvBF16 &&
                  static_cast<int32_t>(metalrt::KvType::kF16) == kKvF16,
              "KvType codes must be the kernels' kKv* codes");

namespace metalrt::gpu {
namespace {

// {the most partitions of a decode query, the prefill requests' query tiles, the decode
// kernels' grid rows}: what the kernels and grids are chosen by, from the host-written
// batch description and the decode-rows setting (a plan's capture is keyed by it:
// op_capture.h). Under DecodeRows (op_registry.h) every query row is a decode query of
// its own (its last row sees the request's whole context) and no prefill tile runs.
HostKey AttentionGrids(const OpCall& call) {
  const int32_t* starts = call.inputs[5].data_as<int32_t>();
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int64_t batch = call.inputs[3].dim(0);
  const int64_t group = call.inputs[0].dim(1) / call.inputs[1].dim(2);
  const int64_t query_tile = PrefillQueryTile(static_cast<int32_t>(group));
  const int32_t window = static_cast<int32_t>(call.param<ops::PagedAttentionParams>().window);
  const bool decode_rows = DecodeRows();
  int64_t partitions = 0, prefill_tiles = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = starts[b + 1] - starts[b];
    if (q_len == 1 || (decode_rows && q_len > 1))
      partitions = std::max<int64_t>(partitions, DecodePartitions(seq_lens[b], window));
    else if (q_len > 1)
      prefill_tiles += (q_len + query_tile - 1) / query_tile;
  }
  return {partitions, prefill_tiles, decode_rows ? starts[batch] : batch};
}

bool MetalPagedAttention(const OpCall& call) {
  const Tensor& query = call.inputs[0];
  const Tensor& key_cache = call.inputs[1];
  const Tensor& block_tables = call.inputs[3];
  const Tensor& out = call.outputs[0];
  const int64_t heads = query.dim(1), head_dim = query.dim(2), kv_heads = key_cache.dim(2);
  const int64_t batch = block_tables.dim(0);
  if (head_dim > kAttentionMaxHeadDim) return false;
  const auto& params = call.param<ops::PagedAttentionParams>();
  const bool has_sinks = call.inputs.size() > 6;
  // The kernels count requests, heads, query rows, block slots, table columns and the window in
  // int32 (element offsets are 64-bit).
  if (!FitsInt(heads, batch, query.dim(0), key_cache.dim(1), block_tables.dim(1), params.window)) return false;
  const int32_t window = static_cast<int32_t>(params.window);
  if (query.numel() == 0) return true;   // nothing to attend (no tokens, heads or features)

  const int64_t group = heads / kv_heads;
  const HostKey grids = AttentionGrids(call);
  KeyCapture(&AttentionGrids, grids);
  const int64_t partitions = grids[0], prefill_tiles = grids[1], rows = grids[2];
  const bool decode_rows = DecodeRows();
  // Before anything is encoded: the reference tier serves the whole call.
  if (prefill_tiles > 0 && !ActiveMetalBackend().simdgroup_layout().Mismatch().empty()) return false;
  const PagedAttentionArgs args{static_cast<int32_t>(heads),
                                static_cast<int32_t>(kv_heads),
                                static_cast<int32_t>(key_cache.dim(1)),
                                static_cast<int32_t>(block_tables.dim(1)),
                                static_cast<int32_t>(partitions),
                                params.scale,
                                window,
                                has_sinks ? 1 : 0,
                                static_cast<int32_t>(batch),
                                decode_rows ? 1 : 0};
  const Tensor& sinks = has_sinks ? call.inputs[6] : query;
  // A pipeline per head_dim: one per model (kernel headers).
  const FunctionConstants constants = {Constant(kAttentionHeadDimConstant, static_cast<int32_t>(head_dim))};
  FunctionConstants cache_constants = constants;   // the kernels that read the caches
  cache_constants.push_back(Constant(
      kKeyTypeConstant, static_cast<int32_t>(KvTypeOf(key_cache, head_dim, "paged_attention", "key_cache"))));
  cache_constants.push_back(Constant(
      kValueTypeConstant, static_cast<int32_t>(KvTypeOf(call.inputs[2], head_dim, "paged_attention", "value_cache"))));
  auto launch = [&](const char* variant, const Tensor& result) {
    KernelLaunch kernel(KernelName("paged_attention", variant, query.dtype()), cache_constants);
    for (uint32_t i = 0; i < 6; ++i) kernel.input(i, call.inputs[i]);
    kernel.output(6, result).bytes(7, args).input(8, sinks);
    return kernel;
  };
  if (partitions > 0) {
    const Size3 grid = {static_cast<uint32_t>(rows), static_cast<uint32_t>(heads),
                        static_cast<uint32_t>(partitions)};
    const Size3 threads = {static_cast<uint32_t>(kDecodeThreads), 1, 1};
    if (partitions == 1) {
      launch("decode", out).threadgroups(grid, threads);
    } else {
      const Tensor partials = Tensor::Empty({rows, heads, partitions, head_dim + 2}, DType::kF32,
                                            DeviceType::kMETAL);
      launch("decode_split", partials).threadgroups(grid, threads);
      KernelLaunch(KernelName("paged_attention", "decode_merge", query.dtype()), constants)
          .input(0, partials)
          .input(1, call.inputs[4])
          .input(2, call.inputs[5])
          .output(3, out)
          .bytes(4, args)
          .input(5, sinks)
          .threadgroups({static_cast<uint32_t>(rows), static_cast<uint32_t>(heads), 1},
                        {static_cast<uint32_t>(kDecodeMergeThreads), 1, 1});
    }
  }
  if (prefill_tiles > 0) {
    const int64_t chunks = PrefillHeadChunks(static_cast<int32_t>(group));
    launch("prefill", out).threadgroups(
        {static_cast<uint32_t>(prefill_tiles), static_cast<uint32_t>(kv_heads * chunks), 1},
        {static_cast<uint32_t>(kPrefillThreads), 1, 1});
  }
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalPagedAttention);

}  // namespace metalrt::gpu
