"""KV-cache bytes (``python -m bench.kv_bytes [context]``).

1. Per token, per KV type (``metalrt.cache.kv_types``): the default model's
   ``ModelCache.nbytes`` (the bytes of its allocated K/V tensors) for a cache of
   ``PER_TOKEN_CONTEXT`` tokens, divided by its positions, against the formula layers x 2 sides x kv_heads x row bytes (row bytes:
   head_dim x element size for a float type, head_dim / 32 blocks of 34 (q8_0) or 18
   (q4_0) bytes).
2. What a Gemma 3 context holds, at the released geometries: every layer keeping every
   position against sliding-window layers keeping their window's blocks
   (``metalrt.cache.window``; the engine's default 512-token step, one sequence), per KV
   type. The formula is the one ``tests/python/test_window_kv.py`` measures on a twin's
   ``ModelCache.nbytes``: global layers x blocks_for(context) + sliding layers x
   window_blocks_per_sequence, times 16 x the bytes of a position's K and V rows."""
from __future__ import annotations

import sys

from metalrt.cache import BLOCK_SIZE, blocks_for, kv_types
from metalrt.cache.window import window_blocks_per_sequence

# name: (layers, kv heads, head_dim, window), 5 sliding : 1 global (transformers configs).
GEMMA3 = {"gemma-3-270m": (18, 1, 256, 512), "gemma-3-1b": (26, 1, 256, 512),
          "gemma-3-4b": (34, 4, 256, 1024), "gemma-3-12b": (48, 8, 256, 1024),
          "gemma-3-27b": (62, 16, 128, 1024)}
STEP = 512
PER_TOKEN_CONTEXT = 1024   # per token, the cache's size does not matter


def kv_bytes(layers: int, kv_heads: int, head_dim: int, window: int, context: int,
             kv_type: str, windowed: bool) -> int:
    """Bytes of the KV cache of one ``context``-token sequence."""
    full = layers // 6                    # every 6th layer is global
    ring = window_blocks_per_sequence(window, context, STEP) if windowed else blocks_for(context)
    blocks = full * blocks_for(context) + (layers - full) * ring
    return blocks * BLOCK_SIZE * kv_types.bytes_per_token((kv_type, kv_type), kv_heads, head_dim)


def measured_per_token(context: int) -> dict:
    """{kv type: (measured bytes per token, formula)} of the default model's cache."""
    import metalrt

    model, _ = metalrt.load(device="cpu")
    rows = {}
    for kv_type in kv_types.KV_TYPES:
        model.set_kv_type(kv_type)
        cache = model.new_cache(blocks_for(context))
        rows[kv_type] = (cache.nbytes / (cache.num_blocks * BLOCK_SIZE),
                         kv_types.bytes_per_token((kv_type, kv_type), model.num_kv_heads,
                                                  model.head_dim, model.num_layers))
    return rows


def main(argv) -> int:
    context = int(argv[0]) if argv else 32768
    print(f"default model KV bytes per token (a {PER_TOKEN_CONTEXT}-token cache): measured / formula")
    for kv_type, (measured, formula) in measured_per_token(PER_TOKEN_CONTEXT).items():
        print(f"  {kv_type:>8}: {measured:,.0f} / {formula:,}")
    print(f"Gemma 3 KV bytes at a {context}-token context (one sequence), MB: every position / "
          "window blocks for sliding layers")
    for name, geometry in GEMMA3.items():
        cells = [f"{kv_bytes(*geometry, context, t, False) / 1e6:.0f} / "
                 f"{kv_bytes(*geometry, context, t, True) / 1e6:.0f} ({t})"
                 for t in ("float32", "float16", "q8_0", "q4_0")]
        print(f"  {name}: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
