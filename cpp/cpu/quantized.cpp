// CPU oracle of the quantized-weight ops (also the CPU device's kernels for quantized
// models). Every op dequantizes whole rows with DequantizeRow (bit-exact against the
// references) and, for quantized_matmul_bt, takes each output as an f32 dot product
// over K in the fixed order of Dot8 (cpu/dot.h). Output rows are split
// across threads; results do not depend on the split.
#include <vector>

#include "cpu/dot.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "cpu/quantized_blocks.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool Dequantize(const OpCall& call) {
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  ParallelFor(w.rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t n = begin; n < end; ++n) {
      DequantizeRow(w, n, row.data());
      StoreRowF32(out.data(), out.dtype(), n * w.cols, w.cols, row.data());
    }
  });
  return true;
}

bool QuantizedMatmulBT(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  const int64_t m = x.dim(0), n = w.rows, k = w.cols;
  std::vector<float> xf(static_cast<size_t>(m * k));
  LoadRowF32(x.data(), x.dtype(), 0, m * k, xf.data());
  std::vector<float> result(static_cast<size_t>(m * n));
  ParallelFor(n, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = begin; j < end; ++j) {
      DequantizeRow(w, j, row.data());
      for (int64_t i = 0; i < m; ++i) result[i * n + j] = Dot8(xf.data() + i * k, row.data(), k);
    }
  });
  StoreRowF32(out.data(), out.dtype(), 0, m * n, result.data());
  return true;
}

bool QuantizedEmbedding(const OpCall& call) {
  const int32_t* ids = call.inputs[0].data_as<int32_t>();
  const QuantizedTensor& w = call.param<QuantizedTensor>();
  const Tensor& out = call.outputs[0];
  const int64_t tokens = call.inputs[0].dim(0);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] >= 0 && ids[t] < w.rows) DequantizeRow(w, ids[t], row.data());
    else std::fill(row.begin(), row.end(), 0.0f);
    StoreRowF32(out.data(), out.dtype(), t * w.cols, w.cols, row.data());
  }
  return true;
}

METALRT_REGISTER_OP_PROVIDER("dequantize", DeviceType::kCPU, ProviderTier::kOracle, Dequantize);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt", DeviceType::kCPU, ProviderTier::kOracle,
                             QuantizedMatmulBT);
METALRT_REGISTER_OP_PROVIDER("quantized_embedding", DeviceType::kCPU, ProviderTier::kOracle,
                             QuantizedEmbedding);

}  // namespace
}  // namespace metalrt::cpu
