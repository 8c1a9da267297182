"""The Apple Metal compiler lookup (cpp/metal/metal_compiler.cmake), configured on any
platform through tests/cmake/metal_probe with stub `xcrun`, `metal` and `metallib`
first on PATH. A `metal` that xcrun finds but that fails when run (Xcode 26 without
the Metal Toolchain) or a failing `metallib` must take the embedded-source path, and
the build must then pass; working tools get the metallib, probed with the very flags
the kernels are compiled with."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROBE_PROJECT = ROOT / "tests" / "cmake" / "metal_probe"
RECORDING_STUB = ROOT / "tests" / "cmake" / "metallib_rule" / "stub_tool.py"
FLAGS = ["-x", "metal", "-std=metal3.1", "-mmacosx-version-min=14.0", "-fno-fast-math"]
XCODE_26_MESSAGE = ("error: cannot execute tool 'metal' due to missing Metal Toolchain; "
                    "use: xcodebuild -downloadComponent MetalToolchain")

# `xcrun -sdk macosx -f TOOL` prints the stub beside it, or fails as xcrun does for a
# tool that is not installed.
XCRUN = """#!/bin/sh
bin=$(dirname "$0")
if [ "$1" = -sdk ] && [ "$3" = -f ]; then
  if [ -x "$bin/$4" ]; then echo "$bin/$4"; exit 0; fi
  echo "xcrun: error: unable to find utility \\"$4\\", not a developer tool or in PATH" >&2
  exit 72
fi
echo "stub xcrun: unexpected arguments: $*" >&2
exit 64
"""


def _failing(message, status):
    return f"#!/bin/sh\necho \"{message}\" >&2\nexit {status}\n"


class Toolchain:
    """A bin directory of stubs; `metal`/`metallib` of None are not installed."""

    def __init__(self, tmp_path, metal="records", metallib="records"):
        self.bin = tmp_path / "bin"
        self.bin.mkdir(parents=True)
        self.log = tmp_path / "stub.log"
        self.log.write_text("")
        self.build = tmp_path / "build"
        self._write("xcrun", XCRUN)
        for tool, script in (("metal", metal), ("metallib", metallib)):
            if script == "records":
                script = f'#!/bin/sh\nexec "{sys.executable}" "{RECORDING_STUB}" "{self.log}" {tool} "$@"\n'
            if script is not None:
                self._write(tool, script)

    def _write(self, name, text):
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    def run(self, *command):
        env = dict(os.environ, PATH=f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        # CMake rewraps warnings: compare with the whitespace collapsed.
        return result.returncode, " ".join((result.stdout + result.stderr).split())

    def configure(self, *cmake_args):
        return self.run("cmake", "-S", str(PROBE_PROJECT), "-B", str(self.build), "-G", "Ninja",
                        f"-DMETALRT_KERNEL_DIR={ROOT / 'metal'}", *cmake_args)

    def build_tree(self):
        return self.run("cmake", "--build", str(self.build))

    def calls(self):
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    @property
    def metallib(self):
        return self.build / "metalrt.metallib"


def _assert_embedded_path(tools, configure_output):
    rc, output = tools.build_tree()
    assert rc == 0, f"the build must pass on the embedded-source path:\n{output}"
    assert "compiles its kernels at run time" in configure_output, configure_output
    assert not tools.metallib.exists()
    assert not [c for c in tools.calls() if "-c" in c["args"] and
                pathlib.Path(c["args"][c["args"].index("-c") + 1]).parent == ROOT / "metal"], \
        "a kernel was compiled on the embedded-source path"


def test_xcode_26_stub_metal_takes_the_embedded_path(tmp_path):
    tools = Toolchain(tmp_path, metal=_failing(XCODE_26_MESSAGE, 1))
    rc, output = tools.configure()
    assert rc == 0, output
    _assert_embedded_path(tools, output)
    assert XCODE_26_MESSAGE in output, output
    assert f"{tools.bin / 'metal'}" in output and "exited with status 1" in output, output


def test_a_failing_metallib_takes_the_embedded_path(tmp_path):
    tools = Toolchain(tmp_path, metallib=_failing("metallib: stub link failure", 3))
    rc, output = tools.configure()
    assert rc == 0, output
    _assert_embedded_path(tools, output)
    assert f"{tools.bin / 'metallib'}" in output, output
    assert "exited with status 3: metallib: stub link failure" in output, output
    assert [c["tool"] for c in tools.calls()] == ["metal"], "the probe compiles before it links"


def test_without_metal_xcruns_message_is_named_and_the_build_passes(tmp_path):
    tools = Toolchain(tmp_path, metal=None)   # the Command Line Tools: no `metal`
    rc, output = tools.configure()
    assert rc == 0, output
    assert 'unable to find utility "metal"' in output, output
    _assert_embedded_path(tools, output)


def test_working_tools_are_probed_with_the_kernel_flags_and_build_the_metallib(tmp_path):
    tools = Toolchain(tmp_path)
    rc, output = tools.configure()
    assert rc == 0, output
    assert "compiles its kernels at run time" not in output, output
    probe = tools.calls()
    assert [c["tool"] for c in probe] == ["metal", "metallib"], probe
    compile_args = probe[0]["args"]
    assert compile_args[:compile_args.index("-c")] == FLAGS
    assert pathlib.Path(compile_args[compile_args.index("-c") + 1]).name == "probe.metal"
    assert probe[1]["args"][0] == compile_args[compile_args.index("-o") + 1]

    tools.log.write_text("")
    rc, build_output = tools.build_tree()
    assert rc == 0, build_output
    assert tools.metallib.exists()
    kernels = [c["args"] for c in tools.calls() if c["tool"] == "metal"]
    assert len(kernels) == len(list((ROOT / "metal").glob("*.metal")))
    for args in kernels:   # the probe's flags are the build's flags
        assert args[:args.index("-I")] == FLAGS, args


@pytest.mark.parametrize("metal", ["records", _failing(XCODE_26_MESSAGE, 1)])
def test_an_explicit_compiler_is_used_unprobed(tmp_path, metal):
    tools = Toolchain(tmp_path, metal=metal)
    rc, output = tools.configure(f"-DMETALRT_METAL_COMPILER={tools.bin / 'metal'}",
                                 f"-DMETALRT_METALLIB_TOOL={tools.bin / 'metallib'}")
    assert rc == 0, output
    assert tools.calls() == [], "an explicit METALRT_METAL_COMPILER must not be probed"
    assert "compiles its kernels at run time" not in output, output
    assert "metalrt.metallib" in (tools.build / "build.ninja").read_text()


def test_an_empty_explicit_compiler_forces_the_embedded_path(tmp_path):
    tools = Toolchain(tmp_path)
    rc, output = tools.configure("-DMETALRT_METAL_COMPILER=")
    assert rc == 0, output
    assert tools.calls() == [], "an explicit METALRT_METAL_COMPILER must not be probed"
    rc, output = tools.build_tree()
    assert rc == 0, output
    assert not tools.metallib.exists() and tools.calls() == []


def test_an_explicit_compiler_takes_xcruns_metallib_or_says_to_set_it(tmp_path):
    found = Toolchain(tmp_path / "found")
    rc, output = found.configure(f"-DMETALRT_METAL_COMPILER={found.bin / 'metal'}")
    assert rc == 0, output
    rc, output = found.build_tree()
    assert rc == 0 and found.metallib.exists(), output
    missing = Toolchain(tmp_path / "missing", metallib=None)
    rc, output = missing.configure(f"-DMETALRT_METAL_COMPILER={missing.bin / 'metal'}")
    assert rc != 0 and "set METALRT_METALLIB_TOOL as well" in output, output
