// CPU QKV split: bit-exact copies of the three column ranges of every row.
#include <cstring>

#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu {
namespace {

bool QkvSplit(const OpCall& call) {
  const Tensor& qkv = call.inputs[0];
  const auto& p = call.param<ops::QkvSplitParams>();
  const size_t elem = DTypeSize(qkv.dtype());
  const int64_t widths[3] = {p.q_width, p.k_width, p.v_width};
  const char* src = static_cast<const char*>(qkv.data());
  const size_t src_row = static_cast<size_t>(qkv.dim(1)) * elem;
  size_t column = 0;   // byte offset of the current part inside a qkv row
  for (int part = 0; part < 3; ++part) {
    const size_t part_row = static_cast<size_t>(widths[part]) * elem;
    char* dst = static_cast<char*>(call.outputs[part].data());
    for (int64_t t = 0; t < qkv.dim(0); ++t)
      std::memcpy(dst + t * part_row, src + t * src_row + column, part_row);
    column += part_row;
  }
  return true;
}

METALRT_REGISTER_OP_PROVIDER("qkv_split", DeviceType::kCPU, ProviderTier::kOracle, QkvSplit);

}  // namespace
}  // namespace metalrt::cpu
