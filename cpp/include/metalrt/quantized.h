// Quantized weights: packed integer codes plus the scales that dequantize them, kept
// in the layout of the file they came from so a weight can be a view of a
// memory-mapped model (docs/quantization.md).
//
// Two families:
// * GGUF block types (ggml's ggml-common.h): `data` is uint8 [N, row_bytes] holding
//   each row's blocks byte for byte, row_bytes = K / BlockValues(format) *
//   BlockBytes(format); scales and biases live inside the blocks (left undefined).
// * MLX affine (mlx/ops.cpp affine_quantize): `data` is uint32 [N, K * bits / 32],
//   codes packed LSB first as one contiguous bitstream per row (for 2/4/8 bits a code
//   never straddles a word; 3/5/6 bits do); `scales` and `biases` [N, K / group_size]
//   in f32, f16 or bf16, one dtype; w[n, k] = scales[n, g] * q[n, k] + biases[n, g]
//   with g = k / group_size, in f32 (scales may be negative).
// * MXFP4 in its split layout (MLX mode "mxfp4", gpt-oss's `*_blocks` / `*_scales`):
//   `data` uint8 [N, K / 2], value k in the low nibble of byte k / 2 for even k (the
//   high nibble for odd k) as an FP4 E2M1 code; `scales` uint8 [N, K / 32], one E8M0
//   exponent e per 32 values; w = e2m1(code) * 2^(e - 127), exact in f32 (e = 255 is
//   2^128 too: inf where |e2m1| >= 1, never NaN; docs/quantization.md). No biases.
// GGUF's block_mxfp4 ("mxfp4_gguf": e then qs[16], value j in the low nibble of qs[j],
// j + 16 in the high one) is the same math in the GGUF family.
#pragma once
#include <cstdint>
#include <string>

#include "metalrt/tensor.h"

namespace metalrt {

enum class QuantFormat {
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K, kQ3_K, kQ2_K, kMxfp4Gguf, kAffine, kMxfp4
};

// "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "q3_k", "q2_k",
// "mxfp4_gguf", "affine", "mxfp4".
const char* QuantFormatName(QuantFormat format);
// Inverse of QuantFormatName (case-insensitive); std::invalid_argument listing the
// known names otherwise.
QuantFormat QuantFormatFromName(const std::string& name);
// GGUF formats: values per block (32, or 256 for the K-quants) and bytes per block.
// Affine and split MXFP4: the group is the block, so these are not defined
// (std::invalid_argument).
int64_t BlockValues(QuantFormat format);
int64_t BlockBytes(QuantFormat format);
// Bits per weight of a GGUF format's codes (2, 3, 4, 5, 6 or 8).
int GgufBits(QuantFormat format);
// Whether the format keeps its scales in a tensor of their own (affine, split MXFP4),
// which the kernels read beside data; the GGUF formats keep them inside the blocks.
inline bool HasScaleTensor(QuantFormat format) {
  return format == QuantFormat::kAffine || format == QuantFormat::kMxfp4;
}

struct QuantizedTensor {
  QuantFormat format = QuantFormat::kAffine;
  int64_t rows = 0;   // N: output features
  int64_t cols = 0;   // K: input features, the packed dimension
  int bits = 0;         // affine: 2, 3, 4, 5, 6 or 8; GGUF: the format's code width; mxfp4: 4
  int group_size = 0;   // affine: 32, 64 or 128; GGUF: the block size (32 or 256); mxfp4: 32
  Tensor data;
  Tensor scales, biases;   // affine (both), mxfp4 (scales only)

  DeviceType device() const { return data.device(); }
  // Bytes of data, scales and biases together.
  size_t nbytes() const;
  // The same weight with every tensor copied to `device` (unchanged tensors when it is
  // already there).
  QuantizedTensor To(DeviceType device) const;
  // "q4_1[576, 576] on metal", "affine(bits=4, group_size=64)[N, K] on cpu".
  std::string Describe() const;
};

// The validating constructor. Checks, naming what was expected in a
// std::invalid_argument ("[quantized_tensor] ...", or metalrt::TypeError for dtypes):
// rows, cols >= 1; GGUF: K divisible by the block size, data uint8 contiguous
// [rows, row_bytes], no scales or biases, bits / group_size 0 or the format's own;
// affine: bits in {2,3,4,5,6,8}, group_size in {32,64,128}, K divisible by
// group_size, data uint32 contiguous [rows, K * bits / 32], scales and biases
// contiguous [rows, K / group_size] of one float dtype; mxfp4: bits 0 or 4, group_size
// 0 or 32, K divisible by 32, data uint8 contiguous [rows, K / 2], scales uint8
// contiguous [rows, K / 32], no biases; every tensor on one device.
QuantizedTensor MakeQuantizedTensor(QuantFormat format, int64_t rows, int64_t cols, Tensor data,
                                    Tensor scales = Tensor(), Tensor biases = Tensor(),
                                    int bits = 0, int group_size = 0);

}  // namespace metalrt
