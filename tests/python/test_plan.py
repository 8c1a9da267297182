"""metalrt.plan: op calls recorded once and replayed from C++ (cpp/include/metalrt/plan.h),
on the CPU and the Metal device (the simulated one without an Apple GPU)."""
import sys
from pathlib import Path

import numpy as np
import pytest

import metalrt
from metalrt import ops
from metalrt.plan import Plan, read_output, write_inputs
from conftest import requires_metal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import native_calls  # noqa: E402


def _step(x, w, norm, out):
    """A small step of three ops: out += matmul_bt(rms_norm(x), w)."""
    h = ops.rms_norm(x, norm, 1e-5)
    y = ops.matmul_bt(h, w)
    return ops.add(out, y, out=out)


def _inputs(device, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 64)).astype(np.float32)
    return x, metalrt.asarray(x, device=device)


@pytest.fixture
def weights(device):
    rng = np.random.default_rng(0)
    w = metalrt.asarray(rng.normal(size=(8, 64)).astype(np.float32), device=device)
    norm = metalrt.asarray(rng.normal(size=64).astype(np.float32), device=device)
    return w, norm


def _recorded_step(device, weights):
    """(plan, x, out): _step recorded on fresh input x and output out."""
    w, norm = weights
    _, x = _inputs(device, 1)
    out = metalrt.zeros((3, 8), "float32", device)
    plan = Plan(device)
    with plan.record():
        _step(x, w, norm, out)
    return plan, x, out


def test_replay_reruns_the_recorded_calls_bit_exactly(device, weights):
    w, norm = weights
    plan, x, out = _recorded_step(device, weights)
    assert plan.state == "ready" and plan.ops == ["rms_norm", "matmul_bt", "add"] and len(plan) == 3
    for seed in (2, 3, 4):
        host_x, _ = _inputs(device, seed)
        # The unrecorded step on fresh tensors is the reference.
        ref_out = metalrt.zeros((3, 8), "float32", device)
        ref_x = metalrt.asarray(host_x, device=device)
        _step(ref_x, w, norm, ref_out)
        write_inputs([(x, host_x), (out, np.zeros((3, 8), np.float32))])
        plan.replay()
        got = read_output(out)
        assert not np.isnan(got).any()
        assert got.tobytes() == ref_out.numpy().tobytes()
    assert plan.replays == 3


def test_replay_writes_outputs_poisoned_before_it(device, weights):
    w, norm = weights
    _, x = _inputs(device, 1)
    plan = Plan(device)
    with plan.record():
        y = ops.matmul_bt(ops.rms_norm(x, norm, 1e-5), w)
    expected = y.numpy()
    write_inputs([(y, np.full((3, 8), np.nan, np.float32))])
    plan.replay()
    assert read_output(y).tobytes() == expected.tobytes()


def test_replay_is_counted_in_the_provider_stats(device, weights):
    w, norm = weights
    _, x = _inputs(device, 1)
    plan = Plan(device)
    with plan.record():
        ops.rms_norm(x, norm, 1e-5)
    metalrt.providers.reset_stats()
    plan.replay()
    plan.replay()
    stats = metalrt.providers.stats("rms_norm", device)
    assert stats["calls"] == 2 and stats["last_selected"] != ""


def test_misuse_raises_clear_errors(device, weights):
    w, norm = weights
    _, x = _inputs(device, 1)
    with pytest.raises(RuntimeError, match=r"\[plan\] only a recorded plan replays; this one is empty"):
        Plan(device).replay()
    plan = Plan(device)
    with plan.record():
        ops.rms_norm(x, norm, 1e-5)
    with pytest.raises(RuntimeError, match="records once"):
        with plan.record():
            pass
    plan.release()
    with pytest.raises(RuntimeError, match="released.*release\\(\\) freed its tensors"):
        plan.replay()
    # A step that raises leaves a failed plan, never replayed.
    failing = Plan(device)
    with pytest.raises(ValueError):
        with failing.record():
            ops.rms_norm(x, metalrt.zeros(7, "float32", device), 1e-5)
    assert failing.state == "failed"
    with pytest.raises(RuntimeError, match="failed"):
        failing.replay()
    # One recording per thread, and no replay inside another recording.
    outer, ready = Plan(device), Plan(device)
    with ready.record():
        ops.rms_norm(x, norm, 1e-5)
    with outer.record():
        with pytest.raises(RuntimeError, match="another plan is recording"):
            with Plan(device).record():
                pass
        with pytest.raises(RuntimeError, match="replay while another plan records"):
            ready.replay()
    assert outer.state == "ready"


@requires_metal
def test_recording_across_devices_is_refused():
    cpu = metalrt.asarray(np.ones((2, 4), np.float32))
    cpu_norm = metalrt.asarray(np.ones(4, np.float32))
    plan = Plan("metal")
    with pytest.raises(ValueError, match=r"\[plan\] recording on 'metal', but op 'rms_norm' runs on 'cpu'"):
        with plan.record():
            ops.rms_norm(cpu, cpu_norm, 1e-5)
    assert plan.state == "failed"
    # Refused before it ran: nothing was written, and a later recording is not affected.
    other = Plan("cpu")
    with other.record():
        ops.rms_norm(cpu, cpu_norm, 1e-5)
    assert other.state == "ready"


def test_write_inputs_checks_every_pair_before_writing(device):
    a = metalrt.zeros(4, "int32", device)
    b = metalrt.zeros(4, "int32", device)
    with pytest.raises(ValueError, match="write_inputs: a host array of shape \\[3\\]"):
        write_inputs([(a, np.arange(4, dtype=np.int32)), (b, np.arange(3, dtype=np.int32))])
    with pytest.raises(TypeError, match="int32 tensor needs a host array of that element type"):
        write_inputs([(a, np.arange(4, dtype=np.int32)), (b, np.arange(4, dtype=np.int64))])
    assert a.numpy().tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="contiguous"):
        read_output(metalrt.zeros((4, 4), "int32", device)[:, 0:2])
    with pytest.raises(TypeError, match="bfloat16"):
        read_output(metalrt.zeros(4, "bfloat16", device))


@requires_metal
def test_metal_replay_commits_early_allocates_nothing_and_never_waits():
    rng = np.random.default_rng(0)
    w = metalrt.asarray(rng.normal(size=(8, 64)).astype(np.float32), device="metal")
    norm = metalrt.asarray(rng.normal(size=64).astype(np.float32), device="metal")
    x = metalrt.asarray(rng.normal(size=(3, 64)).astype(np.float32), device="metal")
    plan = Plan("metal", first_commit_ops=1)
    with plan.record():
        h = ops.rms_norm(x, norm, 1e-5)
        y = ops.matmul_bt(h, w)
        z = ops.add(y, y)
    metalrt.synchronize("metal")
    was = metalrt.profiler.enabled()
    metalrt.profiler.enable(True)
    metalrt.profiler.reset()
    try:
        plan.replay()
        events = metalrt.profiler.events()
        rows = {r["name"]: r for r in metalrt.profiler.rows()}
        assert rows["total"]["waits"] == 0 and rows["total"]["allocated_bytes"] == 0
        assert rows["rms_norm_row_f32"]["dispatches"] == 1
        # A first command buffer after one op, the rest when the replay returns.
        assert events == [("mark", "replay"), ("commit", "flush"), ("commit", "flush")]
        assert not np.isnan(read_output(z)).any()
    finally:
        metalrt.profiler.enable(was)
        metalrt.profiler.reset()


def test_replay_is_one_call_into_the_extension(device, weights):
    w, norm = weights
    plan, x, out = _recorded_step(device, weights)
    with native_calls.counting() as counter:
        plan.replay()
    assert counter.calls == 1, counter.names
    with native_calls.counting() as counter:
        _step(x, w, norm, out)
    assert counter.calls >= 3, counter.names   # the counter sees op calls too
