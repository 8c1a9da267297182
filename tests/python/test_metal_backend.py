"""The Metal backend through Python: what the device reports, byte-exact host copies,
and provider honesty (an op without a native Metal kernel is served by the CPU
reference tier, and the stats say so). The doctest gates in tests/cpp cover the
rest (registry, batching, profiler)."""
import numpy as np
import pytest

import metalrt

HAVE_METAL = metalrt.is_available("metal")


def metal_or_error() -> bool:
    """True when this build has a Metal device; otherwise checks that asking for one
    raises RuntimeError (so the gate still asserts something) and returns False."""
    if HAVE_METAL:
        return True
    with pytest.raises(RuntimeError, match="metal"):
        metalrt.device_info("metal")
    return False


def test_metal_device_reports_itself():
    if not metal_or_error():
        return
    info = metalrt.device_info("metal")
    assert "simulated" in info["name"] or info["name"].startswith("Apple M")
    assert info["unified_memory"] is True
    assert info["capability"].startswith("apple")
    assert info["dtypes"][0] == "bfloat16"
    assert info["graph_capture"] is False


@pytest.mark.parametrize("nbytes", [0, 1, 31, 32, 33, 4099])
def test_host_copies_are_byte_exact(nbytes):
    if not metal_or_error():
        return
    data = np.random.default_rng(nbytes).integers(0, 256, size=nbytes, dtype=np.uint8)
    t = metalrt.asarray(data, device="metal")
    np.testing.assert_array_equal(t.numpy(), data)
    moved = t.to("metal").to("cpu").to("metal")   # device-to-device and back
    np.testing.assert_array_equal(moved.numpy(), data)
    if nbytes > 2:
        # An interior view reads exactly its bytes.
        np.testing.assert_array_equal(t[1:nbytes - 1].numpy(), data[1:nbytes - 1])


def test_an_op_without_a_native_kernel_is_served_by_the_reference_tier():
    if not metal_or_error():
        return
    weight = np.random.default_rng(7).normal(size=(50, 33)).astype(np.float32)
    ids = np.array([49, 0, 7, 7, 31], dtype=np.int32)
    metalrt.providers.reset_stats()
    out = metalrt.ops.embedding(metalrt.asarray(weight, device="metal"),
                                metalrt.asarray(ids, device="metal"))
    assert out.device == "metal"
    np.testing.assert_array_equal(out.numpy(), weight[ids])
    stats = metalrt.providers.stats("embedding", "metal")
    assert stats["calls"] == 1 and stats["declines"] == 0
    if metalrt.providers.registered("embedding", "metal"):
        assert not stats["last_selected"].startswith("reference:")
        assert stats["reference_hits"] == 0
    else:
        assert stats["last_selected"] == "reference:cpu_embedding"
        assert stats["reference_hits"] == 1
