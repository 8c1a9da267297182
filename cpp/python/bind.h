// The areas of the nanobind extension metalrt._metalrt, one bind_<area>.cpp each.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "metalrt/dtype.h"

namespace nb = nanobind;

namespace metalrt::python {

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
// The numpy dtype holding a tensor's values; bfloat16 widens exactly to float32
// because numpy has no bfloat16 (bind_tensor.cpp).
nb::dlpack::dtype NumpyDType(DType dtype);

void BindErrors(nb::module_& m);     // C++ exceptions -> Python exceptions
void BindTensor(nb::module_& m);     // Tensor, numpy import/export, empty/zeros
void BindDevice(nb::module_& m);     // synchronize, device_info, is_available
void BindProviders(nb::module_& m);  // the op registry's providers and stats
void BindProfiler(nb::module_& m);   // the Metal profiler, flush
void BindShader(nb::module_& m);     // compile_shader: user MSL kernels
void BindDoctor(nb::module_& m);     // device facts for metalrt.doctor
void BindQuantized(nb::module_& m);  // QuantizedTensor, zero-copy tensors over host memory
void BindPlan(nb::module_& m);       // Plan (record/replay), step input/output transfers

// Op families, bound into the submodule _metalrt.ops; metalrt/ops/<family>.py wraps
// each with argument conversion and the user-facing docstring.
void BindElementwiseOps(nb::module_& ops);     // add, mul, relu, gelu, silu_and_mul, cast
void BindNormalizationOps(nb::module_& ops);   // layer_norm, rms_norm, softmax
void BindMatmulOps(nb::module_& ops);          // matmul, matmul_bt
void BindLayoutOps(nb::module_& ops);     // embedding, qkv_split, reshape_and_cache
void BindAttentionOps(nb::module_& ops);  // paged_attention
void BindSelectionOps(nb::module_& ops);  // greedy_argmax
void BindQuantizedOps(nb::module_& ops);  // dequantize, quantized_matmul_bt, quantized_embedding
void BindRopeOps(nb::module_& ops);       // rope_neox, rope_interleaved, rope caches, qk_norm_rope
void BindLinearAttentionOps(nb::module_& ops);  // causal_conv1d, gdn_gating, gated_delta_rule
void BindMoeOps(nb::module_& ops);        // gated_rms_norm, gated_query_split, sigmoid_mul, moe_* (#15)

}  // namespace metalrt::python
