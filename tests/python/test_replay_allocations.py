"""A replayed decode step makes no heap allocation per dispatch on the host: the plan
encodes the dispatches it kept at recording (resolved pipelines, bindings, argument
bytes, grids: cpp/gpu/op_capture.h), so what the replaying thread still allocates is the
device's command buffer of each commit. Counted by bench/host_allocations.py (a
``malloc`` counter preloaded into a fresh interpreter, on the replaying thread only) on
the Metal device, for the default model and a tiny MoE hybrid (Gated DeltaNet and
attention layers)."""
import sys
from pathlib import Path

import pytest

import tiny_hybrid
from conftest import requires_metal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import host_allocations  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the counter is preloaded into glibc (Linux)")


@requires_metal
@pytest.mark.parametrize("name", ["default", "qwen3_next"])
def test_replayed_decode_step_allocates_only_its_command_buffers(name):
    if name == "default":
        result = host_allocations.run(steps=3)
    else:
        result = host_allocations.run(str(tiny_hybrid.path(name)), tiny_hybrid.prompt(9, 3), steps=3)
    assert result["calibration"] == 0, result   # the count itself allocates nothing
    assert len(result["allocations"]) == 3 and result["dispatches"] > 0 and result["commits"] > 0, result
    # At most one allocation per command buffer committed (the device's object), none
    # per dispatch: 9c247a8 re-ran every provider, 10,116 for the default model's 245.
    assert all(count <= result["commits"] for count in result["allocations"]), result
