"""metalrt.providers: the registry's view from Python."""
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
