"""Small model files written by tests: a byte-level BPE vocabulary, a Llama GGUF written
with the ``gguf`` package's writer, and Hugging Face directories (safetensors +
tokenizer.json). The weights are random; the writers return them in Hugging Face
(float32) form so a test can compare what a loader reads against what was written."""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

import gguf
import numpy as np
from safetensors.numpy import save_file
from tokenizers import pre_tokenizers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def byte_level_vocab() -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, llama.cpp token types): 3 control tokens, the 256 byte-level
    symbols, then one token per merge."""
    tokens = SPECIAL_TOKENS + sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens += ["".join(m.split(" ")) for m in MERGES]
    types = [3] * len(SPECIAL_TOKENS) + [1] * (len(tokens) - len(SPECIAL_TOKENS))
    return tokens, MERGES, types


def tokenizer_metadata(**overrides) -> dict:
    """GGUF ``tokenizer.ggml.*`` metadata of the byte-level vocabulary, with overrides."""
    tokens, merges, types = byte_level_vocab()
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2, "tokenizer.chat_template": CHAT_TEMPLATE}
    meta.update(overrides)
    return meta


@dataclass
class TinyLlama:
    """A small Llama-family model: ``arch`` "llama", "qwen2" (Q/K/V biases) or "qwen3"
    (Q/K head norms)."""

    arch: str = "llama"
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 96
    tied: bool = True
    seed: int = 0
    vocab: int = field(default_factory=lambda: len(byte_level_vocab()[0]))

    def hf_weights(self) -> dict[str, np.ndarray]:
        """Random float32 weights under their ``transformers`` names."""
        rng = np.random.default_rng(self.seed)
        shapes = {"model.embed_tokens.weight": (self.vocab, self.hidden),
                  "model.norm.weight": (self.hidden,)}
        if not self.tied:
            shapes["lm_head.weight"] = (self.vocab, self.hidden)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            shapes.update({
                p + "input_layernorm.weight": (self.hidden,),
                p + "post_attention_layernorm.weight": (self.hidden,),
                p + "self_attn.q_proj.weight": (self.heads * self.head_dim, self.hidden),
                p + "self_attn.k_proj.weight": (self.kv_heads * self.head_dim, self.hidden),
                p + "self_attn.v_proj.weight": (self.kv_heads * self.head_dim, self.hidden),
                p + "self_attn.o_proj.weight": (self.hidden, self.heads * self.head_dim),
                p + "mlp.gate_proj.weight": (self.ffn, self.hidden),
                p + "mlp.up_proj.weight": (self.ffn, self.hidden),
                p + "mlp.down_proj.weight": (self.hidden, self.ffn),
            })
            if self.arch == "qwen2":
                shapes.update({p + f"self_attn.{x}_proj.bias": (n * self.head_dim,) for x, n in
                               (("q", self.heads), ("k", self.kv_heads), ("v", self.kv_heads))})
            if self.arch == "qwen3":
                shapes.update({p + f"self_attn.{x}_norm.weight": (self.head_dim,) for x in "qk"})
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}

    def hf_config(self) -> dict:
        return {"model_type": self.arch,
                "vocab_size": self.vocab, "hidden_size": self.hidden,
                "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
                "intermediate_size": self.ffn, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
                "max_position_embeddings": 256, "tie_word_embeddings": self.tied,
                "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}


def llama_cpp_qk_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's Q/K row order built element by element: in each head of d rows, GGUF
    row 2i holds HF row i and GGUF row 2i+1 holds HF row d/2 + i."""
    d = w.shape[0] // n_heads
    out = np.empty_like(w)
    for h in range(n_heads):
        for i in range(d // 2):
            out[h * d + 2 * i] = w[h * d + i]
            out[h * d + 2 * i + 1] = w[h * d + d // 2 + i]
    return out


_GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}


def gguf_name(hf: str) -> str:
    """The llama.cpp name of a ``transformers`` Llama tensor name (written out here, in
    the test, independently of the loader's table)."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
           "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    _, _, layer, rest = hf.split(".", 3)
    module, suffix = rest.rsplit(".", 1)
    return f"blk.{layer}.{_GGUF_NAMES[module]}.{suffix}"


def write_llama_gguf(path, model: TinyLlama, *, arch: str | None = None, drop=(), raw=None,
                     extra=None, metadata=None) -> dict[str, np.ndarray]:
    """Write ``model`` as a GGUF of ``arch`` (default ``model.arch``; F32 tensors, Q/K
    weight rows in llama.cpp's order for Llama) with a byte-level BPE tokenizer. ``drop``: GGUF tensor names to leave out; ``raw``: GGUF
    name → (uint8 bytes [rows, bytes_per_row], GGMLQuantizationType) replacing a
    tensor; ``extra``: GGUF name → float32 array added; ``metadata``: extra string/int
    keys. Returns the HF-named weights written."""
    weights = model.hf_weights()
    tokens, merges, types = byte_level_vocab()
    w = gguf.GGUFWriter(os.fspath(path), arch or model.arch)
    w.add_block_count(model.layers)
    w.add_context_length(256)
    w.add_embedding_length(model.hidden)
    w.add_feed_forward_length(model.ffn)
    w.add_head_count(model.heads)
    w.add_head_count_kv(model.kv_heads)
    w.add_key_length(model.head_dim)
    w.add_value_length(model.head_dim)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(model.vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)
    for key, value in (metadata or {}).items():
        (w.add_string if isinstance(value, str) else w.add_uint32)(key, value)
    raw = raw or {}
    for hf, value in weights.items():
        name = gguf_name(hf)
        if name in drop:
            continue
        if name in raw:
            data, qtype = raw[name]
            w.add_tensor(name, data, raw_dtype=qtype)
            continue
        if model.arch == "llama" and name.endswith(".attn_q.weight"):
            value = llama_cpp_qk_rows(value, model.heads)
        elif model.arch == "llama" and name.endswith(".attn_k.weight"):
            value = llama_cpp_qk_rows(value, model.kv_heads)
        w.add_tensor(name, value)
    for name, value in (extra or {}).items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights


def write_bf16_safetensors(path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file of BF16 tensors (given as float32 whose low 16 bits are zero),
    written from the format's definition: u64 header size, JSON header, raw data."""
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        blob = (value.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_hf_dir(directory, model: TinyLlama, tokenizer_backend, *, shards: int = 1,
                 bf16=(), f16=()) -> dict[str, np.ndarray]:
    """A Hugging Face model directory for ``model``: config.json, safetensors (split into
    ``shards`` files with an index when > 1; names in ``bf16``/``f16`` stored in those
    dtypes, rounded accordingly), tokenizer.json and tokenizer_config.json. Returns the
    float32 values a loader must produce."""
    os.makedirs(directory, exist_ok=True)
    weights = model.hf_weights()
    for name in bf16:  # round to bf16 by dropping the low bits, so the value is exact
        weights[name] = (weights[name].view(np.uint32) & 0xFFFF0000).view(np.float32)
    for name in f16:
        weights[name] = weights[name].astype(np.float16).astype(np.float32)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(model.hf_config(), f)
    names = list(weights)
    groups = [names[i::shards] for i in range(shards)]
    weight_map = {}
    for k, group in enumerate(groups):
        filename = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        plain = {n: (weights[n].astype(np.float16) if n in f16 else weights[n])
                 for n in group if n not in bf16}
        save_file(plain, os.path.join(directory, filename))
        weight_map.update({n: filename for n in plain})
        if any(n in bf16 for n in group):
            bf_name = f"bf16-{k + 1:05d}.safetensors"
            write_bf16_safetensors(os.path.join(directory, bf_name),
                                   {n: weights[n] for n in group if n in bf16})
            weight_map.update({n: bf_name for n in group if n in bf16})
    if shards > 1 or bf16:
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    tokenizer_backend.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
                   "chat_template": CHAT_TEMPLATE}, f)
    return weights
