"""The bench's memory read-bandwidth probe (bench/bandwidth.py) and the report lines
that set measured figures against it (bench/report.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import bandwidth, report  # noqa: E402


def test_probe_reads_the_buffer_on_the_threads_asked():
    result = bandwidth.probe(2, mib=16, repeats=2)
    assert result["threads"] == 2 and result["mib"] == 16
    assert 0 < result["gbps_median"] <= result["gbps"]
    assert len(result["passes"]) == 2 and max(result["passes"]) == result["gbps"]


def test_combined_probes_take_the_best_pass_of_all_and_keep_each_sample():
    start = {"threads": 2, "mib": 512, "gbps": 40.0, "gbps_median": 38.0, "passes": [36.0, 38.0, 40.0]}
    after = {"threads": 2, "mib": 512, "gbps": 64.0, "gbps_median": 63.0, "passes": [62.0, 63.0, 64.0]}
    combined = bandwidth.combine([("start", start), ("after generation", after)])
    assert combined["gbps"] == 64.0 and combined["gbps_median"] == 51.0   # median of 6 passes
    assert combined["samples"] == [{"when": "start", "gbps": 40.0, "gbps_median": 38.0},
                                   {"when": "after generation", "gbps": 64.0, "gbps_median": 63.0}]
    result = {"environment": {"bandwidth": combined}}
    assert report.probe_line(result) == (
        "Memory read-bandwidth probe (bench/bandwidth.py): 64.00 GB/s best, 51.00 median, 2 threads "
        "over 512 MiB; start: 40.00 best, 38.00 median; after generation: 64.00 best, 63.00 median")
    with pytest.raises(ValueError, match="at least one probe"):
        bandwidth.combine([])
    with pytest.raises(ValueError, match="threads and mib differ"):
        bandwidth.combine([("start", start), ("after", dict(after, threads=1))])


@pytest.mark.parametrize("threads, mib", [(0, 16), (1, 0)])
def test_probe_refuses_nothing_to_measure(threads, mib):
    with pytest.raises(ValueError, match="bandwidth probe needs threads >= 1 and mib >= 1"):
        bandwidth.probe(threads, mib)


def test_decode_line_sets_tokens_times_bytes_against_the_probe():
    result = {"environment": {"bandwidth": {"gbps": 10.0, "gbps_median": 9.0, "threads": 2, "mib": 512}},
              "generation": {"rows": [{"engine": "metalrt", "variant": "cpu", "decode_tps": {"median": 50.0}}]},
              "counters": {"decode": {"weight_bytes": 96_000_000}}}
    assert report.decode_bandwidth_line(result) == (
        "metalrt cpu decode: 50.0 tok/s x 96.00 MB of weights per token = 4.80 GB/s, 48% of the "
        "probe's 10.00 GB/s (2 threads; goal >= 60%)")
    del result["environment"]["bandwidth"]   # a result from before the probe existed
    assert report.decode_bandwidth_line(result) is None
