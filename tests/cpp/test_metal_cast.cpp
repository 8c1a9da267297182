// Gates of the Metal cast kernels (metal/cast.metal): every (source, target) dtype pair,
// bit-exact against the CPU oracle through the op-case table, on inputs that reach
// every rule: random bit patterns of the source (for the float dtypes: NaNs with
// payloads, signalling NaNs, infinities, subnormals), values at and beyond every
// integer type's range, truncation toward zero, round-to-nearest-even ties, and
// integers whose rounding through f32 first would differ (double rounding).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// Float values that exercise float -> int saturation and truncation, float -> float
// rounding and overflow, and the specials.
const double kFloatSpecials[] = {
    0.0, -0.0, 0.9, -0.9, 1.5, -1.5, 2.5, -2.99, 127.0, 127.5, 128.0, -128.0, -128.5, -129.0,
    255.0, 255.5, 256.0, 65504.0, 65519.0, 65520.0, 70000.0, 2147483520.0, 2147483648.0,
    -2147483648.0, -2147483904.0, 4294967040.0, 4294967296.0, 9.2233715e18, 9.223372036854775808e18,
    -9.223372036854775808e18, -9.3e18, 1e30, -1e30, 1e-40, -1e-40, 6e-8, 3e-8, 1.00048828125,
    1.0009765625, 1.00390625, 1.01171875, INFINITY, -INFINITY, NAN, -NAN};

// Integers whose correctly rounded f16 / bf16 / f32 value differs from a rounding
// through f32 first, ties, and each type's extremes (stored modulo the width).
const int64_t kIntSpecials[] = {
    0, 1, -1, 127, -128, 128, 255, 256, 2049, 2051, 4097, 65504, 65519, 65520, 65535, 65536,
    (1 << 24) + 1, (1 << 24) + 3, (int64_t{1} << 30) + (1 << 22) + 1, (int64_t{1} << 30) + (1 << 22),
    2147483647, -2147483647 - 1, 4294967295, (int64_t{1} << 53) + 1,
    (int64_t{1} << 62) + (int64_t{1} << 54) + 1, std::numeric_limits<int64_t>::max(),
    std::numeric_limits<int64_t>::min(), -((int64_t{1} << 40) + (int64_t{1} << 32) + 1)};

// A CPU tensor of `dtype` holding the specials of its kind, then random bit patterns
// (every third of them a moderate value, so truncation and rounding are common).
Tensor CastSource(DType dtype, const Shape& shape, uint32_t seed) {
  Tensor t = RandomBits(shape, dtype, seed);
  const size_t size = DTypeSize(dtype);
  std::mt19937 gen(seed);
  auto* bytes = static_cast<uint8_t*>(t.data());
  std::normal_distribution<double> moderate(0.0, 300.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto k = static_cast<size_t>(i);
    if (IsFloating(dtype)) {
      if (k < std::size(kFloatSpecials)) StoreFromF32(t.data(), dtype, i, static_cast<float>(kFloatSpecials[k]));
      else if (k % 3 == 0) StoreFromF32(t.data(), dtype, i, static_cast<float>(moderate(gen)));
    } else if (k < std::size(kIntSpecials)) {
      std::memcpy(bytes + i * size, &kIntSpecials[k], size);   // little-endian: the low bytes
    } else if (k % 3 == 0) {
      const auto v = static_cast<int64_t>(moderate(gen));
      std::memcpy(bytes + i * size, &v, size);
    }
  }
  if (dtype == DType::kF32 && t.numel() > 1) {   // a NaN payload and a signalling NaN
    const uint32_t nans[] = {0x7fc12345u, 0xff800001u};
    std::memcpy(bytes, &nans[0], 4);
    std::memcpy(bytes + 4, &nans[1], 4);
  }
  if ((dtype == DType::kF16 || dtype == DType::kBF16) && t.numel() > 1) {
    const uint16_t nans[] = {static_cast<uint16_t>(dtype == DType::kF16 ? 0x7c01u : 0x7f81u),
                             static_cast<uint16_t>(dtype == DType::kF16 ? 0xfe3fu : 0xffc5u)};
    std::memcpy(bytes, &nans[0], 2);
    std::memcpy(bytes + 2, &nans[1], 2);
  }
  return t;
}

}  // namespace

METALRT_OP_CASES(cast_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 900;
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes)
      for (const Shape& shape : {Shape{1}, Shape{3, 87}}) {
        const std::string kernel = gpu::KernelName("cast", gpu::KernelDTypeSuffix(from), to);
        cases.push_back(BitExact(SingleOutputCase(
            CaseName("cast", from, shape, std::string("to_") + gpu::KernelDTypeSuffix(to)), "cast", kernel,
            {CastSource(from, shape, seed++)}, {shape, to}, {},
            [to](const Inputs& in, const Tensor& out) { ops::Cast(in[0], to, out); })));
      }
  return cases;
}

TEST_CASE("metal cast: rows [1, 3) of a 4-row allocation change only those rows") {
  const Tensor x = CastSource(DType::kF32, {4, 45}, 990);
  const Tensor out = Tensor::Empty({4, 45}, DType::kBF16, DeviceType::kMETAL);
  Poison(out);
  ops::Cast(CopyToDevice(x, DeviceType::kMETAL).Slice(0, 1, 3), DType::kBF16, out.Slice(0, 1, 3));
  const Tensor got = CopyToDevice(out, DeviceType::kCPU);
  const Tensor ref = ops::Cast(x.Slice(0, 1, 3), DType::kBF16);
  const Tensor poison = Tensor::Empty({45}, DType::kBF16, DeviceType::kCPU);
  Poison(poison);
  CHECK(Bytes(got.Slice(0, 0, 1).Reshape({45})) == Bytes(poison));
  CHECK(Bytes(got.Slice(0, 1, 3)) == Bytes(ref));
  CHECK(Bytes(got.Slice(0, 3, 4).Reshape({45})) == Bytes(poison));
}
