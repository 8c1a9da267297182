"""The o200k vocabulary for openai-harmony, offline after one fetch: the ``litellm``
wheel (PyPI) ships ``o200k_base.tiktoken`` as tiktoken's cache file (named by the sha1
of its public URL). ``path()`` fetches that wheel once with pip (no dependencies, not
installed), keeps the one file in metalrt's cache (``harmony/``) and checks its sha256
against the one openai-harmony expects."""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from cache_lock import held
from metalrt.default_model import cache_dir

WHEEL = "litellm==1.110.2"
MEMBER = "litellm/litellm_core_utils/tokenizers/fb374d419588a4632f3f557e76b4b70aebbca790"
SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def path() -> Path:
    """``harmony/o200k_base.tiktoken`` in metalrt's cache, fetched when missing."""
    directory = cache_dir() / "harmony"
    target = directory / "o200k_base.tiktoken"
    with held("harmony"):
        if target.exists() and _sha256(target) == SHA256:
            return target
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "-d", tmp, WHEEL], check=True)
            (wheel,) = Path(tmp).glob("*.whl")
            with zipfile.ZipFile(wheel) as z:
                data = z.read(MEMBER)
        if hashlib.sha256(data).hexdigest() != SHA256:
            raise RuntimeError(f"{WHEEL}'s {MEMBER} is not o200k_base.tiktoken")
        directory.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".tmp{os.getpid()}")
        partial.write_bytes(data)
        partial.replace(target)
    return target
