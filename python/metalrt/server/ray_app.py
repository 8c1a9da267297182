"""metalrt under Ray Serve: engine replicas behind one OpenAI/Anthropic-compatible
endpoint (``metalrt serve --ray``).

Two deployments: ``EngineReplica`` runs the whole metalrt application that
``main.build_app`` builds (one model set, its engine loops and KV caches) and
answers requests in-process through ``asgi_stream``; ``Router`` is the HTTP ingress, which forwards each
request to a replica picked by Ray Serve's router (fewest ongoing requests) and streams
the reply back. Ray Serve autoscales ``EngineReplica`` on ongoing requests and restarts
a replica whose process dies. The router exists for what a plain ingress cannot do: end
a stream whose replica died with an error event in the API's own shape (instead of a
cut connection), send a request that reached a dead replica to a live one, and serve
``/metrics`` for all replicas at once. Importing this module needs ``ray[serve]``
(the ``metalrt[ray]`` extra); ``ray_serve`` is the entry point that says so.
"""

import asyncio
import logging
import os
import time
from typing import Dict

import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from ray import serve

from . import anthropic_format, openai_format
from .api_key import authorized, key_headers, unauthorized_body
from .asgi_stream import asgi_stream
from .metrics_merge import merge_metrics
from .sse import typed

APP_NAME = "metalrt"   # the Ray Serve application (serve.run's name)
# The board's fixed name and namespace: each run finds (and at its end kills) its
# application's board, instead of leaving one per run in an anonymous namespace.
BOARD_NAME, BOARD_NAMESPACE = f"metrics-board:{APP_NAME}", "metalrt"
PUSH_INTERVAL_S = 1.0
# A replica that has not pushed for this long is dead or gone: its metrics are dropped.
STALE_AFTER_S = 10.0
# Errors of a call whose replica died (the actor process is gone or unreachable).
REPLICA_ERRORS = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
REPLICA_HEADER = "x-metalrt-replica"
log = logging.getLogger("ray.serve")
# The router only forwards bytes: it holds every request the replicas are serving.
ROUTER_MAX_ONGOING = 4096


@ray.remote(num_cpus=0)
class MetricsBoard:
    """The latest ``/metrics`` text of each live replica, which a replica pushes every
    ``PUSH_INTERVAL_S`` and the router reads (a replica cannot be asked directly: a
    handle call reaches one replica of Ray Serve's choosing)."""

    def __init__(self):
        self.texts: Dict[str, tuple] = {}

    def put(self, replica: str, text: str) -> None:
        self.texts[replica] = (time.monotonic(), text)

    def snapshot(self) -> Dict[str, str]:
        now = time.monotonic()
        for replica in [r for r, (at, _) in self.texts.items() if now - at > STALE_AFTER_S]:
            del self.texts[replica]
        return {r: text for r, (_, text) in self.texts.items()}


def metrics_board():
    """The application's one ``MetricsBoard`` (``BOARD_NAME`` in ``BOARD_NAMESPACE``),
    created by whoever asks first. Detached: an actor owned by a replica would die with
    it; ``kill_metrics_board`` ends it."""
    return MetricsBoard.options(name=BOARD_NAME, namespace=BOARD_NAMESPACE,
                                get_if_exists=True, lifetime="detached").remote()


def kill_metrics_board() -> None:
    """Ends the application's ``MetricsBoard`` (a detached actor outlives the driver
    on a cluster that keeps running), if there is one."""
    try:
        board = ray.get_actor(BOARD_NAME, namespace=BOARD_NAMESPACE)
    except ValueError:   # none: never created, or killed already
        return
    ray.kill(board)


@serve.deployment
class EngineReplica:
    """One metalrt application (``build(**settings)``, ``main.build_app``) in a Ray Serve
    replica; ``handle(request)`` streams its reply: a start dict, then body chunks."""

    async def __init__(self, build, settings: dict):
        self.app = build(**settings)
        # The replica reads its own /metrics as any client does: with the key, if any.
        self.metrics_headers = key_headers(settings.get("api_key"))
        lifespan = self.app.router.lifespan_context(self.app)
        await lifespan.__aenter__()
        self.lifespan = lifespan
        self.name = f"{serve.get_replica_context().replica_tag}:{os.getpid()}"
        self.board = metrics_board()
        self.pusher = asyncio.get_running_loop().create_task(self._push_metrics())

    async def _push_metrics(self) -> None:
        while True:
            chunks = [c async for c in asgi_stream(self.app, "GET", "/metrics", "",
                                                   self.metrics_headers, b"")]
            if chunks[0]["status"] == 200:
                self.board.put.remote(self.name, b"".join(chunks[1:]).decode("utf-8"))
            else:   # not exposition text: merging it would fail the router's /metrics
                log.warning("replica %s: /metrics answered %d", self.name, chunks[0]["status"])
            await asyncio.sleep(PUSH_INTERVAL_S)

    async def check_health(self) -> None:
        """Ray Serve's health check: raises (and Ray Serve replaces this replica) when
        the application's ``/health`` is not 200, e.g. 503 for a pipeline whose stage
        died."""
        chunks = [c async for c in asgi_stream(self.app, "GET", "/health", "", [], b"")]
        if chunks[0]["status"] != 200:
            raise RuntimeError(f"replica {self.name}: /health answered {chunks[0]['status']}: "
                               f"{b''.join(chunks[1:]).decode('utf-8', 'replace')}")

    async def handle(self, request: dict):
        async for item in asgi_stream(self.app, **request):
            if isinstance(item, dict):
                item["headers"].append((REPLICA_HEADER, self.name))
            yield item

    async def __del__(self):
        # Also called when __init__ raised: only what it got to is undone.
        if hasattr(self, "pusher"):
            self.pusher.cancel()
        if hasattr(self, "lifespan"):
            await self.lifespan.__aexit__(None, None, None)


def _stream_error(path: str, message: str) -> bytes:
    """The event that ends a stream whose replica died, in the shape of ``path``'s API
    (the official clients raise or report it rather than waiting on a cut stream)."""
    if path.startswith("/v1/messages"):
        events = anthropic_format.MessagesResponse.stream_error(message)
    elif path.startswith("/v1/responses"):
        events = [typed({"type": "error", "code": "server_error", "message": message,
                         "param": None, "sequence_number": 0})]
    else:
        events = openai_format.Response.stream_error(message)
    return "".join(events).encode("utf-8")


router_app = FastAPI(title="metalrt (Ray Serve)", docs_url=None, redoc_url=None)


@serve.deployment
@serve.ingress(router_app)
class Router:
    """The HTTP ingress: every path but ``/metrics`` goes to an ``EngineReplica``
    (whose application checks ``api_key`` as the single server does); ``/metrics`` is
    answered here, and needs ``api_key`` likewise (``api_key.authorized``)."""

    def __init__(self, engine, api_key=None):
        self.engine, self.api_key = engine, api_key
        self.board = metrics_board()

    @router_app.get("/metrics")
    async def metrics(self, http: Request) -> Response:
        if self.api_key is not None and not authorized(http.headers, http.url.path,
                                                       self.api_key):
            return JSONResponse(unauthorized_body(), status_code=401)
        texts = await self.board.snapshot.remote()
        return Response(merge_metrics(texts), media_type=CONTENT_TYPE_LATEST)

    @router_app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def forward(self, path: str, http: Request) -> Response:
        request = {"method": http.method, "path": "/" + path, "query": http.url.query,
                   "headers": list(http.headers.items()), "body": await http.body()}
        # A replica that died before answering took nothing of the reply with it: try
        # another once (Ray Serve stops routing to it when the controller notices).
        for attempt in range(3):
            stream = self.engine.handle.options(stream=True).remote(request)
            try:
                start = await stream.__anext__()
                break
            except REPLICA_ERRORS:
                if attempt == 2:
                    return JSONResponse(openai_format.error_body(
                        "no engine replica answered", "server_error"), status_code=503)
                await asyncio.sleep(0.5)
        headers = {k: v for k, v in start["headers"] if k.lower() != "content-length"}
        streamed = headers.get("content-type", "").startswith("text/event-stream")

        async def body():
            try:
                async for chunk in stream:
                    yield chunk
            except REPLICA_ERRORS:
                if streamed:
                    yield _stream_error(request["path"], "the engine replica serving this "
                                        "stream died; retry the request")

        return StreamingResponse(body(), status_code=start["status"], headers=headers)


def application(build, settings: dict, replicas: int = 1, max_replicas: int = 0,
                target_ongoing_requests: float = 8.0, cpus_per_replica: float = 1.0,
                max_ongoing_requests: int = 0):
    """The Ray Serve application (``serve.run`` it): ``replicas`` engine replicas each
    running ``build(**settings)`` (``main.build_app``, passed in by reference: Ray
    imports it in each replica), autoscaled between ``replicas`` and
    ``max_replicas`` on ``target_ongoing_requests`` per replica when ``max_replicas`` >
    ``replicas`` (else a fixed count), each reserving ``cpus_per_replica`` of Ray's CPUs
    and holding at most ``max_ongoing_requests`` requests (0: the engine's ``max_queue``
    + 1; Ray Serve sends a replica no more and routes the rest to the others). Raises
    ValueError for counts out of range."""
    if replicas < 1:
        raise ValueError(f"[serve] --ray-replicas must be >= 1, got {replicas}")
    if not cpus_per_replica >= 0:
        raise ValueError(f"[serve] --ray-cpus-per-replica must be >= 0, got {cpus_per_replica}")
    if max_ongoing_requests < 0:
        raise ValueError(f"[serve] --ray-max-ongoing-requests must be >= 0, got "
                         f"{max_ongoing_requests}")
    if max_replicas and max_replicas < replicas:
        raise ValueError(f"[serve] --ray-max-replicas ({max_replicas}) must be >= "
                         f"--ray-replicas ({replicas})")
    # A replica admits up to its engine's --max-queue (default 64) and queues the rest
    # itself; Ray Serve's own cap (default 5) would hold requests back from the batch.
    options = {"ray_actor_options": {"num_cpus": cpus_per_replica},
               "max_ongoing_requests": max_ongoing_requests or settings.get("max_queue", 64) + 1}
    if max_replicas > replicas:
        options["autoscaling_config"] = {
            "min_replicas": replicas, "max_replicas": max_replicas,
            "target_ongoing_requests": target_ongoing_requests}
    else:
        options["num_replicas"] = replicas
    engine = EngineReplica.options(**options).bind(build, settings)
    return Router.options(num_replicas=1, max_ongoing_requests=ROUTER_MAX_ONGOING,
                          ray_actor_options={"num_cpus": 0}).bind(engine,
                                                                  settings.get("api_key"))
