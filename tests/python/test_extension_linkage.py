"""The extension keeps any libstdc++ it carries to itself.

A toolchain whose libstdc++ is only a static archive (the g++ wrapper of some CUDA
images, GCC 13 on Ubuntu 24.04) links a private copy of the C++ runtime into
`_metalrt`. Exported, its symbols are interposed by the process's libstdc++.so.6 for
some references and not others: the locale facet ids of the two copies disagree and
the first number written into a string (an error message's shape) calls a wrong
virtual function. The extension is linked with `--exclude-libs,ALL` (CMakeLists.txt),
so whatever runtime it carries defines no dynamic symbol. On a toolchain that links
libstdc++.so the gate holds trivially; on the static one it fails without the flag.
"""
import pathlib
import shutil
import subprocess
import sys

import pytest

import metalrt

# Mangled prefixes of classes whose members only the C++ runtime library defines (they
# are no templates, so no user code instantiates them): std::locale (with its facet
# ids) and std::ios_base.
_RUNTIME_PREFIXES = ("_ZNSt6locale", "_ZNKSt6locale", "_ZNSt8ios_base", "_ZNKSt8ios_base")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="ELF dynamic symbols: Linux only (macOS links libc++ dynamically)")


def _defined_dynamic_symbols(path: pathlib.Path) -> list[str]:
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to read the extension's dynamic symbols"
    listing = subprocess.run([nm, "-D", "--defined-only", str(path)], capture_output=True,
                             text=True, check=True).stdout
    return [line.split()[-1] for line in listing.splitlines() if line.strip()]


def test_the_extension_exports_no_cxx_runtime_symbol():
    extension = pathlib.Path(metalrt._metalrt.__file__)
    symbols = _defined_dynamic_symbols(extension)
    assert "PyInit__metalrt" in symbols   # the listing is real: the module's entry is there
    runtime = [s for s in symbols if s.startswith(_RUNTIME_PREFIXES)]
    assert runtime == [], f"{extension.name} exports C++ runtime symbols: {runtime[:5]}"


def test_an_error_message_with_shapes_formats():
    # The crash's trigger: an op entry point formats shapes (ShapeToString) whether or
    # not the call is valid.
    a = metalrt.asarray([[1.0] * 64] * 3)
    with pytest.raises(ValueError, match=r"\[3, 64\] and b \[32, 63\] disagree on K"):
        metalrt.ops.matmul_bt(a, metalrt.asarray([[1.0] * 63] * 32))
