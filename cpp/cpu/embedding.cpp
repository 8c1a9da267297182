// CPU embedding: a bit-exact row copy in any dtype.
#include <cstring>
#include <string>

#include "metalrt/errors.h"
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
  // Every id is checked before any row is written, so a bad call leaves `out` untouched.
  for (int64_t t = 0; t < tokens; ++t)
    Check(id[t] >= 0 && id[t] < vocab, "embedding",
          "id " + std::to_string(id[t]) + " at position " + std::to_string(t) +
              " is outside the vocabulary of size " + std::to_string(vocab));
  const size_t row_bytes = static_cast<size_t>(weight.dim(1)) * DTypeSize(weight.dtype());
  const char* src = static_cast<const char*>(weight.data());
  char* dst = static_cast<char*>(out.data());
  for (int64_t t = 0; t < tokens; ++t)
    std::memcpy(dst + t * row_bytes, src + id[t] * row_bytes, row_bytes);
  return true;
}

METALRT_REGISTER_PROVIDER("embedding", DeviceType::kCPU, "cpu_embedding", 0, Embedding);

}  // namespace
}  // namespace metalrt::cpu
