"""Gates of how `import metalrt` finds the OpenBLAS of the CPU prefill GEMM
(python/metalrt/_blas.py, cpp/cpu/fast/prefill/blas/sgemm.cpp) in install layouts other than
"metalrt and scipy_openblas32 side by side in one site-packages".

Each runs a fresh interpreter on a copy of the installed metalrt package in a temporary
directory (on PYTHONPATH, so ahead of site-packages), as a venv made with
--system-site-packages holds metalrt in the venv and scipy_openblas32 in the system's
site directory: no path relative to the extension reaches the library.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

import metalrt

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="OpenBLAS from scipy-openblas32 is the Linux BLAS (macOS links Accelerate)")

# A prefill-sized matmul_bt under METALRT_CPU_GEMM=f32 (the sgemm, not the bf16 GEMM
# ahead of it): which provider served it, and its error against numpy.
PROBE = """
import json, os
import numpy as np
import metalrt
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 32), dtype=np.float32)
b = rng.standard_normal((8, 32), dtype=np.float32)
metalrt.providers.reset_stats()
got = metalrt.ops.matmul_bt(metalrt.asarray(a), metalrt.asarray(b)).numpy()
print(json.dumps({"package": os.path.dirname(metalrt.__file__),
                  "served": metalrt.providers.stats("matmul_bt", "cpu")["last_selected"],
                  "max_err": float(np.abs(got - a @ b.T).max())}))
"""


def run_probe(tmp_path, *prepend):
    """Runs PROBE with a copy of the installed metalrt package and `prepend` (directories
    ahead of it) on PYTHONPATH; returns its JSON report."""
    shutil.copytree(os.path.dirname(metalrt.__file__), tmp_path / "copy" / "metalrt",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, prepend), str(tmp_path / "copy")])
    env["METALRT_CPU_GEMM"] = "f32"
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, f"import metalrt failed in the moved layout:\n{proc.stderr}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["package"] == str(tmp_path / "copy" / "metalrt"), "the probe imported another metalrt"
    return report


def test_openblas_is_found_when_metalrt_and_scipy_openblas32_are_in_different_site_directories(tmp_path):
    pytest.importorskip("scipy_openblas32")
    if "cpu_blas_matmul_bt" not in metalrt.providers.list("matmul_bt", "cpu"):
        pytest.skip("this build has no BLAS (METALRT_BLAS=off)")
    report = run_probe(tmp_path)
    assert report["served"] == "cpu_blas_matmul_bt"
    assert report["max_err"] < 1e-4


def test_without_scipy_openblas32_metalrt_imports_and_the_oracle_serves(tmp_path):
    # A scipy_openblas32 that cannot be imported, ahead of the real one.
    fake = tmp_path / "no_openblas" / "scipy_openblas32"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('scipy_openblas32 hidden by the test')\n")
    report = run_probe(tmp_path, tmp_path / "no_openblas")
    assert report["served"] == "cpu_matmul_bt"
    assert report["max_err"] < 1e-4
