// MSL semantics suite: SIMD-group matrices (MSL spec §2.4, §6.7). One SIMD-group
// (a threadgroup of 32 threads) computes one 8x8 tile of C = A * B:
//   A: M x K, row-major with row stride lda (>= K);
//   B: K x N, row-major with stride ldb, or (b_transposed) stored as B^T (N x K,
//      stride ldb), loaded with transpose_matrix = true;
//   C: M x N with stride ldc, or (c_transposed) stored as C^T (N x M, stride ldc).
// Tiles are addressed through matrix_origin = (column, row), so every load and
// store uses a non-zero origin; M, N, K are multiples of 8.
#include <metal_stdlib>
using namespace metal;

struct MatmulShape {
  uint m, n, k;
  uint lda, ldb, ldc;
  uint b_transposed, c_transposed;
};

template <typename T>
kernel void sg_matmul(device const T* a [[buffer(0)]],
                      device const T* b [[buffer(1)]],
                      device T* c [[buffer(2)]],
                      constant MatmulShape& s [[buffer(3)]],
                      uint2 tile [[threadgroup_position_in_grid]]) {
  const ulong row0 = tile.y * 8, col0 = tile.x * 8;
  simdgroup_matrix<T, 8, 8> acc = make_filled_simdgroup_matrix<T, 8, 8>(T(0));
  for (ulong k = 0; k < s.k; k += 8) {
    simdgroup_matrix<T, 8, 8> ma, mb;
    simdgroup_load(ma, a, s.lda, ulong2(k, row0));
    if (s.b_transposed) {
      simdgroup_load(mb, b, s.ldb, ulong2(col0, k), true);
    } else {
      simdgroup_load(mb, b, s.ldb, ulong2(col0, k));
    }
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
  }
  simdgroup_store(acc, c, s.ldc, ulong2(col0, row0), s.c_transposed != 0);
}

template [[host_name("sg_matmul_float")]] kernel void sg_matmul<float>(
    device const float*, device const float*, device float*, constant MatmulShape&, uint2);
template [[host_name("sg_matmul_half")]] kernel void sg_matmul<half>(
    device const half*, device const half*, device half*, constant MatmulShape&, uint2);
template [[host_name("sg_matmul_bfloat")]] kernel void sg_matmul<bfloat>(
    device const bfloat*, device const bfloat*, device bfloat*, constant MatmulShape&, uint2);

// The lane layout of thread_elements() (see metal/shim/simdgroup_matrix.h), and the diagonal constructor:
// each lane writes its two elements of diag(2) * B and its lane id at their
// positions in an 8x8 grid.
kernel void sg_layout(device const float* b [[buffer(0)]],
                      device float* product [[buffer(1)]],
                      device float* owner [[buffer(2)]],
                      ushort lane [[thread_index_in_simdgroup]]) {
  simdgroup_float8x8 mb, md;
  simdgroup_load(mb, b, 8);
  const simdgroup_float8x8 twice = simdgroup_float8x8(2.0f);
  simdgroup_multiply(md, twice, mb);
  simdgroup_store(md, product, 8);
  simdgroup_float8x8 ids;
  ids.thread_elements()[0] = float(lane);
  ids.thread_elements()[1] = float(lane) + 0.5f;
  simdgroup_store(ids, owner, 8);
}
