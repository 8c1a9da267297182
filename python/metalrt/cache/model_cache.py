"""What a model keeps for the requests an engine runs: one cache object per layer, of
the kind the layer's mixer reads (mlx-lm's ``make_cache``)."""
from __future__ import annotations

from typing import Sequence


class ModelCache:
    """The caches of a model's layers, in layer order: ``layers[i]`` is what layer i's
    mixer is called with (a ``paged_kv.PagedKVLayer``, a ``recurrent.RecurrentLayer``).
    Every kind says whether requests may share its prompt prefixes
    (``shares_prefixes``) and how many request slots of per-request state it holds
    (``num_slots``, 0 for none; a layer with slots has ``reset(slot)``).

    ``num_blocks``: the KV blocks of every paged layer (one block table serves them
    all) except sliding-window layers made with their own pool (``PagedKVLayer.window``
    > 0): those hold ``num_window_blocks`` blocks, addressed through a second block table
    per sequence (``cache.window``); ``window``: their window (0: none);
    ``num_state_slots``: the request slots of the layers with per-request state
    (0: none), which the engine hands out as requests are admitted. ``in_use`` marks a
    cache an engine holds, so that a second generation running at the same time gets
    its own; ``decode_plans`` are the plans recorded over this cache, kept for the next
    engine that holds it (``runner.engine``: recording a plan runs the model op by op).
    """

    def __init__(self, layers: Sequence, num_blocks: int, num_window_blocks: int = 0):
        self.layers = list(layers)
        self.num_blocks = num_blocks
        windows = sorted({layer.window for layer in self.layers if getattr(layer, "window", 0)})
        if len(windows) > 1:
            raise ValueError(f"[cache] the sliding-window layers have windows {windows}; one "
                             "window is needed (their blocks share one table)")
        if windows and num_window_blocks < 1:
            raise ValueError("[cache] sliding-window layers with their own blocks need "
                             f"num_window_blocks >= 1, got {num_window_blocks}")
        self.window = windows[0] if windows else 0
        self.num_window_blocks = num_window_blocks if windows else 0
        self.in_use = False
        self.decode_plans = None
        self._stateful = [layer for layer in self.layers if layer.num_slots]
        slots = sorted({layer.num_slots for layer in self._stateful})
        if len(slots) > 1:
            raise ValueError(f"[cache] the layers' per-request state has {slots} slots; "
                             "one count is needed (a request takes one slot in every layer)")
        self.num_state_slots = slots[0] if slots else 0

    @property
    def supports_prefix_caching(self) -> bool:
        """Whether requests may reuse the KV blocks of another request's prompt prefix:
        no layer keeps state that cannot be rolled back to a prefix."""
        return all(layer.shares_prefixes for layer in self.layers)

    @property
    def nbytes(self) -> int:
        """Device bytes of every layer's KV blocks and state pools."""
        return sum(t.nbytes for layer in self.layers
                   for t in ((layer.keys, layer.values) if not layer.num_slots
                             else (layer.conv, layer.recurrent)))

    def snapshot(self, slot: int, on_device: bool = False) -> list:
        """Copies of request slot ``slot`` of every layer with per-request state (to
        ``restore`` when the tokens after this point are rolled back): on the host, or
        with ``on_device`` in device tensors (``RecurrentLayer.snapshot``)."""
        return [layer.snapshot(slot, on_device) for layer in self._stateful]

    def restore(self, slot: int, snapshot: list) -> None:
        """Writes a ``snapshot`` (of any slot) back into request slot ``slot``."""
        for layer, state in zip(self._stateful, snapshot):
            layer.restore(slot, state)

    def reset(self, slot: int) -> None:
        """Zeroes request slot ``slot`` of every layer with per-request state."""
        for layer in self._stateful:
            layer.reset(slot)
