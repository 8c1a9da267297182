"""metalrt.compile_shader: user MSL kernels on the Metal device (the simulated one
without an Apple GPU), against numpy float64 references, and its errors."""
import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

# A simdgroup-matrix tiled matmul as a user would write it: each threadgroup of four
# SIMD-groups computes a 16x16 tile of C = A @ B, staging 16x8 / 8x16 tiles of A and B
# in threadgroup memory (zero-filled past the edges), one 8x8 block per SIMD-group.
MATMUL = r"""
#include <metal_stdlib>
using namespace metal;

constant uint TILE = 16;
constant uint KSTEP = 8;

kernel void tiled_matmul(device const float* A [[buffer(0)]],
                         device const float* B [[buffer(1)]],
                         device float* C [[buffer(2)]],
                         constant uint& M [[buffer(3)]],
                         constant uint& N [[buffer(4)]],
                         constant uint& K [[buffer(5)]],
                         uint2 tile [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float As[TILE * KSTEP];
  threadgroup float Bs[KSTEP * TILE];
  threadgroup float Cs[TILE * TILE];
  const uint row0 = tile.y * TILE, col0 = tile.x * TILE;
  const uint sub_r = (sg / 2) * 8, sub_c = (sg % 2) * 8;
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k0 = 0; k0 < K; k0 += KSTEP) {
    for (uint i = tid; i < TILE * KSTEP; i += 128) {
      const uint r = i / KSTEP, k = i % KSTEP;
      As[i] = (row0 + r < M && k0 + k < K) ? A[(row0 + r) * K + k0 + k] : 0.0f;
      const uint kb = i / TILE, c = i % TILE;
      Bs[i] = (k0 + kb < K && col0 + c < N) ? B[(k0 + kb) * N + col0 + c] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 a, b;
    simdgroup_load(a, As, KSTEP, ulong2(0, sub_r));
    simdgroup_load(b, Bs, TILE, ulong2(sub_c, 0));
    simdgroup_multiply_accumulate(acc, a, b, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  simdgroup_store(acc, Cs, TILE, ulong2(sub_c, sub_r));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = tid; i < TILE * TILE; i += 128) {
    const uint r = row0 + i / TILE, c = col0 + i % TILE;
    if (r < M && c < N) C[r * N + c] = Cs[i];
  }
}
"""

AXPY = r"""
#include <metal_stdlib>
using namespace metal;
constant bool add_one [[function_constant(0)]];

kernel void axpy(device const float* x [[buffer(0)]],
                 device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]],
                 constant uint& n [[buffer(3)]],
                 uint i [[thread_position_in_grid]]) {
  if (i >= n) return;
  y[i] = a * x[i] + y[i] + (add_one ? 1.0f : 0.0f);
}

template <typename T>
kernel void halve(device T* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  x[i] = x[i] / T(2);
}
template [[host_name("halve_f16")]] kernel decltype(halve<half>) halve<half>;
"""


def metal(a):
    return metalrt.asarray(np.ascontiguousarray(a), device="metal")


@pytest.mark.parametrize("m, n, k", [(33, 17, 40), (1, 8, 8), (16, 16, 16), (31, 33, 7)])
def test_user_simdgroup_matrix_matmul_matches_numpy(m, n, k):
    lib = metalrt.compile_shader(MATMUL)
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = metal(np.full((m, n), np.nan, np.float32))
    lib.tiled_matmul(metal(a), metal(b), c, np.uint32(m), np.uint32(n), np.uint32(k),
                     threadgroups=((n + 15) // 16, (m + 15) // 16), group_size=128)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 1e-6 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-7
    got = c.numpy()
    assert not np.isnan(got).any()
    assert (np.abs(got - want) <= bound).all()


def test_scalars_constants_partial_groups_and_views():
    lib = metalrt.compile_shader(AXPY)
    assert set(lib.function_names) == {"axpy", "halve_f16"}
    x = np.linspace(-3, 5, 100, dtype=np.float32)
    y0 = np.arange(100, dtype=np.float32)
    for add_one in (False, True):
        y = metal(y0)
        lib.axpy(metal(x), y, np.float32(0.5), np.uint32(70), threads=100, group_size=32,
                 constants={0: add_one})
        want = y0.astype(np.float64).copy()
        want[:70] += 0.5 * x[:70].astype(np.float64) + add_one
        assert np.array_equal(y.numpy(), want.astype(np.float32))
    # A view binds at its byte offset: rows 1..2 of a 4x8 tensor.
    base = metal(np.arange(32, dtype=np.float16).reshape(4, 8))
    lib["halve_f16"](base[1:3], threads=16, group_size=16)
    want = np.arange(32, dtype=np.float16).reshape(4, 8)
    want[1:3] /= np.float16(2)
    assert np.array_equal(base.numpy(), want)


def test_compile_errors_carry_the_compiler_message_and_line():
    with pytest.raises(RuntimeError, match=r"shader\.metal:4:.*undeclared|shader\.metal:4:.*not declared"):
        metalrt.compile_shader("#include <metal_stdlib>\nusing namespace metal;\n"
                               "kernel void f(device float* x [[buffer(0)]]) {\n  x[0] = nope;\n}\n")
    with pytest.raises(RuntimeError, match=r"shader\.metal:1: error: kernel 'g': parameter 'x' has no"):
        metalrt.compile_shader("kernel void g(device float* x) {}")
    with pytest.raises(TypeError, match=r"\[compile_shader\] source must be a str"):
        metalrt.compile_shader(b"kernel")


def test_bad_arguments_raise():
    lib = metalrt.compile_shader(AXPY)
    x, y = metal(np.zeros(8, np.float32)), metal(np.zeros(8, np.float32))
    ok = dict(threads=8, group_size=8, constants={0: False})
    # axpy uses add_one without testing it with is_function_constant_defined, so Metal
    # cannot make its pipeline without a value.
    with pytest.raises(ValueError, match=r"kernel 'axpy' \(.*shader\.metal:6\) uses function "
                                         r"constant 0 \('add_one'\) but no value was given"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, group_size=8)
    with pytest.raises(TypeError, match=r"\[axpy\] argument 2 must be a metalrt.Tensor or a numpy scalar"):
        lib.axpy(x, y, 0.5, np.uint32(8), **ok)
    with pytest.raises(TypeError, match=r"\[axpy\] argument 0"):
        lib.axpy(np.zeros(8, np.float32), y, np.float32(1), np.uint32(8), **ok)
    with pytest.raises(ValueError, match=r"\[axpy\] output at buffer 0 must be on the metal device"):
        lib.axpy(metalrt.asarray(np.zeros(8, np.float32)), y, np.float32(1), np.uint32(8), **ok)
    with pytest.raises(ValueError, match=r"kernel 'axpy': \[\[buffer\(3\)\]\] is used by the kernel but not bound"):
        lib.axpy(x, y, np.float32(1), **ok)
    with pytest.raises(ValueError, match=r"exactly one of threads= and threadgroups="):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, threadgroups=1, group_size=8)
    with pytest.raises(ValueError, match=r"group_size= \(threads per threadgroup\) is required"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8)
    with pytest.raises(ValueError, match=r"1025 threads per threadgroup"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, group_size=1025, constants={0: False})
    with pytest.raises(TypeError, match=r"function constant 0 must be a bool"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, group_size=8, constants={0: "yes"})
    with pytest.raises(AttributeError, match=r"no kernel named 'nope'"):
        lib.nope

