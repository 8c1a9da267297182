"""Load a GGUF model file as a Hugging Face config + state dict whose tensors stay in
the file: block types as ``QuantizedWeight`` (their block bytes, views of the one
memory mapping of the file), F32 and F16 as numpy views in their own dtype, BF16
widened to float32.

Architectures: Llama (SmolLM2, Llama 3.x: ``rope_freqs.weight``, llama.cpp's table of
per-frequency RoPE factors, is read as ``rope_freqs.weight``), Qwen2 (Q/K/V biases), Qwen3 (per-head Q/K
RMSNorm), Qwen3-MoE (``qwen3moe``: stacked expert tensors, see ``gguf_moe``), Qwen3-Next,
Qwen3.5 and Qwen3.5-MoE (``qwen3next``, ``qwen35``, ``qwen35moe``: Gated-DeltaNet layers,
see ``gguf_hybrid``), Gemma 3 text (``gemma3``: sandwich norms, sliding-window layers,
see ``gguf_gemma3``), gpt-oss (``gpt-oss``: sinks, biased router and experts, MXFP4
expert stacks, see ``gguf_gpt_oss``), Phi-3 / Phi-4 (``phi3``: fused Q/K/V and gate|up,
partial RoPE, LongRoPE factor tensors, see ``gguf_phi3``). Names follow ``transformers``
(``model.layers.0.self_attn.q_proj.weight``).
Llama GGUF files store the Q/K projection rows permuted for interleaved (GPT-J) RoPE —
llama.cpp's ``convert_hf_to_gguf.py`` moves row ``i`` of each head's second half next
to row ``i`` of its first half; Qwen files are converted without it. Putting the rows
back would copy every Q/K matrix, so they are kept as stored and the config says
``rope_interleaved: True``: interleaved RoPE on the permuted rows gives the permuted
rows of half-split RoPE on the original ones, and since Q and K rows are permuted
alike within every head, the attention scores are those of the Hugging Face model.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as T

from . import load_progress
from .gguf_file import GGUFFile
from .gguf_gemma3 import LAYER_NAMES as GEMMA3_NAMES, READ_FIXES as GEMMA3_FIXES
from .gguf_gemma3 import gemma3_config, gemma3_layer_shapes
from .gguf_gpt_oss import LAYER_NAMES as GPT_OSS_NAMES, gpt_oss_config, gpt_oss_layer_shapes
from .gguf_hybrid import (LAYER_TENSORS, NEXTN_TENSORS, READ_FIXES as HYBRID_FIXES,
                          hybrid_config, hybrid_layer_shapes, shared_expert_shapes)
from .gguf_moe import LAYER_NAMES, moe_config, moe_layer_shapes
from .gguf_phi3 import (FACTOR_TENSORS as PHI3_FACTORS, LAYER_NAMES as PHI3_NAMES, phi3_config,
                        phi3_layer_shapes)
from .quants import (ACTIVATION_ONLY, FLOAT_TYPES, GGUF_FORMATS, SUPPORTED_TYPES, QuantizedWeight,
                     bf16_to_float32, dequantize, row_bytes)


@dataclass(frozen=True)
class Architecture:
    hf_class: str
    permuted_qk: bool       # Q/K rows stored for interleaved RoPE (llama.cpp's Llama converter)
    qkv_bias: bool = False  # biases on the Q/K/V projections (Qwen2)
    qk_norm: bool = False   # RMSNorm over each query and key head (Qwen3)
    model_type: str = ""    # the Hugging Face model_type when it differs from the GGUF name
    moe: bool = False       # sparse MoE blocks instead of the dense MLP (gguf_moe)
    hybrid: bool = False    # Gated-DeltaNet and gated-attention layers (gguf_hybrid)
    v_heads_tiled: bool = False   # Qwen3.5's GDN tensors, value heads tiled (gguf_hybrid)
    gemma3: bool = False    # Gemma 3's sandwich norms and window metadata (gguf_gemma3)
    gpt_oss: bool = False   # gpt-oss's sinks, biased router and experts (gguf_gpt_oss)
    phi3: bool = False      # Phi-3's fused projections and LongRoPE tensors (gguf_phi3)
    # GGUF layer tensor -> Hugging Face name where this family differs from _LAYER_NAMES.
    layer_names: dict = field(default_factory=dict, compare=False)
    # GGUF tensor (after "blk.N.", or global) -> its value in transformers' semantics.
    read_fixes: dict = field(default_factory=dict, compare=False)


ARCHITECTURES = {
    "llama": Architecture("LlamaForCausalLM", permuted_qk=True),
    "qwen2": Architecture("Qwen2ForCausalLM", permuted_qk=False, qkv_bias=True),
    "qwen3": Architecture("Qwen3ForCausalLM", permuted_qk=False, qk_norm=True),
    "qwen3moe": Architecture("Qwen3MoeForCausalLM", permuted_qk=False, qk_norm=True,
                             model_type="qwen3_moe", moe=True),
    "qwen3next": Architecture("Qwen3NextForCausalLM", permuted_qk=False, qk_norm=True,
                              model_type="qwen3_next", moe=True, hybrid=True,
                              read_fixes=HYBRID_FIXES),
    "qwen35": Architecture("Qwen3_5ForCausalLM", permuted_qk=False, qk_norm=True,
                           model_type="qwen3_5_text", hybrid=True, v_heads_tiled=True,
                           read_fixes=HYBRID_FIXES),
    "qwen35moe": Architecture("Qwen3_5MoeForCausalLM", permuted_qk=False, qk_norm=True,
                              model_type="qwen3_5_moe_text", moe=True, hybrid=True,
                              v_heads_tiled=True, read_fixes=HYBRID_FIXES),
    "gemma3": Architecture("Gemma3ForCausalLM", permuted_qk=False, qk_norm=True,
                           model_type="gemma3_text", gemma3=True, layer_names=GEMMA3_NAMES,
                           read_fixes=GEMMA3_FIXES),
    "gpt-oss": Architecture("GptOssForCausalLM", permuted_qk=False, qkv_bias=True,
                            model_type="gpt_oss", gpt_oss=True, layer_names=GPT_OSS_NAMES),
    "phi3": Architecture("Phi3ForCausalLM", permuted_qk=False, phi3=True, layer_names=PHI3_NAMES),
}

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "rope_freqs": "rope_freqs",   # Llama 3.1 files: llama.cpp's per-frequency RoPE factors
    **{name: name for name in PHI3_FACTORS},   # phi3 files: read into the config (LongRoPE)
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    **LAYER_NAMES,
}


def hf_name(gguf_name: str, layers: int | None = None, arch: str | None = None) -> str:
    """The ``transformers`` name of a GGUF tensor name (one of ``expected_shapes``, or
    of an MTP block: ``blk.N.*`` with N >= ``layers``, the model's layer count, is
    ``mtp.layers.{N - layers}.*``, its ``nextn.*`` tensors ``mtp.*``) in a file of
    ``general.architecture`` ``arch`` (None: a name every architecture spells alike)."""
    names = ARCHITECTURES[arch].layer_names if arch in ARCHITECTURES else {}
    if gguf_name.startswith("blk.") and gguf_name.split(".", 2)[2] in names:
        _, layer, rest = gguf_name.split(".", 2)
        return f"model.layers.{layer}.{names[rest]}"
    if gguf_name.startswith("blk.") and gguf_name.split(".")[2] in names:
        _, layer, part, suffix = gguf_name.split(".")
        return f"model.layers.{layer}.{names[part]}.{suffix}"
    if layers is not None and gguf_name.startswith("blk.") and int(gguf_name.split(".")[1]) >= layers:
        _, block, rest = gguf_name.split(".", 2)
        if rest in NEXTN_TENSORS:
            return NEXTN_TENSORS[rest]
        layer = hf_name(f"blk.{int(block) - layers}.{rest}")
        return "mtp." + layer[len("model."):]
    if gguf_name.startswith("blk.") and gguf_name.split(".", 2)[2] in LAYER_TENSORS:
        _, layer, rest = gguf_name.split(".", 2)
        return f"model.layers.{layer}.{LAYER_TENSORS[rest]}"
    base, suffix = gguf_name.rsplit(".", 1)
    if base.startswith("blk."):
        _, layer, part = base.split(".")
        return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{suffix}"
    return f"{_GLOBAL_NAMES[base]}.{suffix}"


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: within each head of ``d`` rows, GGUF row
    ``2i + j`` is Hugging Face row ``j·d/2 + i`` (j ∈ {0, 1}, i < d/2). The loader
    keeps the stored order (see the module docstring); this is for tests and tools
    that compare against Hugging Face weights.

    ``w``: ``[n_heads·d, ...]``; returns the same shape in Hugging Face row order.
    """
    rows = w.shape[0]
    return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def _check_supported(gf: GGUFFile, name: str) -> None:
    info = gf.tensors[name]
    if info.ggml_type in SUPPORTED_TYPES:
        return
    why = (" (an activation format of llama.cpp's CPU dot products, never a weight)"
           if info.ggml_type in ACTIVATION_ONLY else "")
    raise ValueError(
        f"[gguf] {gf.path}: tensor '{name}' has type {info.ggml_type.name}{why}; supported "
        f"types are {', '.join(t.name for t in SUPPORTED_TYPES)}")


def dequantize_tensor(gf: GGUFFile, name: str) -> np.ndarray:
    """A GGUF tensor as a float32 numpy array in numpy (row-major) shape, in the
    stored row order (the reference the quantized ops are checked against)."""
    _check_supported(gf, name)
    info = gf.tensors[name]
    return dequantize(gf.raw(name), info.ggml_type, info.shape)


def tensor_of(gf: GGUFFile, name: str) -> np.ndarray | QuantizedWeight:
    """A GGUF tensor without a float copy: a ``QuantizedWeight`` whose ``data`` is a
    uint8 ``[rows, row_bytes]`` view of the mapping for block types (matrices, and 3-D
    expert stacks as [E * N, K]), a view in the stored dtype for F32/F16, float32 for BF16
    (numpy has no bfloat16)."""
    _check_supported(gf, name)
    info = gf.tensors[name]
    raw = gf.raw(name)
    if info.ggml_type in FLOAT_TYPES:
        flat = raw.view(FLOAT_TYPES[info.ggml_type])
        return (bf16_to_float32(flat) if info.ggml_type == T.BF16 else flat).reshape(info.shape)
    if len(info.shape) not in (2, 3):
        raise ValueError(f"[gguf] {gf.path}: tensor '{name}' of type {info.ggml_type.name} has "
                         f"shape {list(info.shape)}; quantized tensors must be matrices "
                         f"(or stacks of expert matrices)")
    # A 3-D stack of expert matrices [E, N, K] is the matrix [E * N, K].
    rows, cols = int(np.prod(info.shape[:-1])), info.shape[-1]
    return QuantizedWeight(GGUF_FORMATS[info.ggml_type], (rows, cols),
                           raw.reshape(rows, row_bytes(info.ggml_type, cols)),
                           source=f"{gf.path}: tensor '{name}'")


class GGUFTensors(Mapping[str, "np.ndarray | QuantizedWeight"]):
    """The state dict of a checked GGUF file: Hugging Face name -> ``tensor_of`` the
    GGUF tensor (views of the mapping, made when read)."""

    def __init__(self, gf: GGUFFile, layers: int):
        self._gf = gf
        arch = gf.metadata["general.architecture"]
        self._gguf_names = {hf_name(name, layers, arch): name for name in gf.tensors}
        self._fixes = ARCHITECTURES[arch].read_fixes

    def __getitem__(self, name: str) -> np.ndarray | QuantizedWeight:
        gguf_name = self._gguf_names[name]
        tensor = tensor_of(self._gf, gguf_name)
        fix = self._fixes.get(gguf_name.split(".", 2)[2] if gguf_name.startswith("blk.") else gguf_name)
        return tensor if fix is None else fix(tensor)

    def __iter__(self) -> Iterator[str]:
        return iter(self._gguf_names)

    def __len__(self) -> int:
        return len(self._gguf_names)

    @property
    def file_weight_bytes(self) -> int:
        """Bytes of all tensor data in the file (the bench's 'file weight bytes')."""
        return sum(info.nbytes for info in self._gf.tensors.values())


def _require(gf: GGUFFile, key: str) -> Any:
    if key not in gf.metadata:
        raise ValueError(f"[gguf] {gf.path}: missing metadata key '{key}'")
    return gf.metadata[key]


def _count(gf: GGUFFile, key: str, default: Any = None) -> int:
    """A positive integer metadata value (required when ``default`` is None)."""
    value = _require(gf, key) if default is None else gf.metadata.get(key, default)
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"[gguf] {gf.path}: metadata key '{key}' must be a positive "
                         f"integer, got {value!r}")
    return value


def _float32_value(x: float) -> float:
    """A float32 metadata value with its shortest float32 spelling (1e-05, not
    9.999999747378752e-06), as the Hugging Face config it was converted from had it."""
    return float(str(np.float32(x)))


_YARN_KEYS = {"original_context_length": "original_max_position_embeddings",
              "yarn_attn_factor": "attention_factor", "yarn_beta_fast": "beta_fast",
              "yarn_beta_slow": "beta_slow"}


def config_from_metadata(gf: GGUFFile) -> dict[str, Any]:
    """Hugging Face ``config.json`` keys from the GGUF metadata (``general.*``,
    ``<arch>.*``, ``tokenizer.ggml.*``). Raises ValueError for an unknown architecture,
    a missing required key, or head counts that do not fit together. Besides the
    Hugging Face keys, ``rope_interleaved`` says the Q/K rows are stored for
    interleaved RoPE (Llama files, see the module docstring)."""
    arch = _require(gf, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"[gguf] {gf.path}: general.architecture is '{arch}'; supported "
                         f"architectures are {', '.join(ARCHITECTURES)}")
    meta = gf.metadata
    hidden = _count(gf, f"{arch}.embedding_length")
    heads = _count(gf, f"{arch}.attention.head_count")
    kv_heads = _count(gf, f"{arch}.attention.head_count_kv", heads)
    head_dim = _count(gf, f"{arch}.attention.key_length", hidden // heads or -1)
    if heads % kv_heads or head_dim % 2:
        raise ValueError(f"[gguf] {gf.path}: {heads} attention heads, {kv_heads} KV heads and "
                         f"head_dim {head_dim}: expected heads divisible by KV heads and an "
                         f"even head_dim")
    vocab = meta.get(f"{arch}.vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))
    moe = ARCHITECTURES[arch].moe
    # An MTP block (nextn) is counted in block_count, after the model's layers.
    mtp = meta.get(f"{arch}.nextn_predict_layers", 0)
    blocks = _count(gf, f"{arch}.block_count")
    if not isinstance(mtp, int) or not 0 <= mtp < blocks:
        raise ValueError(f"[gguf] {gf.path}: metadata key '{arch}.nextn_predict_layers' must be "
                         f"an integer in [0, block_count = {blocks}), got {mtp!r}")
    config = {
        "model_type": ARCHITECTURES[arch].model_type or arch,
        "architectures": [ARCHITECTURES[arch].hf_class],
        "vocab_size": _count(gf, f"{arch}.vocab_size", vocab or -1),
        "hidden_size": hidden,
        "num_hidden_layers": blocks - mtp,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        # MoE files may omit it: their layers have no dense MLP.
        "intermediate_size": (meta.get(f"{arch}.feed_forward_length") if moe
                              else _count(gf, f"{arch}.feed_forward_length")),
        "rms_norm_eps": _float32_value(_require(gf, f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": _float32_value(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": _count(gf, f"{arch}.context_length"),
        "tie_word_embeddings": "output.weight" not in gf.tensors,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "hidden_act": "silu",
        "attention_bias": ARCHITECTURES[arch].qkv_bias,
        "mlp_bias": False,
        "rope_interleaved": ARCHITECTURES[arch].permuted_qk,
    }
    # RoPE scaling is passed on for the model to apply or refuse (rope_parameters):
    # dropped, a YaRN or linear file would run as plain RoPE.
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none":
        config["rope_scaling"] = {"rope_type": scaling,
                                  "factor": meta.get(f"{arch}.rope.scaling.factor")}
        # YaRN's keys as the converter writes them (llama.cpp's YaRN is transformers').
        for key, hf_key in _YARN_KEYS.items():
            if f"{arch}.rope.scaling.{key}" in meta:
                config["rope_scaling"][hf_key] = meta[f"{arch}.rope.scaling.{key}"]
    count = lambda key, default=None: _count(gf, key, default)  # noqa: E731
    if not (ARCHITECTURES[arch].hybrid or ARCHITECTURES[arch].phi3) and \
            count(f"{arch}.rope.dimension_count", head_dim) != head_dim:
        raise ValueError(f"[gguf] {gf.path}: {arch}.rope.dimension_count is "
                         f"{count(f'{arch}.rope.dimension_count')}, expected head_dim {head_dim} "
                         f"(partial RoPE is read for the hybrid and phi3 architectures only)")
    if moe:
        config.update(moe_config(arch, count, meta))
    if ARCHITECTURES[arch].hybrid:
        config.update(hybrid_config(arch, count, meta, head_dim, config["num_hidden_layers"], moe,
                                    ARCHITECTURES[arch].v_heads_tiled, gf.path))
    if ARCHITECTURES[arch].gemma3:
        del config["hidden_act"]
        config.update(gemma3_config(arch, meta, config, gf.path))
    if ARCHITECTURES[arch].gpt_oss:
        config.update(gpt_oss_config(arch, count, meta, config, gf.path))
    if ARCHITECTURES[arch].phi3:
        config.update(phi3_config(arch, gf, config))
    if mtp:
        config["mtp_num_hidden_layers"] = mtp
    return config


def _architecture(config: dict[str, Any]) -> Architecture:
    return next(a for name, a in ARCHITECTURES.items()
                if (a.model_type or name) == config["model_type"])


def expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name → numpy shape, for every tensor of a model of ``config``."""
    arch = _architecture(config)
    h, v, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    d = config["head_dim"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    shapes = {"token_embd.weight": (v, h), "output_norm.weight": (h,)}
    if not config["tie_word_embeddings"]:
        shapes["output.weight"] = (v, h)
    layer = {"attn_norm.weight": (h,), "attn_q.weight": (q, h), "attn_k.weight": (kv, h),
             "attn_v.weight": (kv, h), "attn_output.weight": (h, q), "ffn_norm.weight": (h,),
             "ffn_gate.weight": (f, h), "ffn_up.weight": (f, h), "ffn_down.weight": (h, f)}
    if arch.qkv_bias:
        layer.update({"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)})
    if arch.qk_norm:
        layer.update({"attn_q_norm.weight": (d,), "attn_k_norm.weight": (d,)})
    if arch.gemma3:
        layer.update(gemma3_layer_shapes(config))
    if arch.gpt_oss:
        layer = gpt_oss_layer_shapes(config)
    if arch.phi3:
        layer = phi3_layer_shapes(config)
        if config.get("rope_parameters"):
            rotary = int(d * config["partial_rotary_factor"])
            shapes.update({f"{name}.weight": (rotary // 2,) for name in PHI3_FACTORS})
    if arch.moe:
        for name in ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"):
            del layer[name]
        layer.update(moe_layer_shapes(config))
    if arch.hybrid:
        return _hybrid_shapes(config, shapes, layer)
    if config.get("rope_freqs"):
        shapes["rope_freqs.weight"] = (d // 2,)
    for i in range(config["num_hidden_layers"]):
        shapes.update({f"blk.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def _hybrid_shapes(config, shapes, layer):
    """A hybrid file: norms, the MLP (the MoE block with its shared expert, or Qwen3.5's
    dense one), and per layer the GDN or the gated-attention tensors."""
    h = config["hidden_size"]
    common = {"attn_norm.weight": (h,), "post_attention_norm.weight": (h,),
              **{k: v for k, v in layer.items() if k.startswith("ffn_") and k != "ffn_norm.weight"}}
    if _architecture(config).moe:
        common.update(shared_expert_shapes(config))
    interval = config["full_attention_interval"]
    types = config.get("layer_types") or [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention"
        for i in range(config["num_hidden_layers"])]
    for i, kind in enumerate(types):
        layer = {**common, **hybrid_layer_shapes(config, kind == "linear_attention")}
        shapes.update({f"blk.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def load_gguf(path: str | os.PathLike,
              verbose: bool | None = None) -> tuple[dict[str, Any], GGUFTensors, GGUFFile]:
    """Read a GGUF model: returns ``(config, weights, gguf_file)`` where ``weights`` maps
    Hugging Face names to the file's tensors (``GGUFTensors``: quantized ones stay
    quantized, nothing is copied) and ``gguf_file.metadata`` holds the tokenizer.
    ``config["rope_interleaved"]`` is True for Llama files (Q/K rows as stored).

    Raises ValueError naming the file and the tensor or key for a corrupt or truncated
    file, a wrong magic, an unknown architecture, inconsistent metadata, an unsupported
    tensor type, a missing tensor, a tensor the architecture does not have, or a tensor
    of the wrong shape. ``verbose``: the progress bar of the read
    (``load_progress.reading``).
    """
    with load_progress.reading([os.fspath(path)], verbose):
        gf = GGUFFile(path)
    config = config_from_metadata(gf)
    shapes = expected_shapes({**config, "rope_freqs": "rope_freqs.weight" in gf.tensors})
    for name, shape in shapes.items():
        if name not in gf.tensors:
            raise ValueError(f"[gguf] {gf.path}: missing tensor '{name}' (expected for a "
                             f"{config['model_type']} model with "
                             f"{config['num_hidden_layers']} layers)")
        # llama.cpp's quantizer drops size-1 dimensions (ffn_gate_inp_shexp [1, H] -> [H]).
        if tuple(d for d in gf.tensors[name].shape if d != 1) != tuple(d for d in shape if d != 1):
            raise ValueError(f"[gguf] {gf.path}: tensor '{name}' must have shape "
                             f"{list(shape)}, got {list(gf.tensors[name].shape)}")
    layers = config["num_hidden_layers"]
    for name in gf.tensors:
        if _in_mtp_block(name, layers):
            # Read by the MTP head when speculation asks for it (models/mtp.py, which
            # checks the shapes then); here only its name and type.
            try:
                hf_name(name, layers)
            except KeyError:
                raise ValueError(f"[gguf] {gf.path}: tensor '{name}' of the MTP block (blocks "
                                 f"{layers}.. of a {layers}-layer model) is not an MTP tensor "
                                 f"metalrt knows") from None
            _check_supported(gf, name)
            continue
        if name not in shapes:
            raise ValueError(f"[gguf] {gf.path}: tensor '{name}' is not part of a "
                             f"{config['model_type']} model with "
                             f"{config['num_hidden_layers']} layers")
        _check_supported(gf, name)
    return config, GGUFTensors(gf, layers), gf


def _in_mtp_block(name: str, layers: int) -> bool:
    parts = name.split(".")
    return name.startswith("blk.") and parts[1].isdecimal() and int(parts[1]) >= layers
