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
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


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


if __name__ == "__main__":
    export(sys.argv[1], Path(sys.argv[2]))
