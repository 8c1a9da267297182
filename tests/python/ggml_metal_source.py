"""ggml's Metal kernel library (llama.cpp, MIT), fetched for the MSL coverage gate.

The kernels ship inside the ``llama-cpp-python`` sdist on PyPI, under
``vendor/llama.cpp/ggml/src/ggml-metal/`` (``kernels/*.metal`` and the headers they
include) and ``ggml/src/ggml-common.h``. On first use the pinned sdist is fetched with
``pip download --no-deps --no-binary llama-cpp-python`` (the package is never built or
installed; only it, not its build requirements, comes as source), its sha256 checked,
and kept as ``<cache>/sdist/`` (``sdist()``: the converter and the chat templates of
the other fixtures come from the same file, fetched once); those files are copied flat
into ``<cache>/ggml-metal/<version>/``, the cache being metalrt's
(``$METALRT_CACHE_DIR`` or ``~/.cache/metalrt``, see ``metalrt.default_model.cache_dir``).
Nothing of it is committed to this repository.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import cache_lock
import metalrt
from metalrt.default_model import cache_dir

VERSION = "0.3.36"
PACKAGE = f"llama-cpp-python=={VERSION}"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
_ROOT = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/ggml/src/"
_KERNELS = _ROOT + "ggml-metal/kernels/"
_HEADERS = (_ROOT + "ggml-metal/ggml-metal-impl.h", _ROOT + "ggml-common.h")
# What ggml's device code (ggml-metal-device.m, ggml_metal_library_init) passes as
# MTLCompileOptions.preprocessorMacros on a GPU with bfloat; GGML_METAL_HAS_TENSOR is
# only set on GPUs with the Metal 4 tensor API (its MetalPerformancePrimitives path is
# not part of MSL's standard library and is out of scope here).
DEFINES = {"GGML_METAL_HAS_BF16": "1"}
# The compiler of the coverage gate (test_msl_coverage.py says why g++).
CXX = "g++"
# The kernels/*.metal that ggml compiles into libraries (ggml-metal/CMakeLists.txt);
# fa_common.metal and fa_vec_common.metal are only included by the fa_* files.
INCLUDED_ONLY = ("fa_common.metal", "fa_vec_common.metal")


class GgmlSourceError(RuntimeError):
    """ggml's Metal source could not be fetched or verified."""


def _download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
           "llama-cpp-python", "--disable-pip-version-check", "--dest", str(dest), PACKAGE]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sdist = dest / SDIST
    if proc.returncode != 0 or not sdist.exists():
        said = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise GgmlSourceError(f"[ggml_metal_source] could not download {PACKAGE} with pip "
                              f"(exit code {proc.returncode}: {' / '.join(said)})")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise GgmlSourceError(f"[ggml_metal_source] {sdist.name} has sha256 {digest}; "
                              f"expected {SDIST_SHA256}")
    return sdist


def sdist() -> Path:
    """The pinned llama-cpp-python sdist, sha256-checked, fetched into the cache on first
    use. Raises GgmlSourceError (with pip's last words, or the hash mismatch) when it
    cannot be fetched."""
    target = cache_dir() / "sdist" / SDIST
    with cache_lock.held(f"sdist/{SDIST}"):
        if not target.exists():
            with tempfile.TemporaryDirectory(prefix="metalrt-sdist-", dir=target.parent) as tmp:
                os.replace(_download(Path(tmp)), target)
    return target


def _extract(sdist: Path, target: Path) -> None:
    """Copies the kernel files flat into a sibling of ``target``, then renames it into
    place, so that a cached directory is always complete."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and (
                m.name in _HEADERS or (m.name.startswith(_KERNELS) and "/" not in m.name[len(_KERNELS):]))]
            if not any(m.name.endswith(".metal") for m in members) or len(
                    [m for m in members if m.name in _HEADERS]) != len(_HEADERS):
                raise GgmlSourceError(f"[ggml_metal_source] {sdist.name} lacks {_KERNELS}*.metal "
                                      f"or {', '.join(_HEADERS)}")
            for m in members:
                (partial / Path(m.name).name).write_bytes(tar.extractfile(m).read())
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def source_dir() -> Path:
    """The directory holding ggml's kernels/*.metal, kernels/*.h, ggml-metal-impl.h and
    ggml-common.h side by side, fetched on first use. Raises GgmlSourceError (with
    pip's last words, or the hash mismatch) when it cannot be fetched."""
    target = cache_dir() / "ggml-metal" / VERSION
    with cache_lock.held(f"ggml-metal/{VERSION}"):
        if not (target / "ggml-metal-impl.h").exists():
            _extract(sdist(), target)
    return target


def headers(directory: Path) -> dict[str, str]:
    """Every file of ``directory`` by name (what the kernels' quoted includes name)."""
    return {p.name: p.read_text() for p in sorted(directory.iterdir())}


def kernel_files(directory: Path) -> list[Path]:
    """The kernel libraries ggml builds: every ``*.metal`` but the included-only ones."""
    return [p for p in sorted(directory.glob("*.metal")) if p.name not in INCLUDED_ONLY]


def compile_library(directory: Path, name: str):
    """ggml's library ``name``, compiled by ``$CXX`` (the callers set it to CXX)."""
    return metalrt.compile_shader((directory / f"{name}.metal").read_text(),
                                  defines=DEFINES, headers=headers(directory))
