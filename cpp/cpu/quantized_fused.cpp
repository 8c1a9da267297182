// CPU providers of the fused quantized GEMVs: the compositions of the CPU oracles they
// fuse (quantized_matmul_bt, then add or silu_and_mul; one per concatenated weight), so
// the oracle is not a new formula.
#include "metalrt/op_registry.h"
#include "ops/quantized_fused.h"

namespace metalrt::cpu {

METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_add", DeviceType::kCPU, ProviderTier::kOracle,
                             ops::detail::ComposeQuantizedMatmulBTAdd);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_swiglu", DeviceType::kCPU, ProviderTier::kOracle,
                             ops::detail::ComposeQuantizedMatmulBTSwiglu);
METALRT_REGISTER_OP_PROVIDER("quantized_matmul_bt_concat", DeviceType::kCPU, ProviderTier::kOracle,
                             ops::detail::ComposeQuantizedMatmulBTConcat);

}  // namespace metalrt::cpu
