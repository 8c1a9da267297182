// The activation quantization of the fast quantized GEMV (cpu/fast/gemv/q8_activation.h):
// the scalar definition's error bound per value, its special cases, and the AVX-512
// version byte-identical to it on the same inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/gemv/q8_activation.h"

using namespace metalrt::cpu::fast;

namespace {

// 12 blocks of 32: normal values with 30x outliers, all zeros, values below the
// smallest usable step (taken as zero), huge values, exact half steps, one sign.
std::vector<float> Blocks() {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(12 * 32);
  for (float& v : x) v = normal(gen);
  for (int i = 0; i < 32; i += 7) x[i] *= 30.0f;
  for (int i = 0; i < 32; ++i) {
    x[32 + i] = 0.0f;
    x[64 + i] = 1e-39f * float(i % 3);
    x[96 + i] = 3e37f * (i % 2 ? -1.0f : 1.0f) * (float(i + 1) / 32.0f);
    x[128 + i] = 127.0f * float(i - 16) / 16.0f + (i % 2 ? 0.5f : 0.0f);
    x[160 + i] = float(i + 1);
  }
  return x;
}

}  // namespace

TEST_CASE("cpu fast q8 activation: each value within half a residual step, zero blocks zero, NaN and inf declined") {
  const std::vector<float> x = Blocks();
  const int64_t k = static_cast<int64_t>(x.size());
  std::vector<Q8Block> blocks(static_cast<size_t>(k / 32));
  REQUIRE(QuantizeRowsQ8(x.data(), 1, k, blocks.data()));
  for (int64_t b = 0; b < k / 32; ++b) {
    const Q8Block& q = blocks[static_cast<size_t>(b)];
    int32_t sums[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int32_t c = kResidualSteps * q.q[i] + q.r[i];
      CHECK(q.c[i] == c);
      sums[i / 16] += c;
      const double value = x[static_cast<size_t>(32 * b + i)];
      // A block taken as zero (d = 0) holds only values of magnitude below ~1e-36.
      if (q.d == 0.0f) CHECK(std::fabs(value) < 1e-35);
      else CHECK(std::fabs(double(q.d) * c - value) <= 0.5 * q.d * (1 + 1e-5) + 1e-6 * std::fabs(value));
    }
    CHECK(q.sum[0] == sums[0]);
    CHECK(q.sum[1] == sums[1]);
  }
  CHECK(blocks[1].d == 0.0f);
  CHECK(blocks[2].d == 0.0f);   // a step below ~1e-36 is taken as zero
  for (float special : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> bad = x;
    bad[200] = special;
    CHECK_FALSE(QuantizeRowsQ8(bad.data(), 1, k, blocks.data()));
  }
}

TEST_CASE("cpu fast q8 activation: the AVX-512 blocks are the scalar blocks, byte for byte") {
#if defined(__x86_64__)
  if (SelectedGemvIsa() != GemvIsa::kAvx512Vnni) {
    MESSAGE("this CPU runs no AVX-512: the scalar quantization serves every call");
    return;
  }
  std::vector<float> x = Blocks();
  const int64_t k = static_cast<int64_t>(x.size()) / 2;   // two rows
  std::vector<Q8Block> scalar(x.size() / 32), wide(x.size() / 32);
  std::memset(scalar.data(), 0xAB, scalar.size() * sizeof(Q8Block));
  std::memset(wide.data(), 0xCD, wide.size() * sizeof(Q8Block));
  REQUIRE(QuantizeRowsQ8(x.data(), 2, k, scalar.data()));
  REQUIRE(QuantizeRowsQ8Avx512(x.data(), 2, k, wide.data()));
  for (size_t b = 0; b < scalar.size(); ++b) {
    CAPTURE(b);
    CHECK(std::memcmp(&scalar[b], &wide[b], sizeof(Q8Block)) == 0);
  }
  for (float special : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    x[300] = special;
    CHECK_FALSE(QuantizeRowsQ8Avx512(x.data(), 2, k, wide.data()));
  }
#else
  MESSAGE("not x86-64: no AVX-512 quantization to compare");
#endif
}
