// Metal dispatch of paged_attention (kernels and constants: metal/paged_attention.metal,
// metal/paged_attention_args.h).
//
// Kernel choice, per request, from query_start_loc (read on the host: the batch
// description is host-written, and the entry point has validated it):
// * requests with one query go to paged_attention_decode_<dtype>, a threadgroup per
//   (request, kv head) serving the GQA group;
// * requests with more than one query (prefill, chunked prefill) go to
//   paged_attention_prefill_<dtype>, a threadgroup per (query tile, head);
// * a mixed batch encodes both kernels; each serves only its own requests and writes
//   only their rows, so the two run over disjoint request sets and in either order.
// A pure decode batch therefore dispatches the decode kernel only, a prefill-only batch
// the prefill kernel only. Requests with no query are skipped by both.
// head_dim is a function constant (specialised pipelines); heads above
// kAttentionMaxHeadDim are declined (the reference tier serves them).
#include <algorithm>
#include <cstdint>

#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "paged_attention_args.h"

namespace metalrt::gpu {
namespace {

bool MetalPagedAttention(const OpCall& call) {
  const Tensor& query = call.inputs[0];
  const Tensor& key_cache = call.inputs[1];
  const Tensor& block_tables = call.inputs[3];
  const Tensor& out = call.outputs[0];
  const int64_t heads = query.dim(1), head_dim = query.dim(2), kv_heads = key_cache.dim(2);
  const int64_t batch = block_tables.dim(0);
  if (head_dim > kAttentionMaxHeadDim) return false;
  // The kernels count requests, heads, block slots and table columns in int32 (element
  // offsets are 64-bit).
  if (!FitsInt(heads, batch, key_cache.dim(1), block_tables.dim(1))) return false;
  if (query.numel() == 0) return true;   // nothing to attend (no tokens, heads or features)

  const int32_t* starts = call.inputs[5].data_as<int32_t>();
  bool any_decode = false;
  int64_t prefill_tiles = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q_len = starts[b + 1] - starts[b];
    any_decode |= q_len == 1;
    if (q_len > 1) prefill_tiles += (q_len + kPrefillQueryTile - 1) / kPrefillQueryTile;
  }
  const int64_t group = heads / kv_heads;
  const int32_t simdgroups = static_cast<int32_t>(std::min<int64_t>(group, kDecodeMaxSimdgroups));
  const PagedAttentionArgs args{static_cast<int32_t>(heads),
                                static_cast<int32_t>(kv_heads),
                                static_cast<int32_t>(key_cache.dim(1)),
                                static_cast<int32_t>(block_tables.dim(1)),
                                simdgroups,
                                call.param<ops::PagedAttentionParams>().scale};
  auto launch = [&](const char* variant) {
    KernelLaunch kernel(KernelName("paged_attention", variant, query.dtype()),
                        {Constant(kAttentionHeadDimConstant, static_cast<int32_t>(head_dim))});
    for (uint32_t i = 0; i < 6; ++i) kernel.input(i, call.inputs[i]);
    kernel.output(6, out).bytes(7, args);
    return kernel;
  };
  if (any_decode) {
    const int64_t chunks = (group + simdgroups - 1) / simdgroups;
    launch("decode").threadgroups(
        {static_cast<uint32_t>(batch), static_cast<uint32_t>(kv_heads * chunks), 1},
        {static_cast<uint32_t>(simdgroups * kAttentionSimdWidth), 1, 1});
  }
  if (prefill_tiles > 0) {
    launch("prefill").threadgroups(
        {static_cast<uint32_t>(prefill_tiles), static_cast<uint32_t>(heads), 1},
        {static_cast<uint32_t>(kPrefillThreads), 1, 1});
  }
  return true;
}

}  // namespace

METALRT_REGISTER_PROVIDER("paged_attention", DeviceType::kMETAL, "metal_paged_attention", 10,
                          MetalPagedAttention);

}  // namespace metalrt::gpu
