"""The one-time probe of the Metal device's simdgroup_matrix lane layout
(thread_elements(), which MSL leaves unspecified): the prefill attention kernel serves
only where the device lays the 8x8 matrix out as it assumes (metal/simdgroup_layout.h);
elsewhere the reference tier serves prefill and `metalrt doctor` says why. The sim
implements the kernel's layout; a mismatch is forced through a test hook that gives the
check another assumed layout."""
import numpy as np
import pytest

import metalrt
from conftest import assert_matches
from metalrt import _metalrt
from test_paged_attention import run_case

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")

# Lane l holds elements 2l and 2l + 1 of the row-major matrix: the kernel's layout
# agrees for lanes 0 and 1 only (lane 2 holds row 1, columns 0 and 1).
ROW_MAJOR_BY_LANE = list(range(64))
MISMATCH = ("the device's 8x8 simdgroup_matrix lane layout differs from the prefill kernel's: "
            "lane 2 element 0 holds (row 1, column 0) after simdgroup_load, the kernel assumes "
            "(row 0, column 4) (metal/simdgroup_layout.h)")
PREFILL = dict(heads=4, kv_heads=2, head_dim=64, block_size=16, q_lens=[9, 1], seq_lens=[9, 20])
DECODE = dict(heads=4, kv_heads=2, head_dim=64, block_size=16, q_lens=[1, 1], seq_lens=[9, 20])


@pytest.fixture
def mismatched():
    _metalrt._set_assumed_simdgroup_layout(ROW_MAJOR_BY_LANE)
    try:
        yield
    finally:
        _metalrt._set_assumed_simdgroup_layout(None)


def attention_stats(case):
    metalrt.providers.reset_stats()
    result, expected = run_case("metal", "float32", **case)
    assert_matches(result, expected, "float32")
    return metalrt.providers.stats("paged_attention", "metal")


def test_the_sim_lays_the_matrix_out_as_the_prefill_kernel_assumes():
    assert _metalrt._metal_device_facts()["prefill_attention_decline"] == ""
    assert metalrt.doctor()["metal_prefill_attention"] == "native kernel"
    [native] = metalrt.providers.list("paged_attention", "metal")
    assert attention_stats(PREFILL) == {"last_selected": native, "calls": 1, "declines": 0, "reference_hits": 0}


def test_a_mismatch_declines_prefill_to_the_reference_tier(mismatched):
    assert _metalrt._metal_device_facts()["prefill_attention_decline"] == MISMATCH
    assert metalrt.doctor()["metal_prefill_attention"] == "reference tier: " + MISMATCH
    stats = attention_stats(PREFILL)
    assert stats["reference_hits"] == 1 and stats["last_selected"].startswith("reference:")
    # The Metal provider declined, then the CPU providers ahead of the one that served.
    cpu = metalrt.providers.list("paged_attention", "cpu")
    assert stats["declines"] == 1 + cpu.index(stats["last_selected"].removeprefix("reference:"))
    # Decode batches do not use the prefill kernel: still native.
    [native] = metalrt.providers.list("paged_attention", "metal")
    assert attention_stats(DECODE) == {"last_selected": native, "calls": 1, "declines": 0, "reference_hits": 0}


@pytest.mark.parametrize("layout, message", [
    (list(range(63)), "a layout has 64 elements, got 63"),
    (list(range(63)) + [64], "element indices are 0..63, got 64"),
])
def test_a_malformed_layout_is_refused(layout, message):
    with pytest.raises(ValueError, match=rf"\[simdgroup_layout_probe\] {message}"):
        _metalrt._set_assumed_simdgroup_layout(layout)
