"""metalrt.providers: the registry's view from Python."""
import numpy as np
import pytest

import metalrt


def test_stats_of_an_op_never_run():
    metalrt.providers.reset_stats()
    assert metalrt.providers.stats("no_such_op", "cpu") == {
        "last_selected": "", "calls": 0, "declines": 0, "reference_hits": 0}
    assert metalrt.providers.list("no_such_op", "cpu") == []
    assert metalrt.providers.registered("no_such_op", "cpu") is False


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown provider"):
        metalrt.providers.set_enabled("no_such_provider", False)
    with pytest.raises(ValueError, match="unknown device"):
        metalrt.providers.stats("add", "tpu")
    with pytest.raises(TypeError):
        metalrt.providers.list(None, "cpu")


def test_stats_count_the_calls_of_the_provider_that_ran():
    metalrt.providers.reset_stats()
    assert "embedding" in metalrt.providers.ops()
    assert metalrt.providers.registered("embedding", "cpu") is True
    [name] = metalrt.providers.list("embedding", "cpu")
    weight = np.eye(4, dtype=np.float32)
    for _ in range(3):
        metalrt.ops.embedding(weight, np.array([1], np.int32))
    assert metalrt.providers.stats("embedding", "cpu") == {
        "last_selected": name, "calls": 3, "declines": 0, "reference_hits": 0}
    metalrt.providers.reset_stats()
    assert metalrt.providers.stats("embedding", "cpu")["calls"] == 0


def test_a_disabled_provider_is_skipped():
    names = metalrt.providers.list("greedy_argmax", "cpu")   # the fast one, then the oracle
    assert names[-1] == "cpu_greedy_argmax" and len(names) == 2, names
    metalrt.providers.set_enabled(names[0], False)
    try:
        metalrt.ops.greedy_argmax(np.array([[0.0, 2.0]], np.float32))
        assert metalrt.providers.stats("greedy_argmax", "cpu")["last_selected"] == names[1]
        metalrt.providers.set_enabled(names[1], False)
        with pytest.raises(RuntimeError, match=r"^\[greedy_argmax\] no provider"):
            metalrt.ops.greedy_argmax(np.zeros((1, 3), np.float32))
    finally:
        for name in names:
            metalrt.providers.set_enabled(name, True)
    assert metalrt.ops.greedy_argmax(np.array([[0.0, 2.0]], np.float32)).numpy()[0] == 1
    assert metalrt.providers.stats("greedy_argmax", "cpu")["last_selected"] == names[0]


def test_the_version_changes_exactly_when_the_disabled_set_does():
    name = metalrt.providers.list("greedy_argmax", "cpu")[0]
    start = metalrt.providers.version()
    metalrt.providers.set_enabled(name, True)    # already enabled: no change
    assert metalrt.providers.version() == start
    metalrt.providers.set_enabled(name, False)
    try:
        assert metalrt.providers.version() == start + 1
        metalrt.providers.set_enabled(name, False)   # already disabled
        assert metalrt.providers.version() == start + 1
    finally:
        metalrt.providers.set_enabled(name, True)
    assert metalrt.providers.version() == start + 2
    with pytest.raises(ValueError, match="unknown provider"):
        metalrt.providers.set_enabled("no_such_provider", False)
    assert metalrt.providers.version() == start + 2


def test_metal_reports_native_or_reference_tier_honestly():
    # The simulated Metal device is part of every build.
    assert metalrt.is_available("metal")
    metalrt.providers.reset_stats()
    weight = metalrt.asarray(np.eye(4, dtype=np.float32), device="metal")
    metalrt.ops.embedding(weight, np.array([2], np.int32))
    stats = metalrt.providers.stats("embedding", "metal")
    assert stats["calls"] == 1
    if metalrt.providers.registered("embedding", "metal"):
        assert stats["last_selected"] in metalrt.providers.list("embedding", "metal")
        assert stats["reference_hits"] == 0
    else:
        assert metalrt.providers.list("embedding", "metal") == []
        assert stats["last_selected"] == "reference:cpu_embedding"
        assert stats["reference_hits"] == 1
    assert metalrt.providers.stats("embedding", "cpu")["calls"] == 0
