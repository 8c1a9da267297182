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
    with pytest.raises(RuntimeError, match=r"shader\.metal:1: error: kernel 'g': parameter 'q' is neither"):
        metalrt.compile_shader("kernel void g(device float* x, uint q) {}")
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
    with pytest.raises(TypeError, match=r"\[axpy\] argument 2 \(constant float&\) must be a metalrt.Tensor, "
                                        r"a numpy scalar or array, bytes or a Python bool/int/float, got str"):
        lib.axpy(x, y, "0.5", np.uint32(8), **ok)
    with pytest.raises(TypeError, match=r"\[axpy\] argument 0"):
        lib.axpy(np.zeros(8, np.float32), y, np.float32(1), np.uint32(8), **ok)
    # x is read by axpy: the message must not call it an output.
    with pytest.raises(ValueError, match=r"\[axpy\] argument at buffer 0 must be on the metal device"):
        lib.axpy(metalrt.asarray(np.zeros(8, np.float32)), y, np.float32(1), np.uint32(8), **ok)
    with pytest.raises(ValueError, match=r"kernel 'axpy': \[\[buffer\(3\)\]\] is used by the kernel but not bound"):
        lib.axpy(x, y, np.float32(1), **ok)
    with pytest.raises(ValueError, match=r"exactly one of threads= and threadgroups="):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, threadgroups=1, group_size=8)
    with pytest.raises(ValueError, match=r"group_size= \(threads per threadgroup\) is required"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8)
    with pytest.raises(ValueError, match=r"\[axpy\] threads per threadgroup \(1025, 1, 1\) = 1025 exceed the pipeline's "
                                         r"maxTotalThreadsPerThreadgroup of 1024"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, group_size=1025, constants={0: False})
    with pytest.raises(TypeError, match=r"\[axpy\] function constant 0 \(bool\) must be a Python bool"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, group_size=8, constants={0: "yes"})
    with pytest.raises(AttributeError, match=r"no kernel named 'nope'"):
        lib.nope
    with pytest.raises(TypeError, match=r"\[axpy\] constants must be a dict \{index: value\}, got list"):
        lib.axpy(x, y, np.float32(1), np.uint32(8), threads=8, group_size=8, constants=[False])
    # A kernel indexes its buffers densely, so a stepped view would be read and written
    # as if it were its first elements.
    base = metal(np.zeros(16, np.float32))
    for args in [(base[::2], y), (x, base[::2])]:
        with pytest.raises(ValueError, match=r"\[axpy\] argument \d must be contiguous, got a strided view"):
            lib.axpy(*args, np.float32(1), np.uint32(8), **ok)



# One function constant of each settable type, written out so the test can read them.
CONSTANTS = r"""
#include <metal_stdlib>
using namespace metal;
constant bool flag [[function_constant(0)]];
constant uint count [[function_constant(1)]];
constant half h [[function_constant(2)]];
constant float f [[function_constant(3)]];
constant short s [[function_constant(4)]];
constant ushort us [[function_constant(5)]];
constant int32_t i [[function_constant(6)]];

kernel void show(device uint* u [[buffer(0)]], device float* x [[buffer(1)]],
                 device int* n [[buffer(2)]], uint t [[thread_position_in_grid]]) {
  if (t != 0) return;
  u[0] = flag ? 1u : 0u;
  u[1] = count;
  u[2] = us;
  x[0] = float(h);
  x[1] = f;
  n[0] = s;
  n[1] = i;
}
"""

# Python values that fit each declared type, and what the kernel must see (numpy's
# conversion to the declared type: float -> half/float rounds to nearest).
GOOD = {0: True, 1: 2**32 - 1, 2: 0.1, 3: 1 / 3, 4: -2**15, 5: 65535, 6: -2**31}


def run_show(lib, constants):
    u = metal(np.full(3, 7, np.uint32))
    x = metal(np.full(2, np.nan, np.float32))
    n = metal(np.full(2, 7, np.int32))
    lib.show(u, x, n, threads=1, group_size=1, constants=constants)
    return u.numpy().tolist(), x.numpy(), n.numpy().tolist()


def test_python_constants_take_the_declared_types():
    lib = metalrt.compile_shader(CONSTANTS)
    u, x, n = run_show(lib, GOOD)
    assert u == [1, 2**32 - 1, 65535] and n == [-2**15, -2**31]
    assert x[0] == np.float16(0.1) and x[1] == np.float32(1 / 3)
    # An int for a float constant converts; numpy scalars of the declared type pass as before.
    u, x, n = run_show(lib, {**GOOD, 0: np.bool_(False), 1: np.uint32(9), 2: 3, 3: -2, 4: np.int16(5)})
    assert u == [0, 9, 65535] and x.tolist() == [3.0, -2.0] and n == [5, -2**31]
    u, x, n = run_show(lib, {**GOOD, 2: 65504.0, 3: float("inf")})
    assert x[0] == 65504.0 and x[1] == np.inf


@pytest.mark.parametrize("index, value, error, message", [
    (1, -1, ValueError, r"function constant 1 \(uint\): -1 does not fit in uint32 \[0, 4294967295\]"),
    (1, 2**32, ValueError, r"function constant 1 \(uint\): 4294967296 does not fit in uint32"),
    (4, 2**15, ValueError, r"function constant 4 \(short\): 32768 does not fit in int16"),
    (5, -1, ValueError, r"function constant 5 \(ushort\): -1 does not fit in uint16"),
    (6, 2**31, ValueError, r"function constant 6 \(int32_t\): 2147483648 does not fit in int32"),
    (2, 65520.0, ValueError, r"function constant 2 \(half\): 65520.0 does not fit in float16"),
    (3, 1e39, ValueError, r"function constant 3 \(float\): 1e\+39 does not fit in float32"),
    (3, 10**400, ValueError, r"function constant 3 \(float\): 1000.* does not fit in float32"),
    (1, 2.0, TypeError, r"function constant 1 \(uint\) takes uint32 values, got float 2.0"),
    (6, True, TypeError, r"function constant 6 \(int32_t\) takes int32 values, got bool"),
    (0, 1, TypeError, r"function constant 0 \(bool\) takes bool values, got int"),
    (1, np.int32(5), TypeError, r"function constant 1 \(uint\) takes uint32 values, got a numpy int32"),
    (2, np.float32(1), TypeError, r"function constant 2 \(half\) takes float16 values"),
])
def test_python_constants_out_of_range_or_of_another_kind_raise(index, value, error, message):
    lib = metalrt.compile_shader(CONSTANTS)
    with pytest.raises(error, match=r"^\[show\] " + message):
        run_show(lib, {**GOOD, index: value})


def test_declared_constant_types_are_read_from_the_source():
    from metalrt._sim.msl_to_cpp import function_constant_types
    assert function_constant_types(CONSTANTS) == {0: "bool", 1: "uint", 2: "half", 3: "float",
                                                  4: "short", 5: "ushort", 6: "int32_t"}
    assert function_constant_types(AXPY) == {0: "bool"}
    assert function_constant_types(MATMUL) == {}


def test_undeclared_constants_default_to_bool_int32_float32():
    """Where the source declares no type for an index, Python values map to bool, int32
    and float32 (range-checked); the pipeline then reports the missing constant."""
    from metalrt.shader.library import _constant
    assert _constant("k", 3, True, {}) == (3, 0, np.bool_(True).tobytes())
    assert _constant("k", 3, -5, {}) == (3, 3, np.int32(-5).tobytes())
    assert _constant("k", 3, 0.1, {}) == (3, 5, np.float32(0.1).tobytes())
    with pytest.raises(ValueError, match=r"^\[k\] function constant 3: 2147483648 does not fit in int32"):
        _constant("k", 3, 2**31, {})
    lib = metalrt.compile_shader(AXPY)
    x = metal(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match=r"kernel 'axpy' has no function constant 9"):
        lib.axpy(x, x, np.float32(1), np.uint32(8), threads=8, group_size=8,
                 constants={0: True, 9: 5})


REVERSE = r"""
#include <metal_stdlib>
using namespace metal;
kernel void reverse_in_group(device const float* x, device float* y,
                             threadgroup float* stage [[threadgroup(0)]],
                             uint i [[thread_position_in_grid]],
                             uint t [[thread_index_in_threadgroup]],
                             uint n [[threads_per_threadgroup]]) {
  stage[t] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = stage[n - 1 - t];
}
"""


def test_threadgroup_memory_sizes_threadgroup_parameters():
    lib = metalrt.compile_shader(REVERSE)
    x = np.arange(64, dtype=np.float32)
    y = metalrt.asarray(np.full(64, np.nan, np.float32), device="metal")
    lib.reverse_in_group(metal(x), y, threads=64, group_size=32, threadgroup_memory={0: 32 * 4})
    np.testing.assert_array_equal(y.numpy(), np.concatenate([x[31::-1], x[:31:-1]]))
    # Lengths are rounded up to 16 bytes, as setThreadgroupMemoryLength:atIndex: requires.
    y = metalrt.asarray(np.full(64, np.nan, np.float32), device="metal")
    lib.reverse_in_group(metal(x), y, threads=64, group_size=32, threadgroup_memory={0: 32 * 4 - 8})
    np.testing.assert_array_equal(y.numpy(), np.concatenate([x[31::-1], x[:31:-1]]))
    # A length too small for the group is an overrun the sim reports at the next host read.
    lib.reverse_in_group(metal(x), y, threads=64, group_size=32, threadgroup_memory={0: 24})
    with pytest.raises(RuntimeError, match=r"\[\[threadgroup\(0\)\]\] buffer was written past its end"):
        y.numpy()
    with pytest.raises(TypeError, match="threadgroup_memory must be a dict"):
        lib.reverse_in_group(metal(x), y, threads=64, group_size=32, threadgroup_memory=[128])


def test_cxx_is_a_command_line(monkeypatch):
    """$CXX is a command line (`ccache g++`), for the generator's preprocessor as for
    the kernel compile: `env c++` must work (one executable named 'env c++' did not)."""
    monkeypatch.setenv("CXX", "env c++")
    lib = metalrt.compile_shader(r"""
#include <metal_stdlib>
using namespace metal;
kernel void negate_for_cxx_gate(device const float* x [[buffer(0)]],
                                device float* y [[buffer(1)]],
                                uint i [[thread_position_in_grid]]) { y[i] = -x[i]; }
""")
    x = np.arange(8, dtype=np.float32)
    y = metalrt.asarray(np.full(8, np.nan, np.float32), device="metal")
    lib.negate_for_cxx_gate(metal(x), y, threads=8, group_size=8)
    np.testing.assert_array_equal(y.numpy(), -x)
