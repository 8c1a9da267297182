"""Which Metal kernel and provider ran, seen from Python: the profiler names the
multi-vector GEMV for m <= 8 (K % 8 == 0) and the simdgroup GEMM above it or for a K the
GEMV's vector loads cannot take, and the provider stats show the native
provider with no declines and no reference-tier hits. The numbers themselves are gated
per op (test_matmul.py, test_rms_norm.py run on every device) and in tests/cpp."""
import numpy as np
import pytest

import metalrt
from conftest import assert_matches, assert_native, poisoned, profiled, rand, requires_metal
from metalrt import ops

pytestmark = requires_metal


@pytest.mark.parametrize("m, k, kernel", [(1, 336, "matmul_bt_gemv_f32"), (8, 336, "matmul_bt_gemv_f32"),
                                          (9, 336, "matmul_bt_gemm_f32"), (37, 336, "matmul_bt_gemm_f32"),
                                          (1, 333, "matmul_bt_gemm_f32")])
def test_matmul_bt_kernel_by_m(m, k, kernel):
    a, w = rand((m, k), seed=m), rand((201, k), seed=100 + m)
    out = poisoned((m, 201), device="metal")
    metalrt.providers.reset_stats()
    rows = profiled(lambda: ops.matmul_bt(metalrt.asarray(a, device="metal"),
                                          metalrt.asarray(w, device="metal"), out=out))
    assert rows.get(kernel) == 1
    assert sum(n for name, n in rows.items() if name.startswith("matmul_bt_")) == 1
    assert_native("matmul_bt", "metal_matmul_bt", 1)
    assert_matches(out, a @ w.T, "float32")


@pytest.mark.parametrize("dtype, suffix", [("float32", "f32"), ("float16", "f16"),
                                           ("bfloat16", "bf16")])
def test_rms_norm_kernel(dtype, suffix):
    x, weight = rand((3, 4099), seed=5, dtype=dtype), rand((4099,), seed=6, dtype=dtype)
    out = poisoned((3, 4099), dtype, "metal")
    metalrt.providers.reset_stats()
    rows = profiled(lambda: ops.rms_norm(metalrt.asarray(x, device="metal", dtype=dtype),
                                         metalrt.asarray(weight, device="metal", dtype=dtype),
                                         eps=1e-6, out=out))
    assert rows.get(f"rms_norm_row_{suffix}") == 1
    assert_native("rms_norm", "metal_rms_norm", 1)
    reference = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * weight
    assert_matches(out, reference, dtype)
