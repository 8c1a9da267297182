// Metal dispatch of embedding: one thread per output element on a (dim, tokens) grid
// (metal/embedding.metal). Shapes beyond the kernel's index types decline.
#include <cstdint>

#include "embedding_args.h"
#include "gpu/kernel_launch.h"
#include "metalrt/op_registry.h"

namespace metalrt::gpu {
namespace {

bool MetalEmbedding(const OpCall& call) {
  const Tensor& weight = call.inputs[0];
  const Tensor& ids = call.inputs[1];
  const int64_t dim = weight.dim(1);
  const int64_t tokens = ids.dim(0);
  if (!FitsInt(dim) || !FitsUint(tokens))
    return false;
  KernelLaunch(KernelName("embedding", "gather", weight.dtype()))
      .input(0, weight)
      .input(1, ids)
      .output(2, call.outputs[0])
      .bytes(3, EmbeddingArgs{weight.dim(0), static_cast<int32_t>(dim), 0})
      .threads({static_cast<uint32_t>(dim), static_cast<uint32_t>(tokens), 1},
               {kEmbeddingThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("embedding", DeviceType::kMETAL, ProviderTier::kNative, MetalEmbedding);

}  // namespace metalrt::gpu
