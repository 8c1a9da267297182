"""MSL that Apple's (clang-based) compiler accepts and C++ does not read the same way,
compiled and run on the simulated device (docs/simulated-device.md): a conditional
mixing half with float or int (MSL §2.12's usual arithmetic conversions), bfloat with
int, `static const constant` tables (a repeated const in C++), GNU array range
designators, and `#pragma unroll` whose argument names a macro. Each kernel's output
is NaN-poisoned and checked against numpy."""
import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

SOURCE = r"""
#include <metal_stdlib>
using namespace metal;
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define N 6
static const constant float TABLE[4] = {0.5f, 1.5f, 2.5f, 3.5f};

kernel void mixed(device const half* h, device const bfloat* b, device float* out,
                  uint i [[thread_position_in_grid]]) {
  float acc[N] = { [0 ... N - 1] = 2.0f };
  float part[N] = { [1 ... 3] = -1.0f };
#pragma unroll(MIN(N, 4))
  for (int k = 0; k < N; ++k) acc[k] += part[k];
  const float picked = i % 2 ? h[i] : h[i] / 16.f;     // half : float -> float
  const half scaled = i % 3 ? h[i] : 0;               // half : int -> half
  const bfloat kept = i % 2 ? b[i] : 0;               // bfloat : int -> bfloat
  out[4 * i + 0] = picked;
  out[4 * i + 1] = scaled;
  out[4 * i + 2] = float(kept) + TABLE[i % 4];
  out[4 * i + 3] = acc[i % N];
}
"""


def test_mixed_conditionals_const_constant_range_designators_and_unroll_pragmas():
    n = 10
    h = (np.arange(n, dtype=np.float32) * 1.25 - 3).astype(np.float16)
    b = np.arange(n, dtype=np.float32) * 0.5 + 1   # bfloat-exact values
    out = metalrt.asarray(np.full(4 * n, np.nan, np.float32), device="metal")
    lib = metalrt.compile_shader(SOURCE)
    lib.mixed(metalrt.asarray(h, device="metal"), metalrt.asarray(b, device="metal", dtype="bfloat16"),
              out, threads=n, group_size=n)
    got = out.numpy().reshape(n, 4)
    i = np.arange(n)
    hf = h.astype(np.float32)
    np.testing.assert_array_equal(got[:, 0], np.where(i % 2 == 1, hf, hf / np.float32(16)))
    np.testing.assert_array_equal(got[:, 1], np.where(i % 3 != 0, hf, 0))
    np.testing.assert_array_equal(got[:, 2], np.where(i % 2 == 1, b, 0) + np.array([0.5, 1.5, 2.5, 3.5])[i % 4])
    acc = np.array([2, 1, 1, 1, 2, 2], np.float32)
    np.testing.assert_array_equal(got[:, 3], acc[i % 6])


def test_a_range_designator_elsewhere_is_an_error_at_its_line():
    source = SOURCE.replace("float part[N] = { [1 ... 3] = -1.0f };",
                            "float part[N] = { 1.0f, [1 ... 3] = -1.0f };")
    with pytest.raises(RuntimeError, match=r"shader\.metal:11: error: a GNU range designator"):
        metalrt.compile_shader(source)
