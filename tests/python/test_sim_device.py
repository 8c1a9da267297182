"""The simulated Metal device fails where a Mac would: a bad METALRT_SIM_ORDER is a
Python exception (not an abort)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

# Runs one dispatch and reads the result back on the simulated device.
ONE_DISPATCH = """
import numpy as np, metalrt
a = metalrt.asarray(np.arange(40, dtype=np.float32), device="metal")
print(metalrt.ops.add(a, a).numpy()[39])
"""


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "METALRT_METAL": "sim", **env})


def test_a_bad_sim_order_raises_value_error_instead_of_aborting():
    proc = run_python(ONE_DISPATCH, METALRT_SIM_ORDER="sideways")
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stderr}"   # -6 is the abort
    assert ("ValueError: METALRT_SIM_ORDER must be forward, reverse, shuffle or shuffle:<seed> "
            "(a decimal seed), got 'sideways'") in proc.stderr
    for good in ("reverse", "shuffle:5"):
        proc = run_python(ONE_DISPATCH, METALRT_SIM_ORDER=good)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["78.0"]

