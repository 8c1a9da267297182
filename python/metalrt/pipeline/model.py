"""A model whose layers are split over K processes (Ray actors, ``stage.PipelineStage``)
and driven as one model by the runner's ``Engine``.

Each stage loads its contiguous range of layers from the same file, mapped, so it
holds only its share of the weights; a forward step is cut into micro-batches of whole
sequences (``micro_batches``), and micro-batch m goes to stage s + 1 as soon as stage s
has its hidden states, while stage s takes micro-batch m + 1: the stages work at the
same time on different micro-batches of the continuous batch (GPipe's schedule,
Huang et al. 2019, without a backward pass). Hidden states travel through Ray's object
store: between the processes of one machine through its shared memory, between
machines over the network.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

import metalrt

from ..cache import ModelCache, ScheduledChunk, blocks_for, build_step
from ..loaders import file_map, load_model_files
from ..models import check_layer_ranges
from ..models.decoder import scored_ids
from ..tensor import is_int
from . import micro_batches
from .stage import PipelineStage


def stage_ranges(num_layers: int, stages: int) -> List[Tuple[int, int]]:
    """``num_layers`` layers cut into ``stages`` contiguous (start, stop) ranges whose
    sizes differ by at most one (the first ones larger). ValueError unless
    1 <= stages <= num_layers."""
    if not is_int(stages) or not 1 <= stages <= num_layers:
        raise ValueError(f"[pipeline] stages must be an int in 1..{num_layers} (the model's "
                         f"layers), got {stages!r}")
    sizes = [num_layers // stages + (i < num_layers % stages) for i in range(stages)]
    bounds = np.cumsum([0, *sizes]).tolist()
    return list(zip(bounds, bounds[1:]))


class PipelineModel:
    """A model run by ``stages`` (``PipelineStage`` Ray actor handles holding the layer
    ``ranges``, in layer order; ``load_pipeline`` makes them): what ``Engine`` needs of a
    model. ``config``: the file's Hugging Face config; ``dtype``: the stages'. The engine
    builds each step's inputs here on the host ("cpu"); the stages rebuild them on their
    own device. ``micro_batches_per_step``: the most micro-batches a step is cut into;
    ``rope_switch``: the stages' ``CausalLM.rope_switch`` (LongRoPE's original context,
    else None), for the engine's scheduler."""

    # Decode plans record one process's ops: a step here runs in other processes.
    records_plans = False
    device = "cpu"

    def __init__(self, stages: Sequence, config: dict, micro_batches_per_step: int,
                 dtype: str, ranges: Sequence[Tuple[int, int]],
                 rope_switch: Optional[int] = None):
        self.stages, self.config, self.dtype = list(stages), config, dtype
        self.rope_switch = rope_switch
        self.ranges = list(ranges)
        self.micro_batches = micro_batches_per_step
        self.arch = config["model_type"]
        self.vocab_size = int(config["vocab_size"])
        self.num_layers = int(config["num_hidden_layers"])
        self.context_length = config.get("max_position_embeddings")
        self._cache: Optional[ModelCache] = None
        # Why the pipeline cannot run any more (a stage process died), else None.
        self.broken: Optional[str] = None

    def _get(self, refs):
        """``ray.get(refs)``; RuntimeError once the pipeline is closed, or broken: a
        stage's process died (Ray's RayActorError: ActorDiedError, ActorUnavailableError),
        which marks the pipeline broken for good (its stages' KV caches are gone)."""
        import ray

        if self.broken is None and not self.stages:
            raise RuntimeError("[pipeline] the pipeline is closed")
        if self.broken is None:
            try:
                return ray.get(refs)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                self.broken = (f"[pipeline] a pipeline stage died; restart the server "
                               f"(or load the pipeline again): {type(e).__name__}")
        raise RuntimeError(self.broken)

    def _remote(self, method: str, *args) -> list:
        """``method(*args)`` called on every stage (object refs, in stage order)."""
        if not self.stages:
            raise RuntimeError("[pipeline] the pipeline is closed")
        return [getattr(s, method).remote(*args) for s in self.stages]

    def new_cache(self, num_blocks: int, window_blocks=None) -> ModelCache:
        """The engine's view of the stages' caches of ``num_blocks`` blocks each (every
        stage keeps the K/V of its own layers; the engine hands out the block ids)."""
        self._get(self._remote("reset_cache", num_blocks))
        self._cache = ModelCache([], num_blocks)
        return self._cache

    def kv_cache(self, num_blocks: int, window_blocks=None) -> ModelCache:
        """As ``CausalLM.kv_cache``: the last cache when no engine holds it and it is as
        large, else a new one."""
        old = self._cache
        if old is None or old.in_use or old.num_blocks < num_blocks:
            return self.new_cache(num_blocks)
        return old

    def check_cache(self, cache: ModelCache) -> None:
        """ValueError unless ``cache`` is this pipeline's (``new_cache``)."""
        if cache is not self._cache:
            raise ValueError("[pipeline] the cache is not this pipeline's (model.new_cache)")

    def forward(self, step, cache: ModelCache, float32_logits: bool = True,
                hidden=None):
        """One step over the stages (``CausalLM.forward``'s contract for a whole model):
        float32 logits [step.num_logit_rows, vocab] on the host device, None when no
        row wants logits. RuntimeError when a stage died (``broken``) or the pipeline
        is closed."""
        self.check_cache(cache)
        if hidden is not None:
            raise ValueError("[pipeline] a pipeline embeds the ids itself: no hidden states")
        self._get([])   # closed or broken: raised before any stage is called
        outputs = []
        for batch in micro_batches.split(micro_batches.host_arrays(step), self.micro_batches):
            h = None
            for stage in self.stages:
                h = stage.forward.remote(batch, h)
            outputs.append(h)
        logits = [x for x in self._get(outputs) if x is not None]
        if not logits:
            return None
        return metalrt.asarray(np.concatenate(logits), device=self.device)

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """float32 [n_tokens, vocab] after every token of ``token_ids``, from one prefill
        into a fresh cache (``CausalLM.logits``). ValueError for an empty list or ids
        outside int32."""
        ids = scored_ids(token_ids)
        cache = self.new_cache(blocks_for(len(ids)))
        step = build_step([ScheduledChunk(ids, 0, list(range(cache.num_blocks)), "all")],
                          self.device)
        return self.forward(step, cache).numpy()

    def cpu_seconds(self) -> float:
        """CPU seconds the stage processes have run, together (``PipelineStage.cpu_seconds``)."""
        return sum(self._get(self._remote("cpu_seconds")))

    def memory(self) -> List[dict]:
        """Each stage's ``PipelineStage.memory`` (pid, layers, VmRSS, VmHWM in bytes)."""
        return self._get(self._remote("memory"))

    def close(self) -> None:
        """Ends the stage processes."""
        import ray

        for stage in self.stages:
            ray.kill(stage)
        self.stages = []


def require_ray():
    """The ``ray`` module; RuntimeError naming the extra when it is not installed."""
    from ..server.ray_serve import RAY_EXTRA

    try:
        import ray
    except ImportError as e:
        raise RuntimeError(f"[pipeline] pipeline stages run on Ray ({e}): {RAY_EXTRA}") from None
    return ray


def check_free_cpus(stages: int, cpus_per_stage: float) -> None:
    """ValueError, naming the numbers and the flags, when the Ray cluster this process
    is in has fewer free CPUs (``ray.available_resources``) than ``stages`` stages of
    ``cpus_per_stage`` each reserve."""
    import ray

    need = stages * cpus_per_stage
    free = ray.available_resources().get("CPU", 0.0)
    if need > free:
        total = ray.cluster_resources().get("CPU", 0.0)
        raise ValueError(
            f"[pipeline] {stages} stages of {cpus_per_stage:g} Ray CPUs each "
            f"(--pipeline-stages, --pipeline-cpus-per-stage) need {need:g} CPUs; the Ray "
            f"cluster has {free:g} free of {total:g} (under --ray each replica also "
            f"reserves --ray-cpus-per-replica): lower --pipeline-cpus-per-stage or give "
            f"Ray more CPUs (ray start --num-cpus)")


def load_pipeline(path: Optional[str] = None, stages: int = 2, micro_batches_per_step: int = 2,
                  device: str = "auto", dtype: str = "float32", num_blocks: int = 1,
                  cpus_per_stage: float = 1.0, address: Optional[str] = None):
    """(PipelineModel, tokenizer): the model at ``path`` (``metalrt.load``'s paths;
    None: the default model) split into ``stages`` Ray actors of contiguous layers
    (``stage_ranges``), each reserving ``cpus_per_stage`` of Ray's CPUs and mapping the
    file so that it holds its layers' weights only; a step is cut
    into at most ``micro_batches_per_step`` micro-batches. Joins the Ray cluster at
    ``address`` (None: the one this process is in, or a new local one). The stages go
    on ``device`` of the machines Ray places them on. Raises RuntimeError naming the
    extra without Ray, ValueError for counts out of range, a family that builds whole
    models only (``models.build_model``), or fewer free Ray CPUs than the stages reserve
    (Ray would wait for them without a word)."""
    ray = require_ray()
    if not is_int(micro_batches_per_step) or micro_batches_per_step < 1:
        raise ValueError(f"[pipeline] micro_batches_per_step must be an int >= 1, got "
                         f"{micro_batches_per_step!r}")
    if isinstance(cpus_per_stage, bool) or not isinstance(cpus_per_stage, (int, float)) \
            or not cpus_per_stage >= 0:
        raise ValueError(f"[pipeline] cpus_per_stage (--pipeline-cpus-per-stage) must be a "
                         f"number >= 0, got {cpus_per_stage!r}")
    with file_map.mapped():   # the config and tokenizer only: no weight is read here
        files = load_model_files(path, verbose=False)
    config = files.config
    check_layer_ranges(config.get("model_type"))
    ranges = stage_ranges(int(config["num_hidden_layers"]), stages)
    if not ray.is_initialized():
        # None: a new local cluster, not one a `ray start` left on the host.
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=True)
    check_free_cpus(len(ranges), cpus_per_stage)
    # "auto" is resolved by each stage, on the machine Ray places it on.
    actor = ray.remote(num_cpus=cpus_per_stage)(PipelineStage)
    handles = [actor.remote(str(files.source), r, device, dtype, num_blocks) for r in ranges]
    ray.get([h.memory.remote() for h in handles])   # loaded (or the load's error, raised)
    switch = ray.get(handles[0].rope_switch.remote())
    return (PipelineModel(handles, config, micro_batches_per_step, dtype, ranges, switch),
            files.tokenizer)
