"""Settings and start-up of ``metalrt serve`` (and ``python -m metalrt.server``)."""
from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Optional, Sequence, Union

from ..cache.kv_types import KV_TYPE_HELP, from_text as kv_type_from_text
from ..runner.speculative import SpeculativeConfig
from .model_registry import model_entries, parse_bytes

DEFAULT_PORT = 8080


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's command-line settings (shared by ``metalrt serve`` and
    ``python -m metalrt.server``)."""
    parser.add_argument("--model", metavar="[ID=]PATH", action="append", default=None,
                        help="a .gguf file or a Hugging Face model directory, served as ID "
                             "(default: its file name); again, or a directory of models, to "
                             "serve several (requests pick by `model`; the first loads at "
                             "start-up, the others on first use); default: "
                             "SmolLM2-135M-Instruct Q4_1, downloaded on first use")
    parser.add_argument("--max-memory", metavar="SIZE", type=parse_bytes, default=None,
                        help="memory budget of the loaded models (weights + KV cache) as "
                             "bytes or with K/M/G/T (1024-based), e.g. 8G: loading one more "
                             "evicts the least recently used idle ones (default: no limit)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; anything but loopback exposes the model to "
                             "the network, without authentication (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="TCP port (default: %(default)s)")
    parser.add_argument("--device", choices=("auto", "cpu", "metal"), default="auto",
                        help="where the model runs, as for `metalrt generate` "
                             "(default: %(default)s)")
    parser.add_argument("--kv-cache-tokens", type=int, default=8192, metavar="N",
                        help="tokens the paged KV cache holds, shared by all running "
                             "requests; a request reserves prompt + max_tokens at admission "
                             "and waits while they are not free (default: %(default)s)")
    parser.add_argument("--kv-type", type=kv_type_from_text, default=None, metavar="TYPE",
                        help=KV_TYPE_HELP)
    parser.add_argument("--max-batched-tokens", type=int, default=512, metavar="N",
                        help="token budget of one forward step: decodes first, then prompt "
                             "chunks (default: %(default)s)")
    parser.add_argument("--max-queue", type=int, default=64, metavar="N",
                        help="requests that may wait for admission; more get HTTP 503 "
                             "(default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=512, metavar="N",
                        help="max_tokens of a request that does not set it "
                             "(default: %(default)s)")
    parser.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                        help="do not reuse the KV cache of repeated prompt prefixes")
    parser.add_argument("--prompt-cache-dir", metavar="DIR", default=None,
                        help="keep long prompt prefixes' KV cache in DIR/ID, one "
                             "subdirectory per served model (safetensors files), and load "
                             "them when the model loads, so a restart does not prefill them "
                             "again; a file of another model or KV type is skipped with a "
                             "warning (default: none)")
    parser.add_argument("--prompt-cache-min-tokens", type=int, default=1024, metavar="N",
                        help="with --prompt-cache-dir: write the prefix of a prompt of at "
                             "least N tokens (default: %(default)s)")
    parser.add_argument("--prompt-cache-max-bytes", type=int, default=4 << 30, metavar="N",
                        help="with --prompt-cache-dir: delete a model's least recently used "
                             "files beyond N bytes (default: %(default)s, 4 GiB)")
    parser.add_argument("--spec-type", choices=("ngram", "draft", "mtp"), default=None,
                        help="speculative decoding, as for `metalrt generate` (default: none, "
                             "or 'draft' with --draft-model)")
    parser.add_argument("--draft-model", metavar="PATH", default=None,
                        help="a smaller model with the same tokenizer that drafts tokens")
    parser.add_argument("--num-draft-tokens", type=int, default=None, metavar="K",
                        help="tokens drafted per verify step, with --spec-type or "
                             f"--draft-model (default: {SpeculativeConfig.num_draft_tokens})")
    parser.add_argument("--reasoning-format", choices=("auto", "deepseek", "none"),
                        default="auto",
                        help="reasoning_content: split <think>...</think> off content for a "
                             "chat template that uses it (auto), for every model (deepseek), "
                             "or never (none) (default: %(default)s)")
    parser.add_argument("--chat-template", metavar="FILE", default=None,
                        help="a jinja2 chat template used instead of the model's")
    parser.add_argument("--api-key", metavar="KEY", default=None,
                        help="require this key (Authorization: Bearer KEY or x-api-key: KEY) "
                             "on every path but /health; default: $METALRT_API_KEY, else none")
    parser.add_argument("--ray", action="store_true",
                        help="serve through Ray Serve: --ray-replicas engine replicas behind "
                             "one endpoint on --host:--port, autoscaled on ongoing requests, "
                             "a dead replica restarted (needs the extra: pip install "
                             "'metalrt[ray]'; docs/serving.md)")
    parser.add_argument("--ray-replicas", type=int, default=2, metavar="N",
                        help="with --ray: engine replicas to run (default: %(default)s)")
    parser.add_argument("--ray-max-replicas", type=int, default=0, metavar="N",
                        help="with --ray: autoscale up to N replicas on ongoing requests "
                             "(default: a fixed --ray-replicas)")
    parser.add_argument("--ray-address", default=None, metavar="ADDRESS",
                        help="with --ray or --pipeline-stages: the Ray cluster to join, e.g. "
                             "auto or HOST:6379 "
                             "(default: start a local one)")
    parser.add_argument("--ray-cpus-per-replica", type=float, default=1.0, metavar="N",
                        help="with --ray: Ray CPUs each replica reserves (default: %(default)s)")
    parser.add_argument("--ray-max-ongoing-requests", type=int, default=0, metavar="N",
                        help="with --ray: requests one replica holds at most; Ray Serve "
                             "routes the rest to the other replicas (default: --max-queue + 1)")
    parser.add_argument("--pipeline-stages", type=int, default=0, metavar="K",
                        help="split each model's layers over K processes (Ray actors, on "
                             "the cluster of --ray-address, else a local one), each holding "
                             "its layers' weights only; a step is cut into K micro-batches "
                             "(needs the extra 'metalrt[ray]'; default: one process)")
    parser.add_argument("--pipeline-cpus-per-stage", type=float, default=1.0, metavar="N",
                        help="with --pipeline-stages: Ray CPUs each stage reserves; the "
                             "stages start only when that many are free (default: "
                             "%(default)s)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default: %(default)s)")


def check_settings(model, kv_cache_tokens: int, max_batched_tokens: int, max_queue: int,
                   max_tokens: int, prefix_cache: bool, spec_type: Optional[str],
                   draft_model: Optional[str], chat_template: Optional[str],
                   prompt_cache_dir: Optional[str], pipeline_stages: int,
                   pipeline_cpus_per_stage: float, kv_type=None, **_):
    """(model entries, chat template text or None) of ``build_app``'s settings (the
    extra ones ignored), checked without loading anything: what ``build_app`` checks
    first, and ``serve --ray`` in the driver before Ray starts (a bad setting is then one
    error line, not one failure per replica). Raises ValueError as ``build_app``
    documents."""
    for name, value, least in (("kv_cache_tokens", kv_cache_tokens, 1),
                               ("max_batched_tokens", max_batched_tokens, 1),
                               ("max_tokens", max_tokens, 1), ("max_queue", max_queue, 0),
                               ("pipeline_stages", pipeline_stages, 0),
                               ("pipeline_cpus_per_stage", pipeline_cpus_per_stage, 0)):
        if value < least:
            raise ValueError(f"[serve] --{name.replace('_', '-')} must be >= {least}, got {value}")
    entries = model_entries([model] if isinstance(model, str) else model)
    if draft_model is not None and len(entries) > 1:
        raise ValueError("[serve] --draft-model drafts for one model; it cannot be used with "
                         "several --model")
    if pipeline_stages and (spec_type or draft_model or prompt_cache_dir or kv_type):
        raise ValueError("[serve] --pipeline-stages runs without speculation, without a "
                         "prompt-cache directory and with the model's KV cache type (drop "
                         "--spec-type, --draft-model, --prompt-cache-dir, --kv-type)")
    if prompt_cache_dir is not None and not prefix_cache:
        raise ValueError("[serve] --prompt-cache-dir needs the prefix cache "
                         "(drop --no-prefix-cache)")
    template = None
    if chat_template is not None:
        try:
            with open(chat_template, encoding="utf-8") as f:
                template = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"[serve] --chat-template {chat_template}: {e}") from None
        _check_template(chat_template, template)
    return entries, template


def _check_template(path: str, template: str) -> None:
    """ValueError naming ``path`` and jinja2's error when ``template`` does not parse
    (found at startup, not by each request)."""
    import jinja2

    from ..tokenizer import chat_template_environment

    try:
        chat_template_environment().parse(template)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"[serve] --chat-template {path} is not a valid jinja2 template: "
                         f"line {e.lineno}: {e.message}") from None


def build_app(model: Union[None, str, Sequence[str]] = None, device: str = "auto",
              kv_cache_tokens: int = 8192,
              max_batched_tokens: int = 512, max_queue: int = 64, max_tokens: int = 512,
              prefix_cache: bool = True, spec_type: Optional[str] = None,
              draft_model: Optional[str] = None, num_draft_tokens: int = 4,
              reasoning_format: str = "auto", chat_template: Optional[str] = None,
              api_key: Optional[str] = None, max_memory: Optional[int] = None,
              prompt_cache_dir: Optional[str] = None, prompt_cache_min_tokens: int = 1024,
              prompt_cache_max_bytes: int = 4 << 30, kv_type=None, pipeline_stages: int = 0,
              ray_address: Optional[str] = None, pipeline_cpus_per_stage: float = 1.0):
    """Loads the (first) model and returns the FastAPI application serving it (its
    engine loops stop when the application shuts down). The settings are those of
    ``metalrt serve``; this is also the builder a host such as Ray Serve calls in each
    replica (docs/serving.md). ``model``: one ``--model`` value or a list of them
    (``model_registry.model_entries``); the models after the first load on first use,
    each with its own engine and KV cache of ``kv_cache_tokens``; ``max_memory``: their
    budget in bytes; ``kv_type``: their KV caches' type (``metalrt.load``'s).
    ``chat_template``: a jinja2 file replacing the model's template.
    ``prompt_cache_dir``: prompt prefixes on disk, each model's in its subdirectory
    ``prompt_cache_dir/ID`` (``prompt_cache_dir.PromptCacheDir``, bounded by
    ``prompt_cache_max_bytes`` each). ``pipeline_stages`` > 0: each model's layers split
    over that many Ray actors (``metalrt.pipeline.load_pipeline``, in the cluster at
    ``ray_address`` unless this process is in one already), each reserving
    ``pipeline_cpus_per_stage`` Ray CPUs, a step cut into as many micro-batches.
    Raises ValueError for a setting out of range, an unreadable
    template, a missing model path, a draft model with several models, or pipeline
    stages with speculation, a prompt-cache directory or a KV cache type, before loading."""
    entries, template = check_settings(
        model, kv_cache_tokens, max_batched_tokens, max_queue, max_tokens, prefix_cache,
        spec_type, draft_model, chat_template, prompt_cache_dir, pipeline_stages,
        pipeline_cpus_per_stage, kv_type=kv_type)
    import metalrt

    from ..cache import BLOCK_SIZE, blocks_for
    from .app import create_app
    from .engine_loop import EngineLoop
    from .model_registry import ModelRegistry, weight_bytes
    from .served_model import ServedModel

    from ..default_model import default_model_path
    from ..generation import speculative_config
    from .prompt_cache_dir import PromptCacheDir

    # One subdirectory per model: a model loads only its own files (no warning for each
    # file of the others) and its writes never evict another model's prefixes.
    disks = {} if prompt_cache_dir is None else {
        name: PromptCacheDir(os.path.join(prompt_cache_dir, name), prompt_cache_min_tokens,
                             prompt_cache_max_bytes) for name in entries}

    def load(name: str, path: Optional[str]) -> ServedModel:
        if pipeline_stages:
            from ..pipeline import load_pipeline

            loaded, tokenizer = load_pipeline(path, pipeline_stages, pipeline_stages,
                                              device=device, address=ray_address,
                                              cpus_per_stage=pipeline_cpus_per_stage)
        else:
            loaded, tokenizer = metalrt.load(path, device=device, kv_type=kv_type)
        if template is not None:
            tokenizer.chat_template = template
        draft = None if draft_model is None else metalrt.load(draft_model, device=device)[0]
        spec = speculative_config(loaded, spec_type, draft, num_draft_tokens,
                                  max_batched_tokens, blocks_for(kv_cache_tokens) * BLOCK_SIZE)
        loop = EngineLoop(loaded, tokenizer, blocks_for(kv_cache_tokens), max_batched_tokens,
                          max_queue, prefix_cache, spec, disks.get(name))
        return ServedModel(name, loop, weight_bytes(path or default_model_path()),
                           reasoning_format, release=loaded.close if pipeline_stages else None)

    registry = ModelRegistry(entries, load, max_memory)
    registry.load_now(registry.ids[0])
    return create_app(registry, max_tokens, api_key)


def _check_can_listen(host: str, port: int) -> None:
    """ValueError when ``host:port`` cannot be bound (in use, an unknown host), checked
    before the model loads: uvicorn would find out only after loading it, and exit with
    its own log line and status 3 instead of ``metalrt: error:`` and 1."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn binds
            probe.bind(address)
    except OSError as e:
        raise ValueError(f"[serve] cannot listen on {host}:{port}: {e.strerror or e}") from None


def serve(args: argparse.Namespace) -> int:
    """``metalrt serve``: builds the application and runs uvicorn until interrupted."""
    if not 0 < args.port < 65536:
        raise ValueError(f"[serve] --port must be in 1-65535, got {args.port}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        if not (args.api_key or os.environ.get("METALRT_API_KEY")):
            print(f"metalrt: warning: binding {args.host}: the API has no authentication "
                  f"(--api-key)", file=sys.stderr)
    try:
        import uvicorn
    except ImportError:
        print("metalrt: error: the server needs its extra: pip install 'metalrt[serve]'",
              file=sys.stderr)
        return 1
    _check_can_listen(args.host, args.port)
    settings = dict(
        model=args.model, device=args.device, kv_cache_tokens=args.kv_cache_tokens,
        max_batched_tokens=args.max_batched_tokens, max_queue=args.max_queue,
        max_tokens=args.max_tokens, prefix_cache=args.prefix_cache, spec_type=args.spec_type,
        draft_model=args.draft_model, num_draft_tokens=args.num_draft_tokens,
        reasoning_format=args.reasoning_format, chat_template=args.chat_template,
        api_key=args.api_key or os.environ.get("METALRT_API_KEY"),
        max_memory=args.max_memory, prompt_cache_dir=args.prompt_cache_dir,
        prompt_cache_min_tokens=args.prompt_cache_min_tokens,
        prompt_cache_max_bytes=args.prompt_cache_max_bytes, kv_type=args.kv_type,
        pipeline_stages=args.pipeline_stages, ray_address=args.ray_address,
        pipeline_cpus_per_stage=args.pipeline_cpus_per_stage)
    if args.pipeline_stages:
        from ..pipeline import require_ray

        try:
            require_ray()
        except RuntimeError as e:
            print(f"metalrt: error: {e}", file=sys.stderr)
            return 1
    if args.ray:
        from . import ray_serve

        check_settings(**settings)   # here, before Ray: each replica would fail on its own

        try:
            ray_serve.import_ray_app()
        except RuntimeError as e:
            print(f"metalrt: error: {e}", file=sys.stderr)
            return 1
        return ray_serve.run(build_app, settings, args.host, args.port, args.ray_replicas,
                             args.ray_max_replicas, args.ray_address,
                             args.ray_cpus_per_replica, args.ray_max_ongoing_requests)
    app = build_app(**settings)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
