"""Device queries: is_available, device_info, synchronize."""
import pytest

import metalrt


def test_cpu_device_info():
    info = metalrt.device_info("cpu")
    assert set(info) == {"name", "unified_memory", "capability", "dtypes", "graph_capture", "simulated",
                         "max_buffer_length"}
    assert info["unified_memory"] is True and info["graph_capture"] is False and info["simulated"] is False
    assert info["max_buffer_length"] is None   # no buffer limit on the CPU
    assert info["capability"] == "cpu"
    assert "float32" in info["dtypes"]
    assert set(info["dtypes"]) <= set(metalrt.DTYPES)


def test_every_available_device_describes_itself(device):
    info = metalrt.device_info(device)
    assert isinstance(info["name"], str) and info["name"]
    assert info["dtypes"] and set(info["dtypes"]) <= set(metalrt.DTYPES)
    metalrt.synchronize(device)


def test_availability():
    assert metalrt.is_available("cpu") is True
    assert isinstance(metalrt.is_available("metal"), bool)
    with pytest.raises(ValueError, match="unknown device"):
        metalrt.is_available("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        metalrt.synchronize("cuda")
    with pytest.raises(TypeError):
        metalrt.device_info(None)


def test_unavailable_metal_raises_runtime_error():
    if metalrt.is_available("metal"):
        info = metalrt.device_info("metal")
        assert info["unified_memory"] is True and info["graph_capture"] is False
        # The simulated device exactly when it says so by name (an Apple GPU's is "Apple ...").
        assert info["simulated"] is info["name"].startswith("metalrt simulated Metal device")
        return
    with pytest.raises(RuntimeError, match="metal"):
        metalrt.device_info("metal")
    with pytest.raises(RuntimeError, match="metal"):
        metalrt.asarray([1.0], device="metal")
