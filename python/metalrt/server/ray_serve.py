"""``metalrt serve --ray``: starts (or joins) a Ray cluster and runs ``ray_app``'s
application under Ray Serve until interrupted."""
from __future__ import annotations

from typing import Optional

RAY_EXTRA = "pip install 'metalrt[ray]'"


def import_ray_app():
    """The ``ray_app`` module; RuntimeError naming the extra when Ray Serve is missing."""
    try:
        from . import ray_app
    except ImportError as e:
        if "ray" not in str(e):
            raise
        raise RuntimeError(f"[serve] --ray needs Ray Serve ({e}): {RAY_EXTRA}") from None
    return ray_app


def check_cluster_cpus(replicas: int, cpus_per_replica: float, stages: int,
                       cpus_per_stage: float) -> None:
    """ValueError, naming the numbers and the flags, when the Ray cluster this process
    is in has fewer CPUs (``ray.cluster_resources``) than ``replicas`` replicas of
    ``cpus_per_replica`` each, with ``stages`` pipeline stages of ``cpus_per_stage``
    each, reserve: Ray Serve would wait for them without a word."""
    import ray

    need = replicas * (cpus_per_replica + stages * cpus_per_stage)
    total = ray.cluster_resources().get("CPU", 0.0)
    if need > total:
        raise ValueError(
            f"[serve] {replicas} replicas x ({cpus_per_replica:g} + {stages} stages x "
            f"{cpus_per_stage:g}) Ray CPUs (--ray-replicas, --ray-cpus-per-replica, "
            f"--pipeline-stages, --pipeline-cpus-per-stage) need {need:g} CPUs; the Ray "
            f"cluster has {total:g}")


def run(build, settings: dict, host: str, port: int, replicas: int, max_replicas: int,
        address: Optional[str], cpus_per_replica: float,
        max_ongoing_requests: int = 0) -> int:
    """Serves ``build(**settings)`` (``main.build_app``) as ``replicas`` (up to ``max_replicas``,
    autoscaled; each holding at most ``max_ongoing_requests``, 0: its
    engine's queue) engine replicas behind Ray Serve's HTTP proxy on ``host:port``, in the
    Ray cluster at ``address`` (None: start a local one). Blocks until interrupted."""
    ray_app = import_ray_app()
    import ray
    from ray import serve

    target = ray_app.application(build, settings, replicas, max_replicas,
                                 cpus_per_replica=cpus_per_replica,
                                 max_ongoing_requests=max_ongoing_requests)
    # None: a cluster of its own, as documented, not one a `ray start` left on the host.
    ray.init(address=address or "local", include_dashboard=False, log_to_driver=True)
    try:
        check_cluster_cpus(replicas, cpus_per_replica, settings.get("pipeline_stages", 0),
                           settings.get("pipeline_cpus_per_stage", 1.0))
        serve.start(http_options={"host": host, "port": port})
        serve.run(target, name=ray_app.APP_NAME, route_prefix="/", blocking=True)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray_app.kill_metrics_board()
        ray.shutdown()
    return 0
