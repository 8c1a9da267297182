"""The rotary-embedding frequencies of every RoPE variant, in one place: plain RoPE
(Su et al. 2021), linear position interpolation (Chen et al. 2023), Llama 3.1's
frequency scaling, YaRN (Peng et al. 2023) with its attention factor, LongRoPE (Ding
et al. 2024; Phi-3.5/Phi-4) with short and long factors, llama.cpp's per-frequency
factor table (a GGUF's ``rope_freqs.weight``), and partial RoPE. Each variant's math
is that of transformers 5.24's ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils.py``);
``tests/python/test_rope_table.py`` checks them against it.

The frequencies are computed once per model on the host in float64; ``Rope``
(``attention.py``) rotates with the kernels' own frequencies when they are plain and
from a cos|sin table made of these otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from .config_values import config_bool, config_float, config_int

ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")
# The parameters of rope_type "llama3" (transformers' _compute_llama3_parameters).
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass(frozen=True)
class RopeFrequencies:
    """The RoPE of one attention layer. ``inv_freq`` float64 [rotary_dim // 2]: radians
    per position of each feature pair; ``attention_factor`` multiplies cos and sin
    (YaRN, LongRoPE); LongRoPE also has ``long_inv_freq``, used for a sequence longer than
    ``original_context`` tokens (transformers picks the set by the sequence length).
    ``plain``: inv_freq is base**(-2i/rotary_dim) with factor 1, which the RoPE kernels
    compute themselves."""

    base: float
    rotary_dim: int
    inv_freq: np.ndarray
    attention_factor: float = 1.0
    long_inv_freq: Optional[np.ndarray] = None
    original_context: Optional[int] = None
    plain: bool = False

    def factor_set(self, max_position: int) -> int:
        """Which frequencies a step whose largest position is ``max_position`` rotates
        with: 1 (LongRoPE's long factors) when max_position + 1 > original_context, as
        transformers' ``dynamic_rope_update`` decides per forward call; else 0."""
        return int(self.long_inv_freq is not None and max_position + 1 > self.original_context)

    def inv_freq_for(self, max_position: int) -> np.ndarray:
        """The frequencies of a step whose largest position is ``max_position``."""
        return self.long_inv_freq if self.factor_set(max_position) else self.inv_freq


def long_rope_switch(freqs, arch: str) -> Optional[int]:
    """The original context of the LongRoPE ``RopeFrequencies`` among ``freqs`` (a
    sequence of more tokens rotates with the long factors), None when none is LongRoPE.
    ValueError when two have different original contexts (one switch per model)."""
    contexts = {f.original_context for f in freqs if f.long_inv_freq is not None}
    if len(contexts) > 1:
        raise ValueError(f"[{arch}] LongRoPE layers with different "
                         f"'original_max_position_embeddings' ({sorted(contexts)}); expected one")
    return contexts.pop() if contexts else None


def rope_parameters(config: Mapping, arch: str, layer_type: Optional[str] = None) -> dict:
    """The RoPE parameters of a config (with ``rope_theta`` and ``rope_type``), from
    transformers' v5 ``rope_parameters`` (flat, or one entry per layer type as Gemma 3
    and gpt-oss write it: ``layer_type`` picks it) or the older ``rope_theta`` /
    ``rope_scaling`` keys. ValueError for a layer type the nested form lacks."""
    params = dict(config.get("rope_scaling") or {})
    given = config.get("rope_parameters") or {}
    if layer_type is not None and isinstance(given.get(layer_type), Mapping):
        given = given[layer_type]
    elif any(isinstance(v, Mapping) for v in given.values()):
        raise ValueError(f"[{arch}] config 'rope_parameters' has no entry for layer type "
                         f"{layer_type!r} (it has {', '.join(map(str, given))})")
    params.update(given)
    # The top-level value is checked even where rope_parameters overrides it.
    top_theta = config_float(config, "rope_theta", arch, 10000.0)
    if params.get("rope_theta") is None:
        params["rope_theta"] = top_theta
    params["rope_type"] = params.get("rope_type", params.get("type", "default"))
    return params


def partial_rotary_dim(config: Mapping, head_dim: int, arch: str, default: float) -> int:
    """``head_dim * partial_rotary_factor`` (from ``rope_parameters`` or the top level,
    ``default`` when neither gives it): the leading features RoPE rotates. ValueError
    unless the factor is a number > 0 giving an even count in [2, head_dim]."""
    params = {**config, **(config.get("rope_parameters") or {})}
    factor = config_float(params, "partial_rotary_factor", arch, default)
    rotary = int(head_dim * factor)
    if rotary < 2 or rotary % 2 or rotary > head_dim:
        raise ValueError(f"[{arch}] head_dim {head_dim} x partial_rotary_factor {factor} gives "
                         f"rotary dim {rotary}; expected a positive even number <= head_dim")
    return rotary


def rope_frequencies(config: Mapping, rotary_dim: int, arch: str,
                     layer_type: Optional[str] = None,
                     freq_factors: Optional[np.ndarray] = None) -> RopeFrequencies:
    """The RoPE of a config's attention layers (of ``layer_type`` where the config gives
    one set per type) over ``rotary_dim`` features. ``freq_factors``: a GGUF's
    ``rope_freqs.weight`` (float [rotary_dim // 2]; llama.cpp divides each frequency
    by its factor — the file's form of Llama 3.1 scaling).

    Raises ValueError naming the key for an unknown ``rope_type``, a missing or
    malformed parameter (a factor <= 0, Llama 3's high_freq_factor <= low_freq_factor,
    a LongRoPE factor list not of rotary_dim // 2 positive numbers) and for a
    ``freq_factors`` table of the wrong length."""
    params = rope_parameters(config, arch, layer_type)
    rope_type = params["rope_type"]
    where = f"{arch} rope_scaling"
    base = config_float(params, "rope_theta", arch)
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    inv_freq = base ** -exponents
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"[{arch}] unsupported RoPE scaling '{rope_type}' "
                         f"(supported: {', '.join(ROPE_TYPES)})")
    if freq_factors is not None:
        if rope_type != "default":
            raise ValueError(f"[{arch}] tensor 'rope_freqs.weight' and rope_scaling "
                             f"'{rope_type}' both scale the frequencies; expected one")
        return RopeFrequencies(base, rotary_dim, inv_freq / _factor_table(
            freq_factors, rotary_dim, "tensor 'rope_freqs.weight'", arch))
    if rope_type == "default":
        return RopeFrequencies(base, rotary_dim, inv_freq, plain=True)
    if rope_type == "linear":
        return RopeFrequencies(base, rotary_dim, inv_freq / config_float(params, "factor", where))
    if rope_type == "llama3":
        return RopeFrequencies(base, rotary_dim, _llama3(inv_freq, params, where))
    original = config_int(params, "original_max_position_embeddings", where,
                          config.get("original_max_position_embeddings"))
    if original is None:
        raise ValueError(f"[{where}] config lacks 'original_max_position_embeddings'")
    factor = config_float(params, "factor", where, None)
    if factor is None:
        factor = config_int(config, "max_position_embeddings", arch) / original
    if rope_type == "yarn":
        return _yarn(base, rotary_dim, inv_freq, factor, original, params, where)
    return _longrope(base, rotary_dim, exponents, factor, original, params, where)


def _factor_table(values, rotary_dim: int, name: str, arch: str) -> np.ndarray:
    try:
        table = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        table = np.full(len(values), np.nan)
    if table.shape[0] != rotary_dim // 2 or not (np.isfinite(table) & (table > 0)).all():
        raise ValueError(f"[{arch}] {name} has {table.shape[0]} values, expected "
                         f"{rotary_dim // 2} finite numbers > 0 (one per rotary pair)")
    return table


def _llama3(inv_freq: np.ndarray, params: Mapping, where: str) -> np.ndarray:
    """Llama 3.1 (Meta's reference): wavelengths longer than original_context /
    low_freq_factor are divided by ``factor``, shorter than original_context /
    high_freq_factor kept, and the band between interpolated."""
    scaling = {key: config_float(params, key, where) for key in _LLAMA3_KEYS}
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    if high <= low:
        raise ValueError(f"[{where}] config 'high_freq_factor' ({high}) "
                         f"must be greater than 'low_freq_factor' ({low})")
    wavelen = 2 * math.pi / inv_freq
    smooth = np.clip((scaling["original_max_position_embeddings"] / wavelen - low) / (high - low),
                     0.0, 1.0)
    return (1 - smooth) * inv_freq / scaling["factor"] + smooth * inv_freq


def _yarn(base, rotary_dim, inv_freq, factor, original, params, where) -> RopeFrequencies:
    """YaRN: frequencies that turn fewer than beta_slow times over the original context
    are interpolated (divided by ``factor``), those turning more than beta_fast times
    kept, a linear ramp over the pairs between; cos and sin scaled by the attention
    factor 0.1 ln(factor) + 1 (or mscale / mscale_all_dim's ratio, or as given)."""
    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = config_float(params, "attention_factor", where, None)
    if attention is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    beta_fast = config_float(params, "beta_fast", where, 32.0)
    beta_slow = config_float(params, "beta_slow", where, 1.0)

    def correction_dim(rotations):
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if config_bool(params, "truncate", where, True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001   # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    freqs = inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation
    return RopeFrequencies(base, rotary_dim, freqs, attention_factor=attention)


def _longrope(base, rotary_dim, exponents, factor, original, params, where) -> RopeFrequencies:
    """LongRoPE: each pair's wavelength stretched by its short factor (sequences up to
    the original context) or long factor (longer ones); cos and sin scaled by
    sqrt(1 + ln(factor) / ln(original_context)) (or as given)."""
    attention = config_float(params, "attention_factor", where, None)
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    tables = []
    for key in ("short_factor", "long_factor"):
        if not isinstance(params.get(key), (list, tuple)):
            raise ValueError(f"[{where}] config '{key}' must be a list of {rotary_dim // 2} "
                             f"numbers, got {type(params.get(key)).__name__}")
        tables.append(_factor_table(params[key], rotary_dim, f"config '{key}'", where))
    short, long = (1.0 / (t * base ** exponents) for t in tables)
    return RopeFrequencies(base, rotary_dim, short, attention_factor=attention,
                           long_inv_freq=long, original_context=original)
