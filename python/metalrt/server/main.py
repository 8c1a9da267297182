"""Settings and start-up of ``metalrt serve`` (and ``python -m metalrt.server``)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

DEFAULT_PORT = 8080


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's command-line settings (shared by ``metalrt serve`` and
    ``python -m metalrt.server``)."""
    parser.add_argument("--model", metavar="PATH", default=None,
                        help="a .gguf file or a Hugging Face model directory; default: "
                             "SmolLM2-135M-Instruct Q4_1, downloaded on first use")
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
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default: %(default)s)")


def model_id(path: Optional[str]) -> str:
    """The id ``/v1/models`` reports: the model file or directory name without .gguf."""
    from ..default_model import FILENAME

    name = os.path.basename(os.path.normpath(path)) if path else FILENAME
    return name[:-len(".gguf")] if name.endswith(".gguf") else name


def serve(args: argparse.Namespace) -> int:
    """Loads the model, starts the engine loop and runs uvicorn until interrupted.
    ValueError for settings out of range (before the model loads)."""
    for name in ("kv_cache_tokens", "max_batched_tokens", "max_tokens", "port"):
        if getattr(args, name) < 1:
            raise ValueError(f"[serve] --{name.replace('_', '-')} must be >= 1, "
                             f"got {getattr(args, name)}")
    if args.max_queue < 0:
        raise ValueError(f"[serve] --max-queue must be >= 0, got {args.max_queue}")
    try:
        import uvicorn
    except ImportError:
        print("metalrt: error: the server needs its extra: pip install 'metalrt[serve]'",
              file=sys.stderr)
        return 1

    import metalrt

    from ..runner import blocks_for
    from .app import create_app
    from .engine_loop import EngineLoop

    model, tokenizer = metalrt.load(args.model, device=args.device)
    loop = EngineLoop(model, tokenizer, blocks_for(args.kv_cache_tokens),
                      args.max_batched_tokens, args.max_queue, args.prefix_cache)
    try:
        app = create_app(loop, model_id(args.model), args.max_tokens)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        loop.close()
    return 0
