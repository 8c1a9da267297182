// MSL matrices `matrix<T, Cols, Rows>` (MSL spec §2.3 "Matrix data types") and their
// names halfCxR / floatCxR (C, R in 2..4; e.g. half2x4 has 2 columns of half4). A
// matrix is an array of Cols column vectors `vec<T, Rows>`, column-major, with the
// column's size and alignment (float3x3 is 3 float3s, 48 bytes); `m[c]` is column c
// and `m[c][r]` the element in row r.
//
// Construction (§2.3.2): from one scalar (a diagonal matrix: the scalar on the
// diagonal, zeros elsewhere), from Cols column vectors, or from a matrix of the same
// shape and another element type (explicit, component by component). Operators
// (§2.3.1, as linear algebra): m + m, m - m, m * scalar, scalar * m, m * vector (a
// column vector of Rows components), vector * m (a row vector of Cols components) and
// m * m; products accumulate in the element type's arithmetic, k ascending.
#pragma once
#pragma GCC system_header
#include "vec_types.h"

namespace metal {

template <class T, int Cols, int Rows>
struct matrix {
  static_assert(Cols >= 2 && Cols <= 4 && Rows >= 2 && Rows <= 4, "MSL matrices are 2..4 x 2..4");
  using column_type = vec<T, Rows>;

  matrix() = default;
  explicit matrix(T diagonal) {
    for (int c = 0; c < Cols; ++c)
      for (int r = 0; r < Rows; ++r) columns_[c][r] = c == r ? diagonal : T(0);
  }
  template <class... C, std::enable_if_t<sizeof...(C) == Cols && (std::is_convertible_v<C, column_type> && ...),
                                         int> = 0>
  matrix(const C&... columns) : columns_{column_type(columns)...} {}
  template <class U>
  explicit matrix(const matrix<U, Cols, Rows>& other) {
    for (int c = 0; c < Cols; ++c) columns_[c] = column_type(other[c]);
  }

  column_type& operator[](int c) { return columns_[c]; }
  const column_type& operator[](int c) const { return columns_[c]; }

 private:
  column_type columns_[Cols];
};

template <class T, int C, int R>
matrix<T, C, R> operator+(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  matrix<T, C, R> m;
  for (int c = 0; c < C; ++c) m[c] = a[c] + b[c];
  return m;
}
template <class T, int C, int R>
matrix<T, C, R> operator-(const matrix<T, C, R>& a, const matrix<T, C, R>& b) {
  matrix<T, C, R> m;
  for (int c = 0; c < C; ++c) m[c] = a[c] - b[c];
  return m;
}
template <class T, int C, int R, class S, std::enable_if_t<detail::is_scalar_like_v<S>, int> = 0>
matrix<T, C, R> operator*(const matrix<T, C, R>& a, const S& s) {
  matrix<T, C, R> m;
  for (int c = 0; c < C; ++c) m[c] = a[c] * static_cast<T>(s);
  return m;
}
template <class T, int C, int R, class S, std::enable_if_t<detail::is_scalar_like_v<S>, int> = 0>
matrix<T, C, R> operator*(const S& s, const matrix<T, C, R>& a) {
  return a * s;
}
// (Rows x Cols) * (Cols): the linear combination of the columns.
template <class T, int C, int R>
vec<T, R> operator*(const matrix<T, C, R>& a, const vec<T, C>& v) {
  vec<T, R> out(T(0));
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) out[r] = out[r] + a[c][r] * v[c];
  return out;
}
// (Rows) * (Rows x Cols): the dot product with each column.
template <class T, int C, int R>
vec<T, C> operator*(const vec<T, R>& v, const matrix<T, C, R>& a) {
  vec<T, C> out(T(0));
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) out[c] = out[c] + v[r] * a[c][r];
  return out;
}
template <class T, int K, int R, int C>
matrix<T, C, R> operator*(const matrix<T, K, R>& a, const matrix<T, C, K>& b) {
  matrix<T, C, R> m;
  for (int c = 0; c < C; ++c) m[c] = a * b[c];
  return m;
}

// §6.13 "Matrix functions": transpose.
template <class T, int C, int R>
matrix<T, R, C> transpose(const matrix<T, C, R>& a) {
  matrix<T, R, C> m;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) m[r][c] = a[c][r];
  return m;
}

}  // namespace metal

#define METAL_MATRIX_NAME(T, C, R) \
  namespace metal {                \
  using T##C##x##R = matrix<T, C, R>; \
  }                                \
  using metal::T##C##x##R;
#define METAL_MATRIX_NAMES(T) \
  METAL_MATRIX_NAME(T, 2, 2)  \
  METAL_MATRIX_NAME(T, 2, 3)  \
  METAL_MATRIX_NAME(T, 2, 4)  \
  METAL_MATRIX_NAME(T, 3, 2)  \
  METAL_MATRIX_NAME(T, 3, 3)  \
  METAL_MATRIX_NAME(T, 3, 4)  \
  METAL_MATRIX_NAME(T, 4, 2)  \
  METAL_MATRIX_NAME(T, 4, 3)  \
  METAL_MATRIX_NAME(T, 4, 4)
METAL_MATRIX_NAMES(half)
METAL_MATRIX_NAMES(float)
#undef METAL_MATRIX_NAMES
#undef METAL_MATRIX_NAME
