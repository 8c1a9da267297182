// The activation side of the quantized GEMV: each row of x quantized once per call to
// int8 blocks of 32 (ggml's Q8_1 idea: a scale and the block's code sums, so a weight
// format with a min or an offset needs no second pass over x). This rounding is the
// fast provider's only departure from the oracle's f32 dot product; its bar is in
// docs/cpu.md and tests/cpp/test_cpu_fast_quantized.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace metalrt::cpu::fast {

// x[i] ~= d * q[i] for the 32 values of a block; sum[h] = sum of q over half h
// (values 16h .. 16h + 15), the halves Q6_K's 16-value scales need.
struct Q8Block {
  float d;
  int16_t sum[2];
  int8_t q[32];
};

// rows x k f32 values (k a multiple of 32) as rows * k / 32 blocks, row-major:
// d = max|x| / 127 over the block, q = round-to-nearest(x / d) in [-127, 127]
// (d = 0 and q = 0 for an all-zero block). False, with *blocks unspecified, when x
// holds a NaN or an infinity: int8 codes cannot carry them, so the caller leaves the
// call to the oracle, which propagates them.
bool QuantizeRowsQ8(const float* x, int64_t rows, int64_t k, std::vector<Q8Block>* blocks);

}  // namespace metalrt::cpu::fast
