"""Load progress gates: ``metalrt.load(..., verbose=True)`` draws a tqdm bar on standard
error whose total is the weight files' bytes (every byte counted once, read or mapped)
with a rate; ``verbose=False`` and a standard error that is not a terminal print
nothing; the CLI shows the bar when its standard error is a pseudo-terminal."""
import errno
import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import time
import termios

import pytest
from tqdm import tqdm

import metalrt
from metalrt.server.launch import free_port, metalrt_command
from metalrt.tokenizer import Tokenizer
from tiny_models import TinyLlama, tokenizer_metadata, write_hf_dir, write_llama_gguf

# The last state of a bar: "Loading NAME: 100%|██████████| 60.2k/60.2k [00:00<00:00, 12.3MB/s]".
FINAL = re.compile(r"Loading (?P<name>\S+): 100%\|[^|]*\| (?P<n>\S+)/(?P<total>\S+) "
                   r"\[[0-9:]+<[0-9:]+, (?P<rate>[0-9.]+ ?[kMGT]?)B/s\]")


def _backend():
    return Tokenizer.from_gguf_metadata(tokenizer_metadata()).backend


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (path given to load, weight files whose bytes the bar counts)."""
    root = tmp_path_factory.mktemp("progress")
    gguf_path = root / "tiny.gguf"
    write_llama_gguf(gguf_path, TinyLlama(layers=2))
    sharded = root / "sharded"
    write_hf_dir(sharded, TinyLlama(layers=2, tied=False), _backend(), shards=3,
                 bf16=["model.norm.weight"])
    shards = sorted(str(p) for p in sharded.glob("*.safetensors"))
    return {"gguf": (str(gguf_path), [str(gguf_path)]), "sharded": (str(sharded), shards)}


@pytest.fixture
def recorded(monkeypatch):
    """(n, total) of every bar closed, exactly (the text rounds to 3 digits)."""
    from metalrt.loaders import load_progress

    closed = []

    class Recording(tqdm):
        def close(self):
            if not self.disable:
                closed.append((self.n, self.total))
            super().close()

    monkeypatch.setattr(load_progress, "tqdm", Recording)
    return closed


@pytest.mark.parametrize("mapped", ["0", "1"])
@pytest.mark.parametrize("name", ["gguf", "sharded"])
def test_verbose_bar_counts_every_weight_byte_with_a_rate(models, recorded, capsys, monkeypatch,
                                                          name, mapped):
    monkeypatch.setenv("METALRT_MMAP", mapped)   # read into memory (Linux) or mapped
    path, files = models[name]
    total = sum(os.path.getsize(f) for f in files)
    assert len(files) == (1 if name == "gguf" else 4)   # 3 shards + the bf16 file
    model, _ = metalrt.load(path, device="cpu", verbose=True)
    assert model.context_length == 256
    assert recorded == [(total, total)]
    final = capsys.readouterr().err.split("\r")[-1].strip()
    match = FINAL.fullmatch(final)
    assert match, final
    assert match["name"] == os.path.basename(path)
    assert match["n"] == match["total"] == tqdm.format_sizeof(total)
    assert float(match["rate"].rstrip("kMGT ")) > 0


@pytest.mark.parametrize("verbose", [False, None])
def test_no_bar_without_verbose_or_a_terminal(models, recorded, capsys, verbose):
    # Under pytest standard error is not a terminal: None draws nothing either.
    for path, _ in models.values():
        metalrt.load(path, device="cpu", verbose=verbose)
    assert capsys.readouterr().err == "" and recorded == []


def test_verbose_must_be_a_bool_or_none(models):
    with pytest.raises(TypeError, match=r"\[load\] verbose must be True, False or None, got 1"):
        metalrt.load(models["gguf"][0], device="cpu", verbose=1)


def _generate(path, stderr):
    script = shutil.which("metalrt")
    assert script, "the metalrt console script is not installed"
    return subprocess.Popen([script, "generate", "--model", path, "--prompt", "the",
                             "--max-tokens", "2", "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=stderr)


def _read_all(fd) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError as e:   # EIO: the child closed the terminal's last handle
            assert e.errno == errno.EIO
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _terminal():
    """(controller, terminal) of a pseudo-terminal 100 columns wide (a fresh pty has 0
    columns, where tqdm draws nothing)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    return controller, terminal


def _has_final_bar(err: str, nbytes: int) -> bool:
    total = tqdm.format_sizeof(nbytes)
    return any((m := FINAL.search(part)) and m["n"] == m["total"] == total
               for part in err.split("\r"))


def test_cli_shows_the_bar_on_a_terminal_only(models):
    path, files = models["gguf"]
    controller, terminal = _terminal()
    try:
        proc = _generate(path, terminal)
        os.close(terminal)
        err = _read_all(controller)
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=120) == 0, err
    finally:
        os.close(controller)
    assert _has_final_bar(err, os.path.getsize(files[0])), err
    assert "Generation: " in out and "Loading" not in out
    # Standard error a pipe: no bar.
    proc = _generate(path, subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b"", err
    assert b"Generation: " in out


def test_serve_startup_shows_the_bar_on_a_terminal(models):
    path, files = models["gguf"]
    controller, terminal = _terminal()
    proc = subprocess.Popen(metalrt_command(free_port(), "--model", path, "--device", "cpu"),
                            stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
    os.close(terminal)
    err, deadline = "", time.monotonic() + 120
    try:
        while not _has_final_bar(err, os.path.getsize(files[0])):
            assert time.monotonic() < deadline and proc.poll() is None, err
            if select.select([controller], [], [], 1.0)[0]:
                err += os.read(controller, 65536).decode("utf-8", "replace")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        os.close(controller)
