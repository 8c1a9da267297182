"""The Apple kernel build rule (cpp/metal/metallib.cmake), configured and built on
any platform with a stub in place of `metal` and `metallib`
(tests/cmake/metallib_rule): every `metal` call pins the language version and the
deployment target, and a header edit rebuilds the kernels."""
import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULE_PROJECT = ROOT / "tests" / "cmake" / "metallib_rule"
KERNELS = sorted(p.name for p in (ROOT / "metal").glob("*.metal"))


def _run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"


class RuleBuild:
    def __init__(self, tmp_path, *cmake_args):
        self.kernels = tmp_path / "metal"
        # A copy: touching a header must not dirty the source tree's builds.
        shutil.copytree(ROOT / "metal", self.kernels, ignore=shutil.ignore_patterns("shim"))
        self.build = tmp_path / "build"
        self.log = tmp_path / "stub.log"
        _run(["cmake", "-S", str(RULE_PROJECT), "-B", str(self.build), "-G", "Ninja",
              f"-DMETALRT_KERNEL_DIR={self.kernels}", f"-DSTUB_LOG={self.log}", *cmake_args])

    def build_calls(self):
        """The stub's calls made by one `cmake --build`."""
        self.log.write_text("")
        _run(["cmake", "--build", str(self.build)])
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def compiled(self, calls):
        return sorted(pathlib.Path(c["args"][c["args"].index("-c") + 1]).name
                      for c in calls if c["tool"] == "metal")


@pytest.fixture
def rule(tmp_path):
    return RuleBuild(tmp_path)


def test_every_metal_call_pins_msl_3_1_and_macos_14_without_fast_math(rule):
    calls = rule.build_calls()
    metal = [c["args"] for c in calls if c["tool"] == "metal"]
    assert rule.compiled(calls) == KERNELS
    for args in metal:
        assert "-std=metal3.1" in args
        assert "-mmacosx-version-min=14.0" in args
        assert "-fno-fast-math" in args
    (link,) = [c["args"] for c in calls if c["tool"] == "metallib"]
    assert sorted(pathlib.Path(a).name for a in link if a.endswith(".air")) == \
        [k.replace(".metal", ".air") for k in KERNELS]


@pytest.mark.parametrize("target, expected", [("15.2", "15.2"), ("13.0", "14.0")])
def test_the_deployment_target_raises_the_minimum_but_never_below_14(tmp_path, target, expected):
    rule = RuleBuild(tmp_path, f"-DCMAKE_OSX_DEPLOYMENT_TARGET={target}")
    for call in rule.build_calls():
        if call["tool"] == "metal":
            assert f"-mmacosx-version-min={expected}" in call["args"]


def test_a_header_edit_rebuilds_the_kernels_and_the_metallib(rule):
    rule.build_calls()
    assert rule.build_calls() == []   # up to date: nothing runs
    header = rule.kernels / "row_args.h"
    later = time.time() + 10   # newer than every output (copytree kept the old mtimes)
    os.utime(header, (later, later))
    calls = rule.build_calls()
    assert "rms_norm.metal" in rule.compiled(calls)   # includes row_args.h through row_reduce.h
    assert [c["tool"] for c in calls].count("metallib") == 1
