// CPU embedding: a bit-exact row copy in any dtype. The entry point has rejected ids
// outside [0, V) it could read; one that reaches the oracle anyway gives a zero row
// (the Metal kernel does the same). Tokens are spread over ParallelFor's threads.
#include <algorithm>
#include <cstring>

#include "cpu/parallel.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool Embedding(const OpCall& call) {
  const Tensor& weight = call.inputs[0];
  const Tensor& ids = call.inputs[1];
  const Tensor& out = call.outputs[0];
  const int64_t vocab = weight.dim(0);
  const int64_t tokens = ids.dim(0);
  const int32_t* id = ids.data_as<int32_t>();
  const size_t row_bytes = static_cast<size_t>(weight.dim(1)) * DTypeSize(weight.dtype());
  const char* src = static_cast<const char*>(weight.data());
  char* dst = static_cast<char*>(out.data());
  // Chunks of at least 64 KiB of rows: a copy is cheap, a thread hand-off is not.
  const int64_t min_tokens = std::max<int64_t>(1, 65536 / static_cast<int64_t>(std::max<size_t>(1, row_bytes)));
  ParallelFor(tokens, min_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (id[t] >= 0 && id[t] < vocab)
        std::memcpy(dst + t * row_bytes, src + id[t] * row_bytes, row_bytes);
      else
        std::memset(dst + t * row_bytes, 0, row_bytes);
    }
  });
  return true;
}

METALRT_REGISTER_OP_PROVIDER("embedding", DeviceType::kCPU, ProviderTier::kOracle, Embedding);

}  // namespace
}  // namespace metalrt::cpu
