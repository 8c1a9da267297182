"""KV bytes a Gemma 3 context holds, at the released geometries (``python -m
bench.kv_bytes [context]``): every layer keeping every position against sliding-window
layers keeping their window's blocks (``metalrt.cache.window``; the engine's default
512-token step, one sequence), float32 and float16 caches. The formula is the one
``tests/python/test_window_kv.py`` measures on a twin's ``ModelCache.nbytes``:
global layers x blocks_for(context) + sliding layers x window_blocks_per_sequence,
times 2 (K, V) x 16 x kv_heads x head_dim x element size."""
from __future__ import annotations

import sys

from metalrt.cache import BLOCK_SIZE, blocks_for
from metalrt.cache.window import window_blocks_per_sequence

# name: (layers, kv heads, head_dim, window), 5 sliding : 1 global (transformers configs).
GEMMA3 = {"gemma-3-270m": (18, 1, 256, 512), "gemma-3-1b": (26, 1, 256, 512),
          "gemma-3-4b": (34, 4, 256, 1024), "gemma-3-12b": (48, 8, 256, 1024),
          "gemma-3-27b": (62, 16, 128, 1024)}
STEP = 512


def kv_bytes(layers: int, kv_heads: int, head_dim: int, window: int, context: int,
             element: int, windowed: bool) -> int:
    """Bytes of the KV cache of one ``context``-token sequence."""
    full = layers // 6                    # every 6th layer is global
    ring = window_blocks_per_sequence(window, context, STEP) if windowed else blocks_for(context)
    blocks = full * blocks_for(context) + (layers - full) * ring
    return blocks * 2 * BLOCK_SIZE * kv_heads * head_dim * element


def main(argv) -> int:
    context = int(argv[0]) if argv else 32768
    print(f"kv bytes at a {context}-token context (one sequence), MB: every position / "
          "window blocks for sliding layers")
    for name, geometry in GEMMA3.items():
        cells = [f"{kv_bytes(*geometry, context, e, False) / 1e6:.0f} / "
                 f"{kv_bytes(*geometry, context, e, True) / 1e6:.0f} ({dtype})"
                 for dtype, e in (("f32", 4), ("f16", 2))]
        print(f"  {name}: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
