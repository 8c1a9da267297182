// SIMD-group matrices (MSL spec §2.4 "SIMD-group matrix data types", §6.7
// "SIMD-group matrix functions"): an 8x8 matrix spread over the 32 lanes of a
// SIMD-group, two elements a lane. Lane l (bits l0..l4) holds row 4*l4 + 2*l2 + l1,
// columns 4*l3 + 2*l0 and the next one (Apple GPUs' layout); thread_elements() gives those
// two. Load and store touch only the caller's own elements; multiply gathers the
// operands' elements from all lanes (one SIMD-group exchange), computes in float
// with a fixed k = 0..7 order and rounds each result once to the element type.
//
// Addressing (§6.7): element (row r, column c) of the matrix lives at
// src[(origin.y + r) * elements_per_row + origin.x + c]; with transpose_matrix the
// memory holds the transpose, so it lives at src[(origin.x + c) * elements_per_row
// + origin.y + r]. `matrix_origin` is (column, row) of the matrix's top-left
// element in those matrix coordinates (the convention Metal FlashAttention's
// explicit-offset loads follow too).
#pragma once
#pragma GCC system_header
#include "simd.h"

namespace metal {
namespace detail {

struct matrix_slot {
  int row;
  int col;   // the first of the lane's two adjacent columns
};
inline matrix_slot lane_slot(uint32_t l) {
  return {static_cast<int>(4 * ((l >> 4) & 1) + 2 * ((l >> 2) & 1) + ((l >> 1) & 1)),
          static_cast<int>(4 * ((l >> 3) & 1) + 2 * (l & 1))};
}
inline size_t matrix_offset(int row, int col, size_t elements_per_row, vec<ulong, 2> origin,
                            bool transpose) {
  return transpose ? (origin.x + col) * elements_per_row + origin.y + row
                   : (origin.y + row) * elements_per_row + origin.x + col;
}

}  // namespace detail

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "MSL SIMD-group matrices are 8x8");

  simdgroup_matrix() = default;
  // A diagonal matrix with `diagonal` on its diagonal and zeros elsewhere (§6.7).
  explicit simdgroup_matrix(T diagonal) {
    const detail::matrix_slot s = detail::lane_slot(metalrt::sim::hooks().lane());
    for (int j = 0; j < 2; ++j) e_[j] = (s.row == s.col + j) ? diagonal : T(0);
  }
  vec<T, 2>& thread_elements() { return e_; }
  const vec<T, 2>& thread_elements() const { return e_; }

 private:
  vec<T, 2> e_;
};

using simdgroup_float8x8 = simdgroup_matrix<float, 8, 8>;
using simdgroup_half8x8 = simdgroup_matrix<half, 8, 8>;
using simdgroup_bfloat8x8 = simdgroup_matrix<bfloat, 8, 8>;

// Rows defaults to Cols, as in MSL §6.7 (`make_filled_simdgroup_matrix<float, 8>(0.f)`).
template <class T, int Cols, int Rows = Cols>
simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.thread_elements() = vec<T, 2>(value);
  return m;
}

template <class T, int Cols, int Rows>
void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const detail::type_identity_t<T>* src,
                    ulong elements_per_row = Cols, vec<ulong, 2> matrix_origin = 0,
                    bool transpose_matrix = false) {
  const detail::matrix_slot s = detail::lane_slot(metalrt::sim::hooks().lane());
  for (int j = 0; j < 2; ++j)
    d.thread_elements()[j] =
        src[detail::matrix_offset(s.row, s.col + j, elements_per_row, matrix_origin, transpose_matrix)];
}

template <class T, int Cols, int Rows>
void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, detail::type_identity_t<T>* dst,
                     ulong elements_per_row = Cols, vec<ulong, 2> matrix_origin = 0,
                     bool transpose_matrix = false) {
  const detail::matrix_slot s = detail::lane_slot(metalrt::sim::hooks().lane());
  for (int j = 0; j < 2; ++j)
    dst[detail::matrix_offset(s.row, s.col + j, elements_per_row, matrix_origin, transpose_matrix)] =
        a.thread_elements()[j];
}

// d = a * b + c.
template <class TD, class TA, class TB, class TC>
void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                   const simdgroup_matrix<TB, 8, 8>& b,
                                   const simdgroup_matrix<TC, 8, 8>& c) {
  struct operands {
    vec<TA, 2> a;
    vec<TB, 2> b;
    vec<TC, 2> c;
  };
  const detail::simd_lanes<operands> all =
      detail::simd_gather(operands{a.thread_elements(), b.thread_elements(), c.thread_elements()});
  float A[8][8], B[8][8], C[8][8];
  for (uint32_t l = 0; l < detail::kSimdWidth; ++l) {
    const detail::matrix_slot s = detail::lane_slot(l);
    for (int j = 0; j < 2; ++j) {
      A[s.row][s.col + j] = static_cast<float>(all.value[l].a[j]);
      B[s.row][s.col + j] = static_cast<float>(all.value[l].b[j]);
      C[s.row][s.col + j] = static_cast<float>(all.value[l].c[j]);
    }
  }
  const detail::matrix_slot s = detail::lane_slot(all.lane);
  for (int j = 0; j < 2; ++j) {
    float acc = 0.0f;
    for (int k = 0; k < 8; ++k) acc += A[s.row][k] * B[k][s.col + j];
    d.thread_elements()[j] = static_cast<TD>(acc + C[s.row][s.col + j]);
  }
}

// d = a * b.
template <class TD, class TA, class TB>
void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                        const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}

}  // namespace metal
