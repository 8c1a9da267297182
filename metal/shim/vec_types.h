// The MSL vector type names (MSL spec §2.2 Table 2.3, §2.2.3 packed vectors):
// <scalar>2/3/4 and packed_<scalar>2/3/4 for bool, char, uchar, short, ushort, int,
// uint, long, ulong, half, bfloat and float. They are built-in names in MSL, so
// they are also visible without `using namespace metal`. (Their sizes and
// alignments are asserted in tests/cpp/test_msl_shim.cpp: asserting them here
// would instantiate all 72 types in every kernel module and slow every build.)
#pragma once
#pragma GCC system_header
#include "bfloat.h"
#include "half.h"
#include "scalar_types.h"
#include "vec_ops.h"

#define METAL_VECTOR_NAMES(T, name)                                         \
  namespace metal {                                                         \
  using name##2 = vec<T, 2>;                                                \
  using name##3 = vec<T, 3>;                                                \
  using name##4 = vec<T, 4>;                                                \
  using packed_##name##2 = packed_vec<T, 2>;                                \
  using packed_##name##3 = packed_vec<T, 3>;                                \
  using packed_##name##4 = packed_vec<T, 4>;                                \
  }                                                                         \
  using metal::name##2;                                                     \
  using metal::name##3;                                                     \
  using metal::name##4;                                                     \
  using metal::packed_##name##2;                                            \
  using metal::packed_##name##3;                                            \
  using metal::packed_##name##4;

METAL_VECTOR_NAMES(bool, bool)
METAL_VECTOR_NAMES(char, char)
METAL_VECTOR_NAMES(uchar, uchar)
METAL_VECTOR_NAMES(short, short)
METAL_VECTOR_NAMES(ushort, ushort)
METAL_VECTOR_NAMES(int, int)
METAL_VECTOR_NAMES(uint, uint)
METAL_VECTOR_NAMES(long, long)
METAL_VECTOR_NAMES(ulong, ulong)
METAL_VECTOR_NAMES(half, half)
METAL_VECTOR_NAMES(bfloat, bfloat)
METAL_VECTOR_NAMES(float, float)

#undef METAL_VECTOR_NAMES
