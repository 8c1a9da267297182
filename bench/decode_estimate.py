"""The inputs of ``bench/metal_estimate.py``, so that metalrt's decode step and mlx-lm's
go through the same arithmetic.

* metalrt, from what the simulated device counted: the kernel rows of one decode step
  (``bench/counters.py``: dispatches, threadgroups, threads per threadgroup, the busiest
  SIMD-group's collectives, the weight bytes credited to each kernel), with the decode
  attention's grid re-measured at the estimate's context (``bench/attention_grid.py``)
  and the K/V bytes that context reads (``metalrt_kernels``); at the 1B and 8B shapes of
  ``bench/shapes_gguf.py``, those rows scaled by shape (``scaled_kernels``). Serial
  steps: the positions one SIMD-group walks for the attention, the serial loads of one
  thread for the argmax's scan, the busiest SIMD-group's collectives for every other
  kernel.
* mlx-lm, from its op count read in mlx-lm's and MLX's source
  (``mlx_lm_kernels``).

``model_estimates`` puts both beside each other per model, context and chip; PUBLISHED
holds the figures they are checked against (docs/benchmarks.md section 3)."""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Tuple

from metalrt.cache import kv_types

from . import metal_estimate, parallelism, shapes_gguf
from .metal_estimate import Kernel


def _serial_steps(name: str, row: Mapping, vocab: int) -> int:
    if name.startswith(parallelism.ARGMAX_KERNEL):
        return parallelism.argmax_loads_per_thread({name: row}, 1, vocab)
    return row["max_simd_collectives"]


def metalrt_kernels(kernels: Mapping[str, Mapping], attention: Mapping, layers: int,
                    kv_bytes_per_position: int, vocab: int) -> List[Kernel]:
    """The decode step's ``kernels`` (counters' profiler rows with ``weight_bytes``) as
    Kernel rows at ``attention["context"]`` positions: the attention kernels replaced by
    that context's measured grids (``attention``: an attention_grid row), one dispatch a
    layer each, reading ``kv_bytes_per_position`` (all layers' K and V of one position)
    x context bytes between them."""
    rows = []
    for name, r in kernels.items():
        if name.startswith("paged_attention"):
            continue
        rows.append(Kernel(name, r["dispatches"], r["threadgroups"], r["last_threads_per_threadgroup"],
                           r["weight_bytes"], _serial_steps(name, r, vocab)))
    kv = kv_bytes_per_position * attention["context"]
    for name, g in attention["grids"].items():
        attend = not name.startswith(parallelism.MERGE_KERNELS)
        rows.append(Kernel(name, layers * g["dispatches"], layers * g["threadgroups"],
                           g["last_threads_per_threadgroup"], kv if attend else 0,
                           attention["positions_per_simdgroup"] if attend else g["max_simd_collectives"]))
    return rows


def metalrt_estimate(kernels: Mapping[str, Mapping], attention_rows: List[Mapping], layers: int,
                     kv_bytes_per_position: int, vocab: int) -> List[Dict]:
    """Per context of ``attention_rows``: {"context", "weight_bytes", "kv_bytes",
    "dispatches", "chips": metal_estimate.estimate's rows}."""
    out = []
    for att in attention_rows:
        ks = metalrt_kernels(kernels, att, layers, kv_bytes_per_position, vocab)
        kv = kv_bytes_per_position * att["context"]
        weights = sum(k.bytes for k in ks) - kv
        dispatches = sum(k.dispatches for k in ks)
        out.append({"context": att["context"], "weight_bytes": weights, "kv_bytes": kv,
                    "dispatches": dispatches,
                    "chips": metal_estimate.estimate(weights, dispatches, kv, ks)})
    return out


# The default model's shape (HuggingFaceTB/SmolLM2-135M-Instruct config.json).
SMOLLM2_135M = shapes_gguf.Shape("SmolLM2-135M", "llama", 576, 30, 9, 3, 64, 1536, 49152, True,
                                 100000.0, 1e-5, 8192)
# Models of the sizes issue the estimate is scaled to, at llama.cpp's Q4_K_M mix.
SCALED = ("llama-3.2-1b", "llama-3.1-8b")
SCALED_QUANT = "q4_k_m"
CONTEXTS = (512, 4096)

# Published decode figures the estimate is checked against: (model, chip, what ran, tok/s,
# source). None was found for SmolLM2-135M. llama.cpp's Llama-2-7B figures of #4167 set
# the efficiency, so they are no check.
PUBLISHED = (
    ("Llama-3.2-1B", "M4 Max", "mlx-lm (vllm-mlx), Llama-3.2-1B-4bit", 464.0,
     "github.com/waybarrios/vllm-mlx docs/benchmarks/llm.md"),
    ("Llama-3.2-1B", "M2 Pro", "llama.cpp, Q4_K_M (6.77 ms a token)", 147.7,
     "github.com/antonellof/ferrox/issues/149"),
    ("Llama-3.2-1B", "M2 Pro", "ferrox's Metal kernels, Q4_K_M, GPU time only (4.90 ms)", 204.1,
     "github.com/antonellof/ferrox/issues/149"),
    ("Llama-3.1-8B", "M2 Pro", "mlx-lm, 4-bit", 36.2, "github.com/AlexsJones/llmfit/pull/1031"),
    ("Llama-3.1-8B", "M2 Pro", "llama.cpp, Q4_K_M", 33.0, "github.com/AlexsJones/llmfit/pull/1031"),
    ("Llama-3.1-8B", "M4", "llama.cpp Metal, Q4_K_M, tg128", 20.87, "github.com/brand-o/normiebench/issues/3"),
)

# What each of metalrt's decode kernels computes: the weight tensors of a layer it reads
# (GGUF names, blk.N. dropped) and the output rows its grid is sized by.
_GEMV_ROLES = {"quantized_matmul_bt_concat_gemv16": (("attn_q", "attn_k", "attn_v"), "qkv"),
               "quantized_matmul_bt_swiglu_gemv16": (("ffn_gate", "ffn_up"), "ffn"),
               "quantized_matmul_bt_add_gemv16": (("attn_output", "ffn_down"), "hidden"),
               "quantized_matmul_bt_gemv16": ((), "vocab")}


def _rows(shape: shapes_gguf.Shape, what: str) -> int:
    return {"qkv": (shape.heads + 2 * shape.kv_heads) * shape.head_dim, "ffn": shape.ffn,
            "hidden": shape.hidden, "vocab": shape.vocab}[what]


def _tensors(shape: shapes_gguf.Shape, quant: str) -> List[Tuple[int, str, str, int]]:
    """(layer or -1, GGUF name without blk.N. and .weight, type, bytes) of every tensor of
    a Q4_K_M/Q8_0 file at ``shape``."""
    out = []
    for name, dims, kind in shapes_gguf.tensor_plan(shape, quant):
        count = 1
        for d in dims:
            count *= d
        size = count * 4 if kind == "F32" else count // shapes_gguf.BLOCKS[kind][0] * shapes_gguf.BLOCKS[kind][1]
        layer, key = (int(name.split(".")[1]), name.split(".", 2)[2]) if name.startswith("blk.") else (-1, name)
        out.append((layer, key.removesuffix(".weight"), kind, size))
    return out


def _tensor_bytes(tensors, layers=None) -> Dict[str, int]:
    """{name: bytes summed over ``layers`` (None: all, and the tensors outside them)}."""
    out: Dict[str, int] = {}
    for layer, key, _, size in tensors:
        if layers is None or layer in layers:
            out[key] = out.get(key, 0) + size
    return out


def _mixed_qkv_layers(tensors) -> List[int]:
    """Layers whose q, k and v differ in type: metalrt projects them apart (no concatenated
    GEMV), then runs RoPE and the cache write apart (no qkv_rope_cache)."""
    kinds: Dict[int, set] = {}
    for layer, key, kind, _ in tensors:
        if key in ("attn_q", "attn_k", "attn_v"):
            kinds.setdefault(layer, set()).add(kind)
    return sorted(layer for layer, k in kinds.items() if len(k) > 1)


def _split_mixed_layers(rows: List[Kernel], tensors, layers: int) -> List[Kernel]:
    """``rows`` with the mixed layers' (``_mixed_qkv_layers``) concatenated GEMV and
    qkv_rope_cache dispatches replaced by what the simulated device runs there
    (tests/python/test_decode_proxies_1b.py): 3 GEMVs, 2 RoPE dispatches (q, k) and the
    cache write, one threadgroup each like qkv_rope_cache."""
    mixed = _mixed_qkv_layers(tensors)
    concat = next((k for k in rows if k.name.startswith("quantized_matmul_bt_concat_gemv16")), None)
    rope = next((k for k in rows if k.name.startswith("qkv_rope_cache")), None)
    if not mixed or concat is None or rope is None:
        return rows
    by = {k.name: k for k in rows}
    apart = sum(_tensor_bytes(tensors, set(mixed)).get(t, 0) for t in ("attn_q", "attn_k", "attn_v"))
    m, tgs = len(mixed), concat.threadgroups // concat.dispatches
    by[concat.name] = dataclasses.replace(concat, dispatches=layers - m, threadgroups=(layers - m) * tgs,
                                          bytes=concat.bytes - apart)
    by[rope.name] = dataclasses.replace(rope, dispatches=layers - m, threadgroups=layers - m)
    extra = [Kernel("quantized_matmul_bt_gemv16 (q, k, v apart)", 3 * m, m * tgs,
                    concat.threads_per_threadgroup, apart, concat.serial_steps),
             Kernel("rope_interleaved", 2 * m, 2 * m, rope.threads_per_threadgroup, 0, rope.serial_steps),
             Kernel("reshape_and_cache", m, m, rope.threads_per_threadgroup, 0, rope.serial_steps)]
    return list(by.values()) + extra


def scaled_kernels(kernels: Mapping[str, Mapping], attention: Mapping, base: shapes_gguf.Shape,
                   target: shapes_gguf.Shape, kv_type=("float32", "float32"),
                   quant: str = SCALED_QUANT) -> List[Kernel]:
    """metalrt's decode step at ``target``'s shape, from the default model's measured
    ``kernels`` and ``attention`` row (shape ``base``): each kernel keeps its threads per
    threadgroup and serial steps; its dispatches follow the layer count, its GEMV
    threadgroups the output rows, its bytes the target file's tensors (``quant``, written
    by bench/shapes_gguf.py: exact per tensor type), the norms' bytes the hidden size;
    the attention's threadgroups follow the query heads (one SIMD-group row per query
    head, as measured) at the same positions per SIMD-group, reading the target's K/V of
    ``kv_type``;
    the argmax scans ceil(vocab / 4,096) chunks at 16 loads a thread (metal/row_args.h);
    layers whose q, k and v differ in type run apart (``_split_mixed_layers``)."""
    plan = _tensors(target, quant)
    tensors = _tensor_bytes(plan)
    head = tensors["token_embd" if target.tied else "output"]
    rows = []
    for name, r in kernels.items():
        if name.startswith("paged_attention"):
            continue
        per_layer, extra = divmod(r["dispatches"], base.layers)
        n = per_layer * target.layers + extra
        tgs, nbytes, steps = r["threadgroups"] // r["dispatches"], 0, r["max_simd_collectives"]
        role = next((_GEMV_ROLES[p] for p in sorted(_GEMV_ROLES, key=len, reverse=True)
                     if name.startswith(p)), None)
        if role:
            tgs = tgs * _rows(target, role[1]) // _rows(base, role[1])
            nbytes = sum(tensors[t] for t in role[0]) if role[0] else head
        elif name.startswith("rms_norm"):
            nbytes = n * target.hidden * 4
        elif name.startswith("quantized_embedding"):
            nbytes = tensors["token_embd"] // target.vocab
        elif name.startswith(parallelism.ARGMAX_KERNEL):
            tgs, steps = -(-target.vocab // 4096), 16
        rows.append(Kernel(name, n, n * tgs, r["last_threads_per_threadgroup"], nbytes, steps))
    rows = _split_mixed_layers(rows, plan, target.layers)
    kv = attention["context"] * kv_types.bytes_per_token(kv_type, target.kv_heads,
                                                         target.head_dim, target.layers)
    for name, g in attention["grids"].items():
        attend = not name.startswith(parallelism.MERGE_KERNELS)
        tgs = g["threadgroups"] * target.heads // base.heads
        rows.append(Kernel(name, target.layers, target.layers * tgs, g["last_threads_per_threadgroup"],
                           kv if attend else 0,
                           attention["positions_per_simdgroup"] if attend else g["max_simd_collectives"]))
    return rows


# mlx-lm's decode step, from reading mlx-lm's Llama model (mlx_lm/models/llama.py) and
# MLX's Metal backend (mlx/backend/metal/): ~17 dispatches a
# layer in 12 dependent epochs (dispatches in one epoch run concurrently and pay one
# dispatch cost), 4-bit group-64 weights (4.5 bits, the head too) and bf16 K/V.
MLX_BITS_PER_WEIGHT = 4.5
MLX_KV_BYTES = 2


def _mlx_attention(shape: shapes_gguf.Shape, context: int, chip: metal_estimate.Chip) -> List[Kernel]:
    """MLX's sdpa_vector at ``context`` (scaled_dot_product_attention.cpp's choice, as the
    review read it): one pass of one 1,024-thread threadgroup (32 SIMD-groups) per query
    head, or two passes of `blocks` 256-thread threadgroups (8 SIMD-groups) per query
    head and a combine, on Max-class chips from 1,024 positions, elsewhere from 4,096
    with grouped heads."""
    L, gqa, max_class = shape.layers, shape.heads // shape.kv_heads, chip.name.endswith("Max")
    kv = L * context * 2 * shape.kv_heads * shape.head_dim * MLX_KV_BYTES
    if not ((max_class and context >= 1024) or (context >= 4096 and gqa > 1)):
        return [Kernel("sdpa_vector", L, L * shape.heads, 1024, kv, -(-context // 32))]
    blocks = 64 if (max_class or gqa >= 4) else 32
    if max_class and context > 1024 and gqa > 4:
        blocks = 128
    return [Kernel("sdpa_vector_2pass_1", L, L * shape.heads * blocks, 256, kv, -(-context // (blocks * 8))),
            Kernel("sdpa_vector_2pass_2", L, L * shape.heads, 1024, 0, -(-blocks // 32))]


def mlx_lm_kernels(shape: shapes_gguf.Shape, context: int, chip: metal_estimate.Chip) -> List[Kernel]:
    """mlx-lm's decode step epochs for ``shape`` at ``context`` on ``chip``. Per layer:
    RMSNorm, q|k|v GEMVs, RoPE of q and k, the K/V cache update, attention, o GEMV,
    residual add, RMSNorm, gate|up GEMVs, SwiGLU, down GEMV, residual add; outside the
    layers: embedding, final norm, LM head, logsumexp and the log-probabilities (mlx-lm
    computes them every step), argmax. GEMVs: 8 rows a 64-thread threadgroup (qmv_fast),
    4 collectives; one-row reductions (norms, logsumexp, argmax): one 1,024-thread
    threadgroup a row reading 4 values a step; elementwise kernels: one step."""
    L, h = shape.layers, shape.hidden
    bits = MLX_BITS_PER_WEIGHT / 8

    def gemv(name, rows, cols, n=L):
        return Kernel(name, n, n * -(-rows // 8), 64, int(n * rows * cols * bits), 4)

    def small(name, n=L, steps=1):
        return Kernel(name, n, n, 1024, 0, steps)

    qkv = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    layer = [small("rms_norm", 2 * L + 1, -(-h // 4096) + 1), gemv("q|k|v", qkv, h),
             small("rope q, k"), small("kv cache update"), *_mlx_attention(shape, context, chip),
             gemv("o", h, shape.heads * shape.head_dim), small("add", 2 * L),
             gemv("gate|up", 2 * shape.ffn, h), small("swiglu"), gemv("down", h, shape.ffn)]
    vocab_steps = -(-shape.vocab // 4096)
    return layer + [small("embedding", 1), gemv("lm_head", shape.vocab, h, 1),
                    small("logsumexp", 1, vocab_steps), small("log-probabilities", 1),
                    small("argmax", 1, vocab_steps)]


def _per_chip(kernels_of, chips) -> List[Dict]:
    rows = []
    for chip in chips:
        ks = kernels_of(chip)
        rows += metal_estimate.estimate(sum(k.bytes for k in ks), sum(k.dispatches for k in ks),
                                        kernels=ks, chips=(chip,))
    return rows


def model_estimates(kernels: Mapping[str, Mapping], attention_rows: List[Mapping],
                    kv_type=("float32", "float32"), contexts=CONTEXTS) -> List[Dict]:
    """metalrt's and mlx-lm's estimates from the same arithmetic, per model (the default
    one as measured, the SCALED ones scaled from it), context of ``contexts`` (each an
    ``attention_rows`` context) and chip (CHIPS and CHECK_CHIPS): {"model", "context",
    "metalrt", "mlx_lm"} with metal_estimate.estimate's rows; metalrt's K/V of
    ``kv_type`` (a (key, value) type pair)."""
    chips = metal_estimate.CHIPS + metal_estimate.CHECK_CHIPS
    by_context = {a["context"]: a for a in attention_rows}
    out = []
    for key in ("default", *SCALED):
        shape = SMOLLM2_135M if key == "default" else shapes_gguf.SHAPES[key]
        for context in contexts:
            att = by_context[context]
            if key == "default":
                mine = metalrt_kernels(kernels, att, shape.layers, kv_types.bytes_per_token(
                    kv_type, shape.kv_heads, shape.head_dim, shape.layers), shape.vocab)
            else:
                mine = scaled_kernels(kernels, att, SMOLLM2_135M, shape, kv_type)
            out.append({"model": shape.name, "context": context,
                        "metalrt": _per_chip(lambda chip: mine, chips),
                        "mlx_lm": _per_chip(lambda chip: mlx_lm_kernels(shape, context, chip), chips)})
    return out
