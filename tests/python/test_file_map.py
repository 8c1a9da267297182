"""The model files' bytes (metalrt.loaders.file_map): the file's exact bytes, read-only,
in 2 MB-aligned memory advised for huge pages on Linux, a file mapping with
METALRT_MMAP=1, and errors for what cannot be mapped."""
import mmap
import os
import sys

import numpy as np
import pytest

from linux_memory import smaps_region, thp_eligible, thp_mode
from metalrt import huge_pages
from metalrt.loaders import file_map


@pytest.fixture
def blob(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, size=(5 << 20) + 123, dtype=np.uint8)
    path = tmp_path / "weights.bin"
    data.tofile(path)
    return str(path), data


@pytest.mark.parametrize("mmap_env", ["", "0", "1"])
def test_the_bytes_are_the_files_and_read_only(blob, monkeypatch, mmap_env):
    path, data = blob
    monkeypatch.setenv("METALRT_MMAP", mmap_env)
    view = file_map.map_file(path)
    assert view.readonly
    assert isinstance(view.obj, mmap.mmap)   # the owner the zero-copy stacking looks for
    array = np.frombuffer(view, np.uint8)
    np.testing.assert_array_equal(array, data)
    with pytest.raises(ValueError):
        array[0] = 1


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"),
                    reason="huge-page memory is the Linux path; elsewhere the file is mapped")
def test_linux_reads_into_aligned_anonymous_memory_advised_for_huge_pages(blob, monkeypatch):
    path, _ = blob
    monkeypatch.delenv("METALRT_MMAP", raising=False)
    view = file_map.map_file(path)
    address = np.frombuffer(view, np.uint8).ctypes.data
    assert address % huge_pages.HUGE_PAGE == 0
    assert path not in "".join(smaps_region(address))   # not the file's pages
    # THPeligible: whether the kernel may back the region with huge pages, which our
    # madvise decides unless THP is off altogether.
    assert thp_eligible(address) == ("0" if thp_mode() == "never" else "1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_metalrt_mmap_1_maps_the_file(blob, monkeypatch):
    path, _ = blob
    monkeypatch.setenv("METALRT_MMAP", "1")
    view = file_map.map_file(path)
    assert path in "".join(smaps_region(np.frombuffer(view, np.uint8).ctypes.data))


def test_a_bad_metalrt_mmap_is_a_value_error(blob, monkeypatch):
    monkeypatch.setenv("METALRT_MMAP", "yes")
    with pytest.raises(ValueError, match="METALRT_MMAP must be 0 or 1"):
        file_map.map_file(blob[0])


def test_an_empty_file_is_a_value_error(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        file_map.map_file(str(path))


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        file_map.map_file(os.path.join(tmp_path, "missing.bin"))
