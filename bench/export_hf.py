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
stamp (``metalrt-export.json``: the GGUF's path, size and modification time, and the
transformers version) that a later call compares: an export that matches is kept, one
that does not (another GGUF, another transformers, an interrupted older layout) is
written again.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

STAMP = "metalrt-export.json"


def stamp(gguf: str) -> dict:
    import transformers

    info = os.stat(gguf)
    return {"gguf": os.path.abspath(gguf), "bytes": info.st_size, "mtime_ns": info.st_mtime_ns,
            "transformers": transformers.__version__}


def is_current(gguf: str, out: Path) -> bool:
    try:
        return json.loads((out / STAMP).read_text()) == stamp(gguf)
    except (OSError, ValueError):
        return False


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
        (partial / STAMP).write_text(json.dumps(stamp(gguf)))
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


if __name__ == "__main__":
    export_once(sys.argv[1], Path(sys.argv[2]))
