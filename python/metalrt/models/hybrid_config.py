"""Config rules shared by the Qwen3 MoE and hybrid (Gated-DeltaNet) families, as
transformers 5.24 reads them (``configuration_qwen3_next.py``, ``configuration_qwen3_5.py``,
``configuration_qwen3_moe.py``): the checkpoint's text config and weight prefix, the
per-layer mixer (``layer_types`` or ``full_attention_interval``) and the sparse-layer
rule (``mlp_only_layers``, ``decoder_sparse_step``)."""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

from .config_values import config_int

LINEAR, FULL = "linear_attention", "full_attention"


def text_config(config: Mapping) -> Tuple[dict, str]:
    """(the language model's config, its weight prefix). A Qwen3.5
    ``ForConditionalGeneration`` checkpoint nests the text model under ``text_config``
    and its weights under ``model.language_model.``; ``tie_word_embeddings`` may sit at
    the top level there. Other checkpoints: (config, ``model.``)."""
    if not isinstance(config.get("text_config"), Mapping):
        return dict(config), "model."
    text = dict(config["text_config"])
    if text.get("tie_word_embeddings") is None and config.get("tie_word_embeddings") is not None:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    text["model_type"] = config["model_type"]
    return text, "model.language_model."


def layer_types(config: Mapping, arch: str) -> List[str]:
    """The mixer of every layer: ``layer_types`` when given (authoritative, any
    pattern), else full attention at layers i with (i + 1) % full_attention_interval
    == 0 (default 4). Raises ValueError naming ``layer_types`` for a wrong length or an
    unknown entry, and ``full_attention_interval`` for a non-positive one."""
    types = listed_layer_types(config, arch, (LINEAR, FULL))
    if types is None:
        interval = config_int(config, "full_attention_interval", arch, 4)
        n = config_int(config, "num_hidden_layers", arch)
        return [FULL if (i + 1) % interval == 0 else LINEAR for i in range(n)]
    return types


def listed_layer_types(config: Mapping, arch: str, kinds: Sequence[str]) -> Optional[List[str]]:
    """The config's ``layer_types`` (None when it has none), checked: a list of
    num_hidden_layers entries, each one of ``kinds``; else ValueError naming
    ``layer_types``."""
    n = config_int(config, "num_hidden_layers", arch)
    types = config.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, (list, tuple)):
        raise ValueError(f"[{arch}] config 'layer_types' must be a list of "
                         f"num_hidden_layers = {n} entries, got {type(types).__name__} {types!r}")
    types = list(types)
    if len(types) != n:
        raise ValueError(f"[{arch}] config 'layer_types' has {len(types)} entries, expected "
                         f"num_hidden_layers = {n}")
    bad = sorted(set(map(str, types)) - set(kinds))
    if bad:
        raise ValueError(f"[{arch}] config 'layer_types' holds {bad}; expected "
                         f"{' or '.join(repr(k) for k in kinds)}")
    return types


def sparse_layers(config: Mapping, arch: str) -> List[bool]:
    """Whether each layer's MLP is the sparse MoE block: layer i is sparse iff it is not
    in ``mlp_only_layers``, ``num_experts`` > 0 and (i + 1) % decoder_sparse_step == 0
    (Qwen3-MoE and Qwen3-Next; transformers' modeling code)."""
    n = config_int(config, "num_hidden_layers", arch)
    step = config_int(config, "decoder_sparse_step", arch, 1)
    dense = set(config.get("mlp_only_layers") or ())
    experts = num_experts(config, arch)
    return [i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n)]


def num_experts(config: Mapping, arch: str) -> int:
    """``num_experts``, or ``num_local_experts`` (what transformers 5 writes for
    Qwen3-MoE), 0 when neither is set."""
    return config_int(config, "num_experts", arch,
                      config_int(config, "num_local_experts", arch, 0, minimum=0), minimum=0)
