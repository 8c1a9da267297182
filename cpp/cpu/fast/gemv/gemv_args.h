// The call the per-ISA GEMV kernels (gemv_<isa>.cpp) receive: plain data only, so
// the kernels' translation units, each compiled for its own instruction set, share
// no inline function or template instance with the rest of the binary (the linker
// could otherwise keep an AVX-512 copy of one for every caller).
#pragma once
#include <cstdint>

#include "cpu/fast/gemv/q8_activation.h"

namespace metalrt::cpu::fast {

enum class GemvFormat : uint8_t {
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K, kQ3_K, kQ2_K, kMxfp4Gguf, kAffine, kMxfp4
};
enum class ScaleDType : uint8_t { kF32, kF16, kBF16 };   // affine scales and biases

struct GemvArgs {
  GemvFormat format;
  int bits;          // affine code width (2..8)
  int group_size;    // affine group (32, 64, 128)
  int64_t k;         // input features (a multiple of 32)
  int64_t m;         // activation rows
  const uint8_t* data;     // weight rows, row_bytes apart
  int64_t row_bytes;
  const void* scales;      // affine [n, k / group_size]; mxfp4: uint8 E8M0 [n, k / 32]
  const void* biases;
  ScaleDType scale_dtype;
  const float* f16_table;  // f16 bits -> f32, 65536 entries (cpu/float_rows.h)
  const Q8Block* x;        // m * k / 32 blocks, row-major
  float* out;              // f32, out[i * out_stride + j] for weight row j
  int64_t out_stride;      // >= n: a fused call writes a column slice of a wider output
};

// out[i * out_stride + j] = sum over k of x[i, k] * w[j, k] for weight rows j in [begin, end), one
// kernel per instruction set; only the ones SelectedGemvIsa() allows may be called.
void GemvRowsPortable(const GemvArgs& args, int64_t begin, int64_t end);
void GemvRowsAvx2(const GemvArgs& args, int64_t begin, int64_t end);
void GemvRowsAvx512Vnni(const GemvArgs& args, int64_t begin, int64_t end);
void GemvRowsNeon(const GemvArgs& args, int64_t begin, int64_t end);

}  // namespace metalrt::cpu::fast
