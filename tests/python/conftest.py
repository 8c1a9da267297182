"""Shared helpers of the pytest gates (the Metal gates reuse them).

Import them with `from conftest import ...` (pytest puts this folder on sys.path).
"""
import numpy as np
import pytest

import build_fixtures
import metalrt

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
# Every device this build has; gates parametrised over it run on Metal as soon as a
# Metal backend exists (the simulated one on Linux).
DEVICES = tuple(d for d in ("cpu", "metal") if metalrt.is_available(d))

# Poison for integer outputs: a value no op here produces.
INT_POISON = {"int8": -128, "uint8": 255, "int32": -(2**31), "int64": -(2**63),
              "uint32": 2**32 - 1}


def poisoned(shape, dtype="float32", device="cpu"):
    """An `out=` tensor filled with NaN (floats) or INT_POISON (ints), so an op that
    never writes its output cannot pass."""
    if dtype in FLOAT_DTYPES:
        values = np.full(shape, np.nan, dtype=np.float32)
    else:
        values = np.full(shape, INT_POISON[dtype], dtype=dtype)
    return metalrt.asarray(values, device=device, dtype=dtype)


def nmse(actual, reference) -> float:
    """Normalised mean squared error sum((a - r)^2) / sum(r^2), in float64."""
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    assert a.shape == r.shape, f"shape {a.shape} != reference {r.shape}"
    assert np.all(np.isfinite(a)), "output has NaN/Inf (poison left unwritten?)"
    return float(np.sum((a - r) ** 2) / max(np.sum(r ** 2), np.finfo(np.float64).tiny))


# Bars of float outputs against a float64 reference computed from the same (on-grid)
# inputs: NMSE, and the worst element relative to the reference's largest magnitude.
# float32 computes and stores in f32; float16/bfloat16 add the output's rounding
# (half an ulp: 2**-11, 2**-9) and any rounded intermediate.
NMSE_BAR = {"float32": 1e-10, "float16": 1e-5, "bfloat16": 1e-4}
WORST_BAR = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def summation_bar(terms: int) -> float:
    """Relative error bound of a float32 recursive sum of `terms` terms, n * 2**-24
    (Higham, "Accuracy and Stability of Numerical Algorithms", 2002, §4.2)."""
    return terms * 2.0 ** -24


def assert_matches(actual, reference, dtype, worst_bar=None):
    """`actual` (Tensor or array) is within NMSE_BAR and WORST_BAR of `reference`.
    worst_bar, when larger than the dtype's, replaces it (and its square the NMSE bar),
    e.g. summation_bar(n) for a float32 reduction over n terms."""
    worst_bar = max(WORST_BAR[dtype], worst_bar or 0.0)
    nmse_bar = max(NMSE_BAR[dtype], worst_bar ** 2)
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    error = nmse(a, r)
    assert error <= nmse_bar, f"NMSE {error:.3g} > {nmse_bar:g} ({dtype})"
    worst = float(np.max(np.abs(a - r), initial=0.0))
    bound = worst_bar * float(np.max(np.abs(r), initial=0.0))
    assert worst <= bound, f"worst error {worst:.3g} > {bound:.3g} ({dtype})"


def assert_rows_view_written(call, base, expected_rows, device, worst_bar=None):
    """Runs call(out) with out = rows [1, 3) of a 4-row float32 tensor holding `base`
    on `device`; rows 0 and 3 must keep their bytes (the view's offset was applied)
    and rows 1, 2 must match expected_rows."""
    target = metalrt.asarray(base, device=device)
    call(target[1:3])
    got = target.numpy()
    np.testing.assert_array_equal(got[[0, 3]], np.asarray(base, np.float32)[[0, 3]])
    assert_matches(got[1:3], expected_rows, "float32", worst_bar)


def bfloat16_bits(values) -> np.ndarray:
    """bfloat16 bit patterns of float32 `values`, round-to-nearest-even (finite inputs),
    written independently of the library: add half an ulp minus one plus the kept lsb."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def on_grid(values, dtype) -> np.ndarray:
    """`values` rounded to `dtype`'s grid, as float64: the exact inputs an op sees."""
    x = np.asarray(values, dtype=np.float32)
    if dtype == "float16":
        x = x.astype(np.float16)
    elif dtype == "bfloat16":
        x = (bfloat16_bits(x).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float64)


def rand(shape, seed, scale=1.0, dtype="float32"):
    """Normal random values on `dtype`'s grid (float64), reproducible per seed."""
    return on_grid(np.random.default_rng(seed).normal(0.0, scale, size=shape), dtype)


# Kernel-name suffix of each dtype (cpp/gpu/kernel_launch.h): "rms_norm_row_" + SUFFIX[dtype].
SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "uint8": "u8",
          "int32": "i32", "int64": "i64", "uint32": "u32"}

requires_metal = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")


def profiled(body):
    """Dispatch counts by kernel name (and the "total" row) recorded while `body` runs."""
    was = metalrt.profiler.enabled()
    metalrt.profiler.reset()
    metalrt.profiler.enable(True)
    try:
        body()
        metalrt.synchronize("metal")
        return {row["name"]: row["dispatches"] for row in metalrt.profiler.rows()}
    finally:
        metalrt.profiler.enable(was)
        metalrt.profiler.reset()


def assert_native(op, provider, calls):
    """The op's Metal calls since reset_stats() were all served by `provider` natively."""
    assert metalrt.providers.stats(op, "metal") == {
        "last_selected": provider, "calls": calls, "declines": 0, "reference_hits": 0}


def random_of(shape, dtype, seed):
    """Random values `dtype` holds: normal(0, 50) for the float dtypes, integers over the
    whole range otherwise (for the gates of bit-exact copies)."""
    rng = np.random.default_rng(seed)
    if dtype in FLOAT_DTYPES:
        return rng.normal(0.0, 50.0, size=shape)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def assert_same_bytes(metal_tensor, cpu_tensor):
    """The two tensors hold the same bytes (numpy() widens bfloat16 exactly, bit for bit)."""
    a, b = metal_tensor.numpy(), cpu_tensor.numpy()
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), f"{np.flatnonzero(a.view(np.uint8) != b.view(np.uint8))[:8]}"


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def pytest_collection_modifyitems(items):
    """Tests run in the order build_fixtures.py makes what they use (a stable sort:
    the order is kept within each rank), so that the tests on its later, slower
    fixtures come last while tests/run.sh builds them in the background. Rank 0, that
    of the first fixtures (made in seconds), is that of the tests that use none."""
    def rank(item):
        module = getattr(item, "module", None)
        used = vars(module).values() if module else ()
        return max((i for i, m in enumerate(build_fixtures.MODULES) if m in used), default=0)
    items.sort(key=rank)
