"""GGUF files at released model shapes with seeded random weights, for the sizes bench:

    python -m bench.shapes_gguf llama-3.2-1b q4_k_m [--layers N] [--out-dir DIR]

Nothing is downloaded. Every quantized tensor is written directly as its GGUF blocks
(ggml's ``ggml-common.h`` layouts): random bytes for the packed quants and sub-block
scales, then each block's f16 super-scales set so that the weights have a mean near 0
and a standard deviation near WEIGHT_STD (no float copy of any weight is ever made: the
8B file is ~4.9 GB and needs about one tensor's bytes of memory to write). Norm weights
are ones and the MoE router is float32, as llama.cpp keeps them. The files are written
with the ``gguf`` package's writer, one tensor at a time.

Types follow llama.cpp's quantizer (``llama_tensor_get_type``, ``src/llama-quant.cpp``):
``q8_0`` is Q8_0 everywhere; ``q4_k_m`` is Q4_K with Q6_K for the output head (the
embedding when it is tied), and for ``attn_v`` and ``ffn_down`` on the layers of
``more_bits_layer``. Left out of Llama-3.x: the ``rope_freqs`` tensor of its RoPE
scaling (metalrt does not read it; it changes the angles, not the work).

The tokenizer is a byte-level BPE trained with the ``tokenizers`` library on the
bench's English text (deterministic), padded to the model's vocabulary with unused
tokens, so the embedding and head keep their released sizes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

WEIGHT_STD = 0.02       # the usual initialiser's standard deviation
BPE_VOCAB = 1024        # trained tokens; the rest of the vocabulary is padding
SEED = 20261204

# GGUF block types written here: (elements, bytes) per block (ggml-common.h).
BLOCKS = {"Q8_0": (32, 34), "Q4_K": (256, 144), "Q6_K": (256, 210)}


@dataclass(frozen=True)
class Shape:
    """A released model's shape (its config.json); ``layers`` may be cut to fit."""
    name: str
    arch: str                  # GGUF general.architecture
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int                   # dense FFN width (0 for MoE)
    vocab: int
    tied: bool
    rope_theta: float
    eps: float
    context: int
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    released_layers: int = 0   # the released depth when ``layers`` is cut, else 0


# Sources: each model's config.json on Hugging Face (meta-llama/Llama-3.2-1B,
# meta-llama/Llama-3.1-8B, Qwen/Qwen3-30B-A3B).
SHAPES = {
    "llama-3.2-1b": Shape("Llama-3.2-1B", "llama", 2048, 16, 32, 8, 64, 8192, 128256, True,
                          500000.0, 1e-5, 131072),
    "llama-3.1-8b": Shape("Llama-3.1-8B", "llama", 4096, 32, 32, 8, 128, 14336, 128256, False,
                          500000.0, 1e-5, 131072),
    "qwen3-30b-a3b": Shape("Qwen3-30B-A3B", "qwen3moe", 2048, 48, 32, 4, 128, 0, 151936, False,
                           1000000.0, 1e-6, 40960, experts=128, experts_used=8, expert_ffn=768),
}
QUANTS = ("q4_k_m", "q8_0")


def more_bits_layer(i: int, n: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers and every
    third one between them get the larger type in the _M mixes."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_plan(shape: Shape, quant: str) -> List[Tuple[str, Tuple[int, ...], str]]:
    """(GGUF name, numpy shape, type) of every tensor, in file order; type is a key of
    BLOCKS or "F32". ValueError for an unknown quant."""
    if quant not in QUANTS:
        raise ValueError(f"[shapes_gguf] quant must be one of {QUANTS}, got {quant!r}")
    base = "Q8_0" if quant == "q8_0" else "Q4_K"
    more = "Q8_0" if quant == "q8_0" else "Q6_K"
    h, d = shape.hidden, shape.head_dim
    n = shape.released_layers or shape.layers
    plan = [("token_embd.weight", (shape.vocab, h), more if shape.tied else base)]
    for i in range(shape.layers):
        big = more if more_bits_layer(i, n) else base
        p = f"blk.{i}."
        plan += [(p + "attn_norm.weight", (h,), "F32"),
                 (p + "attn_q.weight", (shape.heads * d, h), base),
                 (p + "attn_k.weight", (shape.kv_heads * d, h), base),
                 (p + "attn_v.weight", (shape.kv_heads * d, h), big),
                 (p + "attn_output.weight", (h, shape.heads * d), base),
                 (p + "ffn_norm.weight", (h,), "F32")]
        if shape.arch == "qwen3moe":
            e, f = shape.experts, shape.expert_ffn
            plan += [(p + "attn_q_norm.weight", (d,), "F32"), (p + "attn_k_norm.weight", (d,), "F32"),
                     (p + "ffn_gate_inp.weight", (e, h), "F32"),
                     (p + "ffn_gate_exps.weight", (e, f, h), base),
                     (p + "ffn_up_exps.weight", (e, f, h), base),
                     (p + "ffn_down_exps.weight", (e, h, f), big)]
        else:
            plan += [(p + "ffn_gate.weight", (shape.ffn, h), base),
                     (p + "ffn_up.weight", (shape.ffn, h), base),
                     (p + "ffn_down.weight", (h, shape.ffn), big)]
    plan.append(("output_norm.weight", (h,), "F32"))
    if not shape.tied:
        plan.append(("output.weight", (shape.vocab, h), more))
    return plan


def _f16_field(blocks: np.ndarray, offset: int, value: float) -> None:
    blocks[:, offset:offset + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)


def random_blocks(kind: str, elements: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [blocks, block bytes] of ``kind`` for ``elements`` weights (a multiple of
    the block size): random quants and sub-block scales, super-scales set for a mean
    near 0 and a standard deviation near WEIGHT_STD. ValueError for another count."""
    per_block, nbytes = BLOCKS[kind]
    if elements % per_block:
        raise ValueError(f"[shapes_gguf] {kind} needs a multiple of {per_block} elements, "
                         f"got {elements}")
    blocks = np.frombuffer(bytearray(rng.bytes(elements // per_block * nbytes)),
                           np.uint8).reshape(-1, nbytes)
    if kind == "Q8_0":
        # w = d * q, q uniform int8: standard deviation 73.9 d.
        _f16_field(blocks, 0, WEIGHT_STD / 73.9)
    elif kind == "Q4_K":
        # w = d * s * q - dmin * m, q in 0..15, s and m uniform 6-bit: the mean is 0 for
        # dmin = 7.5 d (E[q] = 7.5, E[s] = E[m]), the standard deviation then 258 d.
        d = WEIGHT_STD / 258.0
        _f16_field(blocks, 0, d)
        _f16_field(blocks, 2, 7.5 * d)
    else:
        # Q6_K: ql[128] qh[64] scales[16] (int8) d; w = d * s * (q - 32), q in 0..63.
        # Sub-block scales kept in -16..15 so that d stays a normal f16.
        blocks[:, 192:208] = (blocks[:, 192:208] % 32).astype(np.int8) - 16
        _f16_field(blocks, 208, WEIGHT_STD / (9.23 * 18.5))
    return blocks


def _float_tensor(name: str, shape: Tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name.endswith("ffn_gate_inp.weight"):
        return rng.normal(0.0, WEIGHT_STD, shape).astype(np.float32)
    return np.ones(shape, np.float32)


def tokenizer_vocab(vocab: int) -> Tuple[List[str], List[str]]:
    """(tokens, merges) of a byte-level BPE trained on the bench's text, padded with
    unused tokens to ``vocab`` entries. ValueError when ``vocab`` is below BPE_VOCAB."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from .__main__ import TEXT

    if vocab < BPE_VOCAB:
        raise ValueError(f"[shapes_gguf] vocab must be >= {BPE_VOCAB}, got {vocab}")
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tok.train_from_iterator([TEXT] * 4, trainer)
    bpe = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(bpe["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]
    tokens += [f"<|unused_{i}|>" for i in range(vocab - len(tokens))]
    return tokens, merges


def default_dir() -> Path:
    from metalrt.default_model import cache_dir
    return cache_dir() / "shapes-gguf"


def file_name(key: str, quant: str, layers: Optional[int] = None) -> str:
    cut = f"-{layers}l" if layers else ""
    return f"{key}{cut}-{quant}-random.gguf"


def shape_of(key: str, layers: Optional[int] = None) -> Shape:
    """SHAPES[key], cut to ``layers`` when given. ValueError for an unknown key or a
    cut outside 1..released layers."""
    if key not in SHAPES:
        raise ValueError(f"[shapes_gguf] unknown model {key!r}; known: {', '.join(SHAPES)}")
    shape = SHAPES[key]
    if layers is None or layers == shape.layers:
        return shape
    if not 1 <= layers < shape.layers:
        raise ValueError(f"[shapes_gguf] {key} has {shape.layers} layers; a cut must be "
                         f"1..{shape.layers - 1}, got {layers}")
    return replace(shape, layers=layers, released_layers=shape.layers)


def write(path: Path, shape: Shape, quant: str, seed: int = SEED) -> Path:
    """Writes the GGUF of ``shape`` at ``quant`` to ``path`` (through a temporary file
    renamed at the end, so a stopped write leaves no file). Returns ``path``."""
    import gguf

    rng = np.random.default_rng(seed)
    plan = tensor_plan(shape, quant)
    tokens, merges = tokenizer_vocab(shape.vocab)
    tmp = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(tmp), shape.arch)
    a = shape.arch
    w.add_name(f"{shape.name} shape, random weights" +
               (f", {shape.layers} of {shape.released_layers} layers" if shape.released_layers else ""))
    w.add_file_type({"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M}[quant])
    w.add_uint32(f"{a}.context_length", shape.context)
    w.add_uint32(f"{a}.embedding_length", shape.hidden)
    w.add_uint32(f"{a}.block_count", shape.layers)
    w.add_uint32(f"{a}.attention.head_count", shape.heads)
    w.add_uint32(f"{a}.attention.head_count_kv", shape.kv_heads)
    w.add_uint32(f"{a}.attention.key_length", shape.head_dim)
    w.add_uint32(f"{a}.attention.value_length", shape.head_dim)
    w.add_uint32(f"{a}.rope.dimension_count", shape.head_dim)
    w.add_float32(f"{a}.rope.freq_base", shape.rope_theta)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", shape.eps)
    w.add_uint32(f"{a}.vocab_size", shape.vocab)
    if shape.ffn:
        w.add_uint32(f"{a}.feed_forward_length", shape.ffn)
    if shape.experts:
        w.add_uint32(f"{a}.expert_count", shape.experts)
        w.add_uint32(f"{a}.expert_used_count", shape.experts_used)
        w.add_uint32(f"{a}.expert_feed_forward_length", shape.expert_ffn)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe" if a == "llama" else "qwen2")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    # 1 normal, 3 control (the two specials), 5 unused (the padding).
    types = [3 if t.startswith("<|") and not t.startswith("<|unused_") else 1 for t in tokens]
    types = [5 if t.startswith("<|unused_") else k for t, k in zip(tokens, types)]
    w.add_token_types(types)
    w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    w.add_eos_token_id(tokens.index("<|end_of_text|>"))
    w.add_add_bos_token(False)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for name, dims, kind in plan:
        count = int(np.prod(dims))
        if kind == "F32":
            w.add_tensor_info(name, dims, np.dtype(np.float32), count * 4)
        else:
            per, nbytes = BLOCKS[kind]
            w.add_tensor_info(name, (*dims[:-1], dims[-1] // per * nbytes), np.dtype(np.uint8),
                              count // per * nbytes, raw_dtype=gguf.GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, dims, kind in plan:
        data = (_float_tensor(name, dims, rng) if kind == "F32"
                else random_blocks(kind, int(np.prod(dims)), rng))
        w.write_tensor_data(data)
    w.close()
    os.replace(tmp, path)
    return path


def ensure(key: str, quant: str, layers: Optional[int] = None,
           out_dir: Optional[Path] = None) -> Path:
    """The path of the file of ``key`` at ``quant`` (cut to ``layers``), written first
    when it is not there yet."""
    shape = shape_of(key, layers)
    path = (out_dir or default_dir()) / file_name(key, quant, layers if shape.released_layers else None)
    if not path.exists():
        print(f"bench: writing {path}", file=sys.stderr)
        write(path, shape, quant)
    return path


def file_bytes(shape: Shape, quant: str) -> Dict[str, int]:
    """Tensor bytes of the file by tensor type."""
    out: Dict[str, int] = {}
    for _, dims, kind in tensor_plan(shape, quant):
        count = int(np.prod(dims))
        size = count * 4 if kind == "F32" else count // BLOCKS[kind][0] * BLOCKS[kind][1]
        out[kind] = out.get(kind, 0) + size
    return out


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.shapes_gguf", description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=sorted(SHAPES))
    p.add_argument("quant", choices=QUANTS)
    p.add_argument("--layers", type=int, default=None, help="cut to this many layers")
    p.add_argument("--out-dir", type=Path, default=None)
    args = p.parse_args(argv)
    print(ensure(args.model, args.quant, args.layers, args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
