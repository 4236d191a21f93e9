"""Serving on Ray Serve: ``serve_app(...)`` runs the FastAPI app that ``llamapy serve`` builds
(``llamapy.server.app.create_app``: every OpenAI, Ollama, Anthropic and other route, the API
keys, the limits, streaming) as Serve replicas, one model per replica.

Each replica builds the app from the same ``Settings`` and loads the model before Serve sends
it traffic (a model that cannot load fails the replica's start with the reason). Resources
per replica: ``num_cpus`` = the threads (``--threads``, default 1), and ``memory`` = what
``llamapy.plan_memory`` predicts for the model with these settings, so Ray places replicas
only where they fit. Serve's proxy routes requests across replicas, restarts a replica whose
process dies and, with ``autoscaling_config``, adds or removes replicas by their ongoing
requests (target: the slots a replica has, ``--parallel``). Every response carries
``x-llamapy-replica``: which replica answered (Serve's replica id).

Router mode (``models_dir`` / ``models_preset``, no model): several models sharing replicas
through Serve's model multiplexing, in ``multiplex.py``.
"""
from __future__ import annotations

import asyncio
import sys
import logging
from typing import Any, Dict, List, Optional

from ray import serve

from ..server.config import OPTIONS, ConfigError, Settings, _convert, apply_implied, check

logger = logging.getLogger("llamapy.ray")

REPLICA_HEADER = "x-llamapy-replica"


def settings_for(model: Optional[str] = None, settings: Optional[Settings] = None, **flags: Any) -> Settings:
    """Server settings from a ``Settings`` (``llamapy.server.config.parse_settings``), or from
    the defaults with ``model`` and ``flags`` (the server's options by their long names with
    underscores: ``ctx_size=2048``, ``api_key=["k"]``, ``parallel=4``)."""
    if settings is not None:
        if model is not None or flags:
            raise TypeError("pass settings, or model and server flags, not both")
        values = dict(settings.values)
    else:
        by_dest = {opt.dest: opt for opt in OPTIONS}
        values = {opt.dest: opt.default for opt in OPTIONS}
        values["model"] = model
        for key, value in flags.items():
            if key not in by_dest:
                raise TypeError(f"serve_app: unknown server option {key!r}")
            values[key] = _convert(by_dest[key], value, "serve_app")
        apply_implied(values)
        check(values)
    return Settings(values, settings.explicit if settings is not None else frozenset(flags))


def planned_bytes(values: Dict[str, Any]) -> int:
    """What ``llamapy.plan_memory`` predicts for one model served with these settings
    (weights, KV cache for --parallel slots, compute buffers, projector)."""
    from ..memory_plan import plan_memory

    return int(plan_memory(values["model"], n_ctx=values["ctx_size"], n_parallel=max(1, values["parallel"]),
                           type_k=values["cache_type_k"], type_v=values["cache_type_v"],
                           n_gpu_layers=values["n_gpu_layers"], mmproj=values["mmproj"], n_batch=values["batch_size"],
                           n_ubatch=values["ubatch_size"], flash_attn=values["flash_attn"],
                           n_threads=values["threads"] or 1, embedding=bool(values["embedding"])).total_bytes)


def replica_resources(settings: Settings) -> Dict[str, Any]:
    """Ray resources of one replica: its threads as CPUs, and the model's planned memory."""
    return {"num_cpus": float(settings.threads or 1), "memory": planned_bytes(settings.values)}


class ReplicaHeader:
    """ASGI middleware: ``x-llamapy-replica`` on every response (which replica answered)."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app, self.value = app, replica.encode("latin-1")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_header(msg: Any) -> None:
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": [*msg.get("headers", []), (REPLICA_HEADER.encode(), self.value)]}
            await send(msg)

        await self.app(scope, receive, send_with_header)


def add_replica_header(app: Any) -> None:
    try:
        replica = serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 - outside a replica (not expected): no id to show
        replica = "unknown"
    app.add_middleware(ReplicaHeader, replica=replica)


@serve.ingress()
class LlamapyReplica:
    """One replica: the server's app on its own copy of the model."""

    def __init__(self, values: Dict[str, Any]) -> None:
        self.settings = Settings(dict(values))

    async def __serve_build_asgi_app__(self) -> Any:
        from ..server.app import create_app
        from .batch import actor_threads

        if self.settings.threads is None:  # the CPUs Ray gave this replica
            self.settings.values["threads"] = actor_threads()
        app = create_app(self.settings)
        add_replica_header(app)
        runner = app.state.server.runner
        runner.start()  # the load; the app's startup calls it again (a no-op)
        await asyncio.to_thread(runner.loaded.wait)
        if runner.state != "ready":
            runner.stop()
            raise RuntimeError(f"the model {self.settings.model} failed to load: {runner.error or runner.state}")
        return app

    def check_health(self) -> None:
        """Serve's periodic check: a replica whose model is not ready is replaced."""
        runner = self.app.state.server.runner  # type: ignore[attr-defined]
        if runner.state != "ready":
            raise RuntimeError(f"the model is not ready: {runner.error or runner.state}")


def serve_app(model: Optional[str] = None, *, settings: Optional[Settings] = None, num_replicas: int = 1,
              autoscaling_config: Optional[Dict[str, Any]] = None, ray_actor_options: Optional[Dict[str, Any]] = None,
              name: str = "llamapy", **flags: Any) -> Any:
    """A Ray Serve application (``serve.run(serve_app(...))``) of ``llamapy serve``'s app.

    ``model`` and ``flags`` (or ``settings``): as ``llamapy serve`` takes them (see
    ``settings_for``). ``num_replicas``: a fixed count; or ``autoscaling_config`` (Serve's:
    min_replicas, max_replicas, ...; target_ongoing_requests defaults to --parallel).
    ``ray_actor_options``: overrides of ``replica_resources`` (num_cpus, memory, num_gpus...).
    Without a model, ``models_dir`` / ``models_preset`` (router mode) make every replica serve
    every preset model, ``models_max`` of them loaded at once (``multiplex.py``).
    Raises ConfigError for bad settings."""
    s = settings_for(model, settings, **flags)
    if s.router_mode:
        from .multiplex import preset_models, replica_class, replica_memory

        models = preset_models(s)
        resources = {"num_cpus": float(s.threads or 1), "memory": replica_memory(models, s.models_max)}
    else:
        resources = replica_resources(s)
    options = {**resources, **(ray_actor_options or {})}
    deploy: Dict[str, Any] = {"name": name, "ray_actor_options": options,
                              # Serve sends a replica what its slots and queue take; beyond that
                              # it holds requests itself (the app would answer 503).
                              "max_ongoing_requests": max(1, s.parallel) + s.queue_max}
    if autoscaling_config is not None:
        deploy["autoscaling_config"] = {"target_ongoing_requests": max(1, s.parallel), **autoscaling_config}
    else:
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, not {num_replicas}")
        deploy["num_replicas"] = num_replicas
    logger.info("Ray Serve app %s: model %s, %s, per replica %s", name, s.model,
                deploy.get("autoscaling_config") or f"{num_replicas} replica(s)", options)
    if s.router_mode:
        return serve.deployment(replica_class(s.models_max), **deploy).bind(dict(s.values), models)
    return serve.deployment(LlamapyReplica, **deploy).bind(dict(s.values))


def run_cli(settings: Settings, replicas: int, address: Optional[str], autoscale: Optional[List[int]]) -> int:
    """``llamapy serve --ray``: the app on Serve's proxy at --host:--port, until interrupted."""
    import time

    from .jobs import init_ray

    try:
        auto = None
        if autoscale is not None:
            auto = {"min_replicas": autoscale[0], "max_replicas": autoscale[1]}
        app = serve_app(settings=settings, num_replicas=replicas, autoscaling_config=auto)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    init_ray(address)
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(app, name="llamapy", route_prefix="/")
    print(f"llamapy on Ray Serve: http://{settings.host}:{settings.port} (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.delete("llamapy")
        return 0
