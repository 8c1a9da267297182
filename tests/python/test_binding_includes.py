"""The extension's bindings (cpp/python) use only the runtime's public API: each
header they include is one of theirs or a public one (cpp/include/metalrt), never a
CPU, GPU, simulator or kernel internal (cpp/cpu, cpp/gpu, cpp/sim, cpp/metal, metal/),
so a binding cannot come to depend on how the runtime is built inside.

Read from the sources: a quoted include must name a file of cpp/python or
cpp/include; an angle-bracket one must not name a file of the project's other include
directories (cpp/, metal/; system and nanobind headers are in neither).
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINDINGS = ROOT / "cpp" / "python"
PUBLIC = ROOT / "cpp" / "include"
PRIVATE = (ROOT / "cpp", ROOT / "metal")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def _non_public_includes(source: str) -> list:
    """The headers `source`, a file of cpp/python, includes that are not public."""
    found = []
    for bracket, header in INCLUDE.findall(source):
        if (BINDINGS / header).is_file() or (PUBLIC / header).is_file():
            continue
        if bracket == '"' or any((d / header).is_file() for d in PRIVATE):
            found.append(header)
    return found


def test_bindings_include_only_public_headers():
    files = sorted(BINDINGS.glob("*.cpp")) + sorted(BINDINGS.glob("*.h"))
    assert len(files) > 10   # the gate reads the real bindings
    assert ('"', "metalrt/ops.h") in INCLUDE.findall((BINDINGS / "bind_matmul.cpp").read_text())
    offenders = {f.name: bad for f in files if (bad := _non_public_includes(f.read_text(encoding="utf-8")))}
    assert offenders == {}, "cpp/python includes internals; add what it needs to cpp/include/metalrt"


def test_an_internal_include_is_found():
    source = ('#include "bind.h"\n#include <nanobind/stl/string.h>\n#include "metalrt/device.h"\n'
              '#include "gpu/metal_backend.h"\n#include <cpu/parallel.h>\n#include "quantized_args.h"\n'
              '#include "no/such/header.h"\n')
    assert _non_public_includes(source) == ["gpu/metal_backend.h", "cpu/parallel.h", "quantized_args.h",
                                            "no/such/header.h"]
