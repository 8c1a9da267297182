"""Writes the default GGUF as a plain Hugging Face directory for mlx-lm, run in the
peers' venv (it needs transformers and torch, which metalrt's venv lacks):

    python -m bench.export_hf MODEL.gguf OUT_DIR

No safetensors of SmolLM2 are reachable from this machine, so the GGUF is the only
source. transformers dequantises it on load but refuses to ``save_pretrained`` a
model it loaded from GGUF ("quantized with gguf and is not serializable"), so its
float32 weights are copied into a model built from the same config with the GGUF
quantisation entry removed. mlx-lm's llama reads ``rope_theta`` at the top level of
config.json (transformers 5 writes it only inside ``rope_parameters``), so it is
written there too; without it mlx-lm would fall back to a base of 10000.

The directory is written next to OUT_DIR and renamed into place when complete, with a
stamp (``metalrt-export.json``: the GGUF's path, size and modification time, the
transformers version, EXPORTER_VERSION, and the size of every file written) that a
later call compares: an export that matches is kept, one that does not (another GGUF,
another transformers or exporter, a file truncated or missing since) is written again.
The directory and its files get the modes of a plain mkdir and open (0777 and 0666
less the umask), not mkdtemp's 0700, so that other users of the venv can load it.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict

STAMP = "metalrt-export.json"
# Bumped whenever what export() writes changes, so that older exports are made again.
EXPORTER_VERSION = 2


def stamp(gguf: str) -> Dict:
    """What an export of ``gguf`` depends on: the GGUF (path, size, modification
    time), the transformers that writes it and this exporter's version."""
    import transformers

    info = os.stat(gguf)
    return {"gguf": os.path.abspath(gguf), "bytes": info.st_size, "mtime_ns": info.st_mtime_ns,
            "transformers": transformers.__version__, "exporter": EXPORTER_VERSION}


def file_sizes(folder: Path) -> Dict[str, int]:
    """{path relative to ``folder``: bytes} of every file below it but the stamp."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != STAMP}


def is_current(gguf: str, out: Path) -> bool:
    """Whether ``out`` holds an export of ``gguf`` by this exporter and transformers
    whose files are all there with the sizes its stamp records."""
    try:
        recorded = json.loads((out / STAMP).read_text())
        files = recorded.pop("files")
        return recorded == stamp(gguf) and files == file_sizes(out)
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return False


def _modes_of_umask(folder: Path) -> None:
    """Gives ``folder`` and what is below it the modes mkdir and open would (0777 and
    0666 less the umask) instead of mkdtemp's 0700 and a writer's 0600."""
    umask = os.umask(0)
    os.umask(umask)
    for p in [folder, *folder.rglob("*")]:
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)


def export(gguf: str, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.dirname(gguf), os.path.basename(gguf)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)

    config_path = out / "config.json"
    written = json.loads(config_path.read_text())
    rope = written.get("rope_parameters") or {}
    if "rope_theta" not in written and "rope_theta" in rope:
        written["rope_theta"] = rope["rope_theta"]
    config_path.write_text(json.dumps(written, indent=2))


def export_once(gguf: str, out: Path) -> None:
    """Writes the export of ``gguf`` at ``out`` unless the one there is current."""
    if is_current(gguf, out):
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(out.name + ".partial-*"):   # of an export that was killed
        shutil.rmtree(stale, ignore_errors=True)
    partial = Path(tempfile.mkdtemp(prefix=out.name + ".partial-", dir=out.parent))
    try:
        export(gguf, partial)
        (partial / STAMP).write_text(json.dumps(dict(stamp(gguf), files=file_sizes(partial))))
        _modes_of_umask(partial)
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


if __name__ == "__main__":
    export_once(sys.argv[1], Path(sys.argv[2]))
