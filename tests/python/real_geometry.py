"""Random-weight twins of the headline hybrid MoE checkpoints at their released per-layer
geometry: transformers' default ``Qwen3_5MoeTextConfig()`` (Qwen3.5/3.6-35B-A3B) and
``Qwen3NextConfig()`` (Qwen3-Next-80B-A3B) -- hidden 2048, 16 query / 2 KV heads of
head_dim 256 with partial RoPE 0.25 and the output gate, GDN 16 key / 32 value heads of
128, expert intermediate 512 and the shared expert, top-8 / top-10 routing -- cut to 4
layers (3 GDN + 1 full attention, the released pattern), 32 experts and a vocabulary of
VOCAB (a byte-level BPE made of SmolLM2's first merges, of the kind llama.cpp's converter
takes). About 0.54 G parameters (2.2 GB float32) each.

Made once per machine under ``<metalrt cache>/real-geometry/<name>-<config hash>/``
(never committed), each part behind its own cache lock and renamed into place when
complete:

* ``hf``: the Hugging Face directory, with transformers' float32 logits of PROMPTS and
  its greedy continuation of the first (``transformers.npz``);
* ``mlx_4bit``: ``mlx_lm.convert -q`` (4 bits, group 64), with mlx-lm's (``mlx-lm.npz``).

The peers run in the bench's peers venv (``quant_fixtures``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

import cache_lock
import quant_fixtures
import tiny_hybrid
from metalrt.default_model import cache_dir, default_model_path
from real_geometry_reference import GREEDY_STEPS, PROMPT_LENGTHS, VOCAB, prompt, reference_loop

LAYERS = ["linear_attention"] * 3 + ["full_attention"]
_CUT = dict(num_hidden_layers=4, layer_types=LAYERS, num_experts=32, vocab_size=VOCAB)
CONFIGS = {"qwen3_5_moe": ("Qwen3_5MoeTextConfig", _CUT), "qwen3_next": ("Qwen3NextConfig", _CUT)}
REFERENCE = {"hf": "transformers.npz", "mlx_4bit": "mlx-lm.npz"}
_MODEL = {"hf": "", "mlx_4bit": "mlx_4bit"}


def _directory(name: str) -> Path:
    digest = hashlib.sha256(json.dumps(CONFIGS[name], sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "real-geometry" / f"{name}-{digest}"


def fixture(name: str, part: str) -> tuple[Path, dict]:
    """(model path, reference) of ``part`` ("hf" or "mlx_4bit") of twin
    ``name``; the reference holds ``logits_<L>`` [L, VOCAB] float32 for each of
    PROMPT_LENGTHS and ``greedy`` (GREEDY_STEPS ids after the 40-token prompt).
    Raises quant_fixtures.FixtureUnavailable when a peer cannot be installed."""
    root = _directory(name)
    target = root / part
    with cache_lock.held(f"real-geometry/{root.name}-{part}"):
        if not target.exists():
            hf = None if part == "hf" else fixture(name, "hf")[0]
            root.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(dir=root, prefix=f"{part}.partial-"))
            try:
                _BUILD[part](name, hf, partial)
                os.replace(partial, target)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    with np.load(target / REFERENCE[part]) as ref:
        return target / _MODEL[part], {k: ref[k] for k in ref.files}


def save_tokenizer(directory: Path) -> None:
    """A byte-level BPE of VOCAB tokens: SmolLM2's 3 control tokens, the 256 byte
    symbols and the tokens of its first merges (read from the default model's GGUF;
    BPE merges only build on earlier ones, so the prefix is a whole tokenizer)."""
    import gguf
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    field = gguf.GGUFReader(str(default_model_path())).fields["tokenizer.ggml.merges"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = []
    for index in field.data:
        if len(vocab) == VOCAB:
            break
        a, b = bytes(field.parts[index]).decode().split(" ")
        if a in vocab and b in vocab and a + b not in vocab:
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    tok = tokenizers.Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}))


def _hf(name: str, _, out: Path) -> None:
    import torch
    import transformers as tf

    cls, kwargs = CONFIGS[name]
    torch.manual_seed(31)
    model = tf.AutoModelForCausalLM.from_config(getattr(tf, cls)(**kwargs), dtype=torch.float32)
    model.eval()
    tiny_hybrid.randomize(model, 32)
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(out)
    state = {"cache": None}

    def step(ids, fresh):
        with torch.no_grad():
            if fresh:
                state["cache"] = None
            r = model(torch.tensor([ids]), past_key_values=state["cache"], use_cache=True)
            state["cache"] = r.past_key_values
            return r.logits[0].numpy()
    np.savez(out / REFERENCE["hf"], **reference_loop(step))


_PEER_REFERENCE = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import real_geometry_reference as r
np.savez(sys.argv[2], **r.run(sys.argv[1], sys.argv[4]))
"""


def _mlx_4bit(name: str, hf: Path, out: Path) -> None:
    python = quant_fixtures.peer_python("mlx")
    source = _as_released_layout(hf, out / "source")
    quant_fixtures.run_in_peer(python, quant_fixtures.MLX_CONVERT, source, out / _MODEL["mlx_4bit"], 4, 64)
    shutil.rmtree(out / "source", ignore_errors=True)
    _peer_reference("mlx", out / _MODEL["mlx_4bit"], out / REFERENCE["mlx_4bit"])


def _as_released_layout(hf: Path, target: Path) -> Path:
    """``hf`` as the released Qwen3.5-MoE checkpoints store it, which is what mlx-lm
    reads: ``model_type`` ``qwen3_5_moe`` with the text model's config as ``text_config``
    (mlx-lm does not know transformers' text-only ``qwen3_5_moe_text``) and each layer's
    experts fused, ``mlp.experts.gate_up_proj`` [E, 2I, H] and ``mlp.experts.down_proj``
    [E, H, I] (transformers saves them one expert at a time); RoPE's ``rope_theta`` and
    ``partial_rotary_factor`` also flat, as the released configs have them (mlx-lm's
    Qwen3-Next reads them there). Links to ``hf``'s other files."""
    from safetensors.numpy import load_file, save_file

    config = json.loads((hf / "config.json").read_text())
    target.mkdir()
    for f in hf.iterdir():
        if f.name != "config.json" and (f.suffix != ".safetensors" or config["model_type"] != "qwen3_5_moe_text"):
            (target / f.name).symlink_to(f)
    rope = {k: config["rope_parameters"][k] for k in ("rope_theta", "partial_rotary_factor")}
    if config["model_type"] != "qwen3_5_moe_text":
        (target / "config.json").write_text(json.dumps(dict(config, **rope)))
        return target
    text = dict(config, **rope)
    (target / "config.json").write_text(json.dumps(
        {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
         "tie_word_embeddings": config["tie_word_embeddings"], "text_config": text}))
    tensors = {}
    for shard in sorted(hf.glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}.mlp.experts."
        experts = range(config["num_experts"])
        parts = {proj: np.stack([tensors.pop(f"{p}{e}.{proj}.weight") for e in experts])
                 for proj in ("gate_proj", "up_proj", "down_proj")}
        tensors[p + "gate_up_proj"] = np.concatenate([parts["gate_proj"], parts["up_proj"]], axis=1)
        tensors[p + "down_proj"] = parts["down_proj"]
    save_file(tensors, str(target / "model.safetensors"))
    return target


def _peer_reference(peer: str, model: Path, target: Path) -> None:
    quant_fixtures.run_in_peer(quant_fixtures.peer_python(peer), _PEER_REFERENCE, model, target,
                               Path(__file__).parent, peer)


_BUILD = {"hf": _hf, "mlx_4bit": _mlx_4bit}
