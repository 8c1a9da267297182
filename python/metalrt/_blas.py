"""Loads the OpenBLAS of the CPU prefill GEMM before the extension needs it.

The extension does not link ``libscipy_openblas.so``: it dlopens it by soname at the
first prefill matmul (``cpp/cpu/fast/prefill/blas/sgemm.cpp``), which finds the copy loaded
here from wherever pip installed the ``scipy_openblas32`` package (a venv made with
``--system-site-packages`` may hold metalrt and scipy_openblas32 in different site
directories, so no path relative to the extension is reliable). Without the package,
or when its library does not load, nothing is loaded: the BLAS providers decline and
the CPU oracle serves (``metalrt.providers.stats`` shows which ran).
"""
from __future__ import annotations

import ctypes
import os
import sys


def preload() -> str | None:
    """Loads ``libscipy_openblas.so`` from the installed ``scipy_openblas32`` package on
    Linux; returns its path, or None when there is none to load (other platforms use
    Accelerate or no BLAS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import scipy_openblas32
    except ImportError:
        return None
    path = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    try:
        ctypes.CDLL(path)
    except OSError:
        return None
    return path
