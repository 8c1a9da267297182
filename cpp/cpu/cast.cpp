// CPU oracle of cast. Rules (the out-of-range cases ops.h leaves unspecified are
// fixed here so the oracle is deterministic):
// * same dtype: a byte copy (NaN payloads kept);
// * float -> float: through f32 (exact widening), then round to nearest even;
// * int -> float: correctly rounded to nearest even (no double rounding through f32),
//   overflow to +-Inf for f16;
// * float -> int: truncation toward zero, saturating at the type's range, NaN -> 0;
// * int -> int: two's-complement wraparound modulo 2^bits (numpy's astype).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/float_rows.h"
#include "metalrt/errors.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

constexpr int64_t kChunk = 1024;

int64_t LoadInt(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kI8: return static_cast<const int8_t*>(data)[i];
    case DType::kU8: return static_cast<const uint8_t*>(data)[i];
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kU32: return static_cast<const uint32_t*>(data)[i];
    case DType::kI64: return static_cast<const int64_t*>(data)[i];
    default: throw TypeError(std::string("[cast] not an integer dtype: ") + DTypeName(dtype));
  }
}

// Stores the low bits of v (wraparound).
void StoreInt(void* data, DType dtype, int64_t i, int64_t v) {
  const uint64_t bits = static_cast<uint64_t>(v);
  switch (dtype) {
    case DType::kI8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(bits); return;
    case DType::kU8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(bits); return;
    case DType::kI32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(bits); return;
    case DType::kU32: static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(bits); return;
    case DType::kI64: static_cast<int64_t*>(data)[i] = v; return;
    default: throw TypeError(std::string("[cast] not an integer dtype: ") + DTypeName(dtype));
  }
}

template <typename T>
int64_t SaturateTrunc(float f) {
  const double d = f;
  if (std::isnan(d)) return 0;
  // (double)max may round up (int64: 2^63), so >= also catches values just above max.
  if (d >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  if (d <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  return static_cast<int64_t>(d);   // truncates toward zero
}

int64_t FloatToInt(float f, DType dtype) {
  switch (dtype) {
    case DType::kI8: return SaturateTrunc<int8_t>(f);
    case DType::kU8: return SaturateTrunc<uint8_t>(f);
    case DType::kI32: return SaturateTrunc<int32_t>(f);
    case DType::kU32: return SaturateTrunc<uint32_t>(f);
    default: return SaturateTrunc<int64_t>(f);
  }
}

int SignificandBits(DType dtype) {
  return dtype == DType::kF32 ? 24 : dtype == DType::kF16 ? 11 : 8;
}

// v rounded to nearest even with `bits` significant bits, as an exact f32 value.
float RoundIntToFloat(int64_t v, int bits) {
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int length = 0;
  while (length < 64 && (mag >> length) != 0) ++length;
  int shift = std::max(0, length - bits);
  if (shift > 0) {
    const uint64_t rem = mag & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    mag >>= shift;
    if (rem > half || (rem == half && (mag & 1))) ++mag;
  }
  const float value = std::ldexp(static_cast<float>(mag), shift);   // exact: mag < 2^25
  return v < 0 ? -value : value;
}

bool CpuCast(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.outputs[0];
  const DType from = x.dtype();
  const DType to = out.dtype();
  if (from == to) {
    if (x.nbytes()) std::memcpy(out.data(), x.data(), x.nbytes());
    return true;
  }
  float v[kChunk];
  int64_t iv[kChunk];
  for (int64_t c = 0; c < x.numel(); c += kChunk) {
    const int64_t n = std::min(kChunk, x.numel() - c);
    if (IsFloating(from)) {
      LoadRowF32(x.data(), from, c, n, v);
    } else {
      for (int64_t i = 0; i < n; ++i) iv[i] = LoadInt(x.data(), from, c + i);
    }
    if (IsFloating(to)) {
      if (!IsFloating(from))
        for (int64_t i = 0; i < n; ++i) v[i] = RoundIntToFloat(iv[i], SignificandBits(to));
      StoreRowF32(out.data(), to, c, n, v);
    } else {
      for (int64_t i = 0; i < n; ++i)
        StoreInt(out.data(), to, c + i, IsFloating(from) ? FloatToInt(v[i], to) : iv[i]);
    }
  }
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("cast", DeviceType::kCPU, ProviderTier::kOracle, CpuCast);

}  // namespace metalrt::cpu
