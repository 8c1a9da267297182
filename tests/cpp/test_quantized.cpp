// Gates of the quantized weight (metalrt/quantized.h) and its CPU oracle
// (cpp/cpu/quantized*.cpp): the validating constructor's errors, hand-decoded blocks
// of each layout family, and the oracle's matmul and embedding against dequantize.
// Bit-exactness against gguf.quants.dequantize on random data is gated in
// tests/python/test_quantized.py, where the reference lives.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "metalrt/op_registry.h"
#include "metalrt/ops.h"
#include "op_testing.h"
#include "quantized_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

Tensor Bytes(std::vector<uint8_t> v, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(v.size()) / rows;
  return MakeInts({rows, cols}, DType::kU8, v);
}

void PutHalf(std::vector<uint8_t>& b, size_t offset, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(b.data() + offset, &h, 2);
}

std::vector<double> Dequantized(const QuantizedTensor& w) { return ReadFloat(ops::Dequantize(w)); }

}  // namespace

TEST_CASE("quantized_tensor: the validating constructor names what was expected") {
  const Tensor q41 = Tensor::Empty({2, 40}, DType::kU8, DeviceType::kCPU);   // K = 64: 2 blocks of 20 bytes
  CHECK(MakeQuantizedTensor(QuantFormat::kQ4_1, 2, 64, q41).group_size == 32);
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kQ4_1, 2, 64, q41.Slice(1, 0, 39)); },
                                     "[quantized_tensor] data must have shape [2, 40], got [2, 39] (truncated");
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kQ4_1, 2, 48, q41); },
                                     "[quantized_tensor] q4_1 needs K divisible by its block of 32");
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kQ4_K, 2, 64, q41); },
                                     "[quantized_tensor] q4_k needs K divisible by its block of 256");
  CheckThrows<TypeError>(
      [&] { MakeQuantizedTensor(QuantFormat::kQ8_0, 1, 32, Tensor::Empty({1, 34}, DType::kI8, DeviceType::kCPU)); },
      "[quantized_tensor] data must be uint8");
  CheckThrows<std::invalid_argument>([] { QuantFormatFromName("iq4_xs"); }, "[quantized_tensor] unknown format 'iq4_xs'");
  // Split MXFP4: data [N, K / 2] and scales [N, K / 32] uint8, no biases.
  const Tensor codes = Tensor::Empty({2, 32}, DType::kU8, DeviceType::kCPU);
  const Tensor exponents = Tensor::Empty({2, 2}, DType::kU8, DeviceType::kCPU);
  CHECK(MakeQuantizedTensor(QuantFormat::kMxfp4, 2, 64, codes, exponents).group_size == 32);
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kMxfp4, 2, 64, codes, exponents.Slice(1, 0, 1)); },
                                     "[quantized_tensor] scales must have shape [2, 2], got [2, 1]");
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kMxfp4, 2, 64, codes); },
                                     "[quantized_tensor] mxfp4 weights need scales");
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kMxfp4, 2, 64, codes, exponents, exponents); },
                                     "[quantized_tensor] mxfp4 has no biases");
  CheckThrows<std::invalid_argument>([&] { MakeQuantizedTensor(QuantFormat::kMxfp4, 2, 48, codes, exponents); },
                                     "[quantized_tensor] mxfp4 needs K divisible by 32");
  CheckThrows<TypeError>(
      [&] { MakeQuantizedTensor(QuantFormat::kMxfp4, 2, 64, codes, Tensor::Empty({2, 2}, DType::kF16, DeviceType::kCPU)); },
      "[quantized_tensor] scales must be uint8");
  CHECK(QuantFormatFromName("MXFP4") == QuantFormat::kMxfp4);
  CHECK(QuantFormatFromName("Q6_K") == QuantFormat::kQ6_K);

  const WeightSpec s{QuantFormat::kAffine, 4, 64, DType::kF16};
  const std::vector<Tensor> t = RandomWeight(s, 3, 128, 5);   // data [3, 16], scales [3, 2]
  CHECK(WeightOf(s, 3, 128, t, 0).nbytes() == 3 * 16 * 4 + 2 * 3 * 2 * 2);
  auto affine = [&](int bits, int gs, const Tensor& scales) {
    return MakeQuantizedTensor(QuantFormat::kAffine, 3, 128, t[0], scales, t[2], bits, gs);
  };
  CheckThrows<std::invalid_argument>([&] { affine(7, 64, t[1]); },
                                     "[quantized_tensor] affine bits must be one of 2, 3, 4, 5, 6, 8, got 7");
  CheckThrows<std::invalid_argument>([&] { affine(4, 48, t[1]); },
                                     "[quantized_tensor] affine group_size must be one of 32, 64, 128, got 48");
  CheckThrows<std::invalid_argument>([&] { affine(8, 64, t[1]); },
                                     "[quantized_tensor] data must have shape [3, 32], got [3, 16]");
  CheckThrows<std::invalid_argument>([&] { affine(4, 32, t[1]); },
                                     "[quantized_tensor] scales must have shape [3, 4], got [3, 2]");
  CheckThrows<TypeError>([&] { affine(4, 64, Tensor::Empty({3, 2}, DType::kBF16, DeviceType::kCPU)); },
                         "[quantized_tensor] biases must be bfloat16, got float16");
  CheckThrows<std::invalid_argument>(
      [&] { MakeQuantizedTensor(QuantFormat::kAffine, 3, 128, t[0], Tensor(), Tensor(), 4, 64); },
      "[quantized_tensor] affine weights need scales and biases");
  // A weight assembled by hand is validated again by every op.
  QuantizedTensor edited = WeightOf(s, 3, 128, t, 0);
  edited.group_size = 32;
  CheckThrows<std::invalid_argument>([&] { ops::Dequantize(edited); },
                                     "[quantized_tensor] scales must have shape [3, 4], got [3, 2]");
  CheckThrows<std::invalid_argument>([&] { ops::Dequantize(WeightOf(s, 3, 128, t, 0), DType::kF32, t[1]); },
                                     "[dequantize] out must");
}

TEST_CASE("cpu dequantize: hand-decoded blocks of each layout") {
  SUBCASE("q4_1: byte j holds elements j and j + 16; w = d * q + m") {
    std::vector<uint8_t> b(20, 0);
    PutHalf(b, 0, 0.5f);
    PutHalf(b, 2, -1.0f);
    b[4] = 0x3A;    // element 0 = 10, element 16 = 3
    b[19] = 0xF1;   // element 15 = 1, element 31 = 15
    const std::vector<double> w = Dequantized(MakeQuantizedTensor(QuantFormat::kQ4_1, 1, 32, Bytes(b, 1)));
    CHECK(w[0] == 4.0);
    CHECK(w[16] == 0.5);
    CHECK(w[15] == -0.5);
    CHECK(w[31] == 6.5);
    CHECK(w[1] == -1.0);
  }
  SUBCASE("q8_0: w = int8 * d, negative d") {
    std::vector<uint8_t> b(34, 0);
    PutHalf(b, 0, -0.25f);
    b[2] = 0x80;   // -128
    b[33] = 7;
    const std::vector<double> w = Dequantized(MakeQuantizedTensor(QuantFormat::kQ8_0, 1, 32, Bytes(b, 1)));
    CHECK(w[0] == 32.0);
    CHECK(w[31] == -1.75);
  }
  SUBCASE("q5_0: bit j of qh is element j's fifth bit; w = d * (q - 16)") {
    std::vector<uint8_t> b(22, 0);
    PutHalf(b, 0, 1.0f);
    b[2 + 2] = 0x01;   // qh bit 16: element 16
    b[6] = 0x21;       // element 0 low nibble 1, element 16 low nibble 2
    const std::vector<double> w = Dequantized(MakeQuantizedTensor(QuantFormat::kQ5_0, 1, 32, Bytes(b, 1)));
    CHECK(w[0] == -15.0);
    CHECK(w[16] == 2.0);
  }
  SUBCASE("q3_k: a CLEAR hmask bit subtracts 4; 6-bit scales split over two bytes, minus 32") {
    std::vector<uint8_t> b(110, 0);
    PutHalf(b, 108, 0.5f);
    b[32] = 0x03;    // element 0: low bits 3
    b[0] = 0x01;     // hmask[0] bit 0: element 0's high bit set -> q = 3
    b[96] = 0x05;    // scale 0: low nibble 5 ...
    b[104] = 0x02;   // ... top bits 2 -> 37 - 32 = 5; element 1: q = 0 - 4
    b[72] = 0x10;    // element 200 = 128 + 2 * 32 + 8: qs[40] bits 4..5 = 1
    b[8] = 0x40;     // hmask[8] bit 6 (200 / 32) set -> q = 1
    b[100] = 0x70;   // scale 12: high nibble of byte 4, top bits 0 -> 7 - 32 = -25
    const std::vector<double> w = Dequantized(MakeQuantizedTensor(QuantFormat::kQ3_K, 1, 256, Bytes(b, 1)));
    CHECK(w[0] == 7.5);
    CHECK(w[1] == -10.0);
    CHECK(w[200] == -12.5);
  }
  SUBCASE("q2_k: byte v / 16 of scales is scale (low) and min (high); w = d * sc * q - dmin * m") {
    std::vector<uint8_t> b(84, 0);
    PutHalf(b, 80, 0.25f);
    PutHalf(b, 82, 1.0f);
    b[0] = 0x3A;     // scale 10, min 3
    b[16] = 0x42;    // element 0: bits 0..1 = 2; element 96: bits 6..7 = 1
    b[6] = 0x04;     // element 96's scale 4, min 0
    b[79] = 0xC0;    // element 255 = 128 + 3 * 32 + 31: qs[63] bits 6..7 = 3
    b[15] = 0x21;    // scale 1, min 2
    const std::vector<double> w = Dequantized(MakeQuantizedTensor(QuantFormat::kQ2_K, 1, 256, Bytes(b, 1)));
    CHECK(w[0] == 2.0);
    CHECK(w[96] == 1.0);
    CHECK(w[255] == -1.25);
    CHECK(w[1] == -3.0);
  }
  SUBCASE("mxfp4_gguf: e then qs[16]; value j low nibble of qs[j], j + 16 high; w = e2m1 * 2^(e - 127)") {
    std::vector<uint8_t> b(3 * 17, 0);
    b[0] = 126;                 // 2^-1
    b[1] = 0xF3;                // value 0: code 3 = 1.5; value 16: code 15 = -6
    b[16] = 0x98;               // value 15: code 8 = -0 (GGUF reads +0); value 31: code 9 = -0.5
    b[17] = 0;                  // 2^-127, subnormal: value 32 = 6 * 2^-127
    b[18] = 0x07;
    b[34] = 255;                // 2^128: value 64 = 0.5 * 2^128 = 2^127, value 80 = 1 * 2^128 = inf
    b[35] = 0x21;
    const std::vector<double> w = Dequantized(MakeQuantizedTensor(QuantFormat::kMxfp4Gguf, 1, 96, Bytes(b, 1)));
    CHECK(w[0] == 0.75);
    CHECK(w[16] == -3.0);
    CHECK(w[15] == 0.0);
    CHECK(!std::signbit(w[15]));
    CHECK(w[31] == -0.25);
    CHECK(w[32] == std::ldexp(6.0, -127));
    CHECK(w[64] == std::ldexp(1.0, 127));
    CHECK(w[80] == std::numeric_limits<double>::infinity());
  }
  SUBCASE("mxfp4: value k in byte k / 2 (low nibble for even k), E8M0 scales apart; code 8 is -0") {
    std::vector<uint8_t> q(32, 0);
    q[0] = 0xD6;   // value 0: code 6 = 4; value 1: code 13 = -3
    q[1] = 0x08;   // value 2: code 8 = -0
    q[16] = 0x1F;  // value 32: code 15 = -6; value 33: code 1 = 0.5
    const Tensor scales = MakeInts({1, 2}, DType::kU8, std::vector<uint8_t>{129, 254});
    const QuantizedTensor w = MakeQuantizedTensor(QuantFormat::kMxfp4, 1, 64, Bytes(q, 1), scales);
    CHECK((w.bits == 4 && w.group_size == 32 && w.nbytes() == 34));
    const std::vector<double> v = Dequantized(w);
    CHECK(v[0] == 16.0);
    CHECK(v[1] == -12.0);
    CHECK((v[2] == 0.0 && std::signbit(v[2])));
    CHECK(v[32] == -std::numeric_limits<double>::infinity());   // -6 * 2^127 overflows
    CHECK(v[33] == std::ldexp(1.0, 126));
  }
  SUBCASE("affine 3-bit: codes straddle uint32 words (LSB-first bitstream)") {
    // Code 10 occupies bits 30..32: two bits at the top of word 0, one in word 1.
    std::vector<uint32_t> words(3, 0);
    words[0] = 0x3u << 30;   // code 10 low bits 11
    words[1] = 0x1u;         // code 10 high bit 1 -> 7
    const Tensor data = MakeInts({1, 3}, DType::kU32, words);
    const Tensor scales = MakeFloat({1, 1}, DType::kF32, {-0.5});
    const Tensor biases = MakeFloat({1, 1}, DType::kF32, {2.0});
    const std::vector<double> w =
        Dequantized(MakeQuantizedTensor(QuantFormat::kAffine, 1, 32, data, scales, biases, 3, 32));
    CHECK(w[10] == -1.5);
    CHECK(w[9] == 2.0);
    CHECK(w[11] == 2.0);
  }
}

TEST_CASE("cpu quantized_matmul_bt and quantized_embedding agree with dequantize") {
  const WeightSpec s{QuantFormat::kQ4_K};
  const std::vector<Tensor> t = RandomWeight(s, 6, 512, 11);
  const QuantizedTensor w = WeightOf(s, 6, 512, t, 0);
  const std::vector<double> dense = Dequantized(w);
  const Tensor x = MakeFloat({3, 512}, DType::kF32, RandomValues(3 * 512, 12));
  // The oracle's gate: the fast provider (tests/cpp/test_cpu_fast_quantized.cpp) is off.
  SetProviderEnabled("cpu_fast_quantized_matmul_bt", false);
  const std::vector<double> xs = ReadFloat(x), got = ReadFloat(ops::QuantizedMatmulBT(x, w));
  SetProviderEnabled("cpu_fast_quantized_matmul_bt", true);
  CHECK(GetProviderStats("quantized_matmul_bt", DeviceType::kCPU).last_selected == "cpu_quantized_matmul_bt");
  std::vector<double> want(3 * 6, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int n = 0; n < 6; ++n)
      for (int k = 0; k < 512; ++k) want[i * 6 + n] += xs[i * 512 + k] * dense[n * 512 + k];
  CHECK(Nmse(got, want) < 1e-12);
  const std::vector<double> rows =
      ReadFloat(ops::QuantizedEmbedding(MakeInts({2}, DType::kI32, std::vector<int32_t>{5, 0}), w));
  CHECK(std::equal(rows.begin(), rows.begin() + 512, dense.begin() + 5 * 512));
  CHECK(std::equal(rows.begin() + 512, rows.end(), dense.begin()));
  CheckThrows<std::invalid_argument>(
      [&] { ops::QuantizedEmbedding(MakeInts({1}, DType::kI32, std::vector<int32_t>{6}), w); },
      "[quantized_embedding] id 6 at position 0 is outside the vocabulary of size 6");
  CheckThrows<std::invalid_argument>([&] { ops::QuantizedMatmulBT(MakeFloat({1, 256}, DType::kF32, RandomValues(256, 1)), w); },
                                     "[quantized_matmul_bt] x must have K=512 columns");
}
