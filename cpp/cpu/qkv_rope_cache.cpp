// CPU provider of qkv_rope_cache: the composition of the CPU oracles it fuses —
// qkv_split, rope_neox / rope_interleaved of q and k (in place), reshape_and_cache — so
// the oracle is not a new formula.
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

bool QkvRopeCache(const OpCall& call) {
  const auto& p = call.param<ops::QkvRopeCacheParams>();
  const Tensor& qkv = call.inputs[0];
  const Tensor& positions = call.inputs[1];
  const Tensor& q_out = call.outputs[0];
  const Tensor& key_cache = call.outputs[1];
  const int64_t tokens = qkv.dim(0), kv_heads = key_cache.dim(2), head_dim = qkv.dim(1) / (p.heads + 2 * kv_heads);
  auto [q, k, v] = ops::QkvSplit(qkv, p.heads * head_dim, kv_heads * head_dim, kv_heads * head_dim);
  const Tensor q3 = q.Reshape({tokens, p.heads, head_dim});
  const Tensor k3 = k.Reshape({tokens, kv_heads, head_dim});
  const auto rope = p.neox ? ops::RopeNeox : ops::RopeInterleaved;
  rope(q3, positions, p.rotary_dim, p.base, q_out);
  rope(k3, positions, p.rotary_dim, p.base, k3);
  ops::ReshapeAndCache(k3, v.Reshape({tokens, kv_heads, head_dim}), key_cache, call.outputs[2], call.inputs[2]);
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("qkv_rope_cache", DeviceType::kCPU, ProviderTier::kOracle, QkvRopeCache);

}  // namespace metalrt::cpu
