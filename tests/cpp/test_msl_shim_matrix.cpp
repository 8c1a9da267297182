// Gates of the MSL shim's matrix types (metal/shim/matrix.h, MSL spec §2.3) against
// references computed here in double: layout, the three constructors, column and
// element access, conversion between element types, the linear-algebra products
// and transpose. And make_filled_simdgroup_matrix<T, Cols> with Rows defaulted
// (§6.7), as ggml's mul_mm calls it.
#include <doctest/doctest.h>

#include <cstring>
#include <type_traits>

#include "matrix.h"
#include "msl_shim_mock.h"
#include "simdgroup_matrix.h"

using namespace metal;

static_assert(sizeof(float4x4) == 64 && alignof(float4x4) == 16, "float4x4: 4 float4 columns");
static_assert(sizeof(float3x3) == 48 && alignof(float3x3) == 16, "float3x3: 3 float3s of 16 bytes");
static_assert(sizeof(half2x4) == 16 && alignof(half2x4) == 8, "half2x4: 2 half4 columns");
static_assert(sizeof(float4x2) == 32 && alignof(float4x2) == 8, "float4x2: 4 float2 columns");
static_assert(std::is_same_v<decltype(std::declval<float2x4>()[1]), float4&>, "m[c] is column c");
static_assert(!std::is_convertible_v<half4x4, float4x4>, "§2.3.2: conversion is explicit");
static_assert(!std::is_convertible_v<float, float4x4>, "a diagonal matrix is built explicitly");

namespace {

// Element (column c, row r) of a test matrix; distinct, exact in half.
float Element(int c, int r) { return float(c * 4 + r) * 0.25f - 1.5f; }

template <class M, int C, int R>
M Numbered() {
  M m;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) m[c][r] = Element(c, r);
  return m;
}

}  // namespace

TEST_CASE("matrix: column-major storage, columns, elements and the diagonal constructor") {
  const float2x4 m = Numbered<float2x4, 2, 4>();
  float flat[8];
  std::memcpy(flat, &m, sizeof flat);
  for (int i = 0; i < 8; ++i) CHECK(flat[i] == Element(i / 4, i % 4));   // column after column
  CHECK(m[1].z == Element(1, 2));

  const float3x3 d(2.5f);
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < 3; ++r) CHECK(d[c][r] == (c == r ? 2.5f : 0.0f));

  const float2x3 cols(float3(1, 2, 3), float3(4, 5, 6));
  CHECK(cols[0][2] == 3.0f);
  CHECK(cols[1][0] == 4.0f);

  float4x4 w = float4x4(0.0f);
  w[2] = float4(7.0f);      // MSL §2.3.1: m[1] = float4(2.0f) sets a column
  w[0][3] = -1.0f;          // m[c][r]: column c, row r
  CHECK(w[2][0] == 7.0f);
  CHECK(w[2][3] == 7.0f);
  CHECK(w[0][3] == -1.0f);
  CHECK(w[3][0] == 0.0f);
}

TEST_CASE("matrix: explicit conversion between element types rounds each element once") {
  float4x4 f = Numbered<float4x4, 4, 4>();
  f[3][3] = 1.0f + 1.0f / 4096.0f;   // not a half: rounds to nearest even (1.0)
  f[1][0] = 70000.0f;                // past half's range: Inf
  const half4x4 h = half4x4(f);
  const float4x4 back = (float4x4)(h);   // ggml's `(type4x4)(*src)`
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 4; ++r) CHECK(back[c][r] == float(half(f[c][r])));
  CHECK(back[3][3] == 1.0f);
  CHECK(back[1][0] == INFINITY);
  const matrix<bfloat, 4, 4> b(f);   // ggml's own `typedef matrix<bfloat, 4, 4> bfloat4x4`
  CHECK(float(b[0][1]) == float(bfloat(Element(0, 1))));
}

TEST_CASE("matrix: products, sums and transpose against double references") {
  const float3x2 a = Numbered<float3x2, 3, 2>();   // 2 rows, 3 columns
  const float2x3 b = Numbered<float2x3, 2, 3>();   // 3 rows, 2 columns
  const float3 v(0.5f, -2.0f, 3.0f);
  const float2 u(1.5f, -0.25f);

  const float2 av = a * v;   // (2x3)(3)
  for (int r = 0; r < 2; ++r) {
    double want = 0;
    for (int k = 0; k < 3; ++k) want += double(Element(k, r)) * v[k];
    CHECK(av[r] == float(want));
  }
  const float3 ua = u * a;   // (2)(2x3): a row vector
  for (int c = 0; c < 3; ++c) CHECK(ua[c] == float(double(u[0]) * Element(c, 0) + double(u[1]) * Element(c, 1)));

  const float2x2 ab = a * b;   // (2x3)(3x2) = 2x2
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 2; ++r) {
      double want = 0;
      for (int k = 0; k < 3; ++k) want += double(Element(k, r)) * Element(c, k);
      CHECK(ab[c][r] == float(want));
    }
  const float2x3 bt = transpose(a);
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < 2; ++r) CHECK(bt[r][c] == a[c][r]);

  const float3x2 sum = a + a * 2.0f - 0.5f * a;
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < 2; ++r) CHECK(sum[c][r] == Element(c, r) * 2.5f);
}

TEST_CASE("make_filled_simdgroup_matrix<T, Cols>: Rows defaults to Cols") {
  msl_shim_test::MockSimdGroup::Run(0xffffffffu, [](uint32_t) {
    const simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8>(1.25f);
    CHECK(m.thread_elements()[0] == 1.25f);
    CHECK(m.thread_elements()[1] == 1.25f);
  });
}
