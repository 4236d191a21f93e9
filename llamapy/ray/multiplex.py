"""Router presets on Ray Serve: several models sharing replicas through Serve's model
multiplexing, as the single-machine router (``--models-dir`` / ``--models-preset``) shares one
machine.

Every replica can serve every model of the presets (``llamapy.server.presets.model_entries``:
the same names, aliases and per-model settings as the router). A request names its model by
Serve's ``serve_multiplexed_model_id`` header (then Serve's proxy routes it to a replica that
has the model loaded) or, as OpenAI and Ollama clients do, by the body's ``model`` field (the
replica it reached loads it). A replica keeps at most ``--models-max`` models loaded, each as
its own ``create_app`` (the one-model server's app, whose routes answer), and unloads the least
recently used one to load another (``@serve.multiplexed``). The API key, Host / Origin checks
and body limit run before a model is named, so an unauthenticated request loads nothing.

Not here: ``/models/load`` and ``/models/unload`` of the router (Serve decides what is
loaded), the router's memory margin (Ray's ``memory`` resource per replica: the sum of the
``--models-max`` largest memory plans).
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Dict, Optional
from urllib.parse import parse_qs

from ray import serve

from ..server.config import Settings

logger = logging.getLogger("llamapy.ray")

# Paths answered by the replica itself (no model named): the model list and the health check.
LIST_PATHS = ("/v1/models", "/models")
HEALTH_PATHS = ("/health", "/v1/health")


def preset_models(settings: Settings) -> Dict[str, Dict[str, Any]]:
    """Model name -> the settings of its one-model server (the router's own settings, then the
    model's resolved ones, as the router gives its child servers); aliases -> the same."""
    from ..server.presets import model_entries

    out: Dict[str, Dict[str, Any]] = {}
    for name, entry in model_entries(settings).items():
        values = {**settings.values, **entry.settings, "model": entry.path, "models_dir": None,
                  "models_preset": None, "alias": name, "problem": entry.problem}
        for n in (name, *entry.aliases):
            out[n] = values
    return out


def replica_memory(models: Dict[str, Dict[str, Any]], models_max: int) -> int:
    """Bytes a replica may need: the ``models_max`` largest memory plans together."""
    from .serve import planned_bytes

    distinct = {id(v): v for v in models.values()}.values()  # aliases share their model's values
    sizes = sorted((planned_bytes(v) for v in distinct if not v["problem"]), reverse=True)
    return sum(sizes[:models_max])


class LoadedModel:
    """One model's app on this replica; Serve calls ``__del__`` when it evicts it, which stops
    its runner (the model is closed) and calls ``on_close``."""

    def __init__(self, app: Any, on_close: Any = None) -> None:
        self.app, self.on_close, self._stopped = app, on_close, False

    def __del__(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.app.state.server.runner.stop()
            if self.on_close is not None:
                self.on_close()


async def load_model_app(values: Dict[str, Any], on_close: Any = None) -> LoadedModel:
    """``create_app`` for one model, loaded (its runner started and ready)."""
    from ..server.app import create_app

    if values.get("problem"):
        raise RuntimeError(values["problem"])
    values = {k: v for k, v in values.items() if k != "problem"}
    if values.get("threads") is None:
        from .batch import actor_threads

        values["threads"] = actor_threads()
    app = create_app(Settings(values))
    runner = app.state.server.runner
    runner.start()
    await asyncio.to_thread(runner.loaded.wait)
    if runner.state != "ready":
        runner.stop()
        raise RuntimeError(f"the model {values['model']} failed to load: {runner.error or runner.state}")
    return LoadedModel(app, on_close)


async def _send_json(send: Any, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


class ModelDispatch:
    """ASGI: the request's model (header, body or query) -> that model's app on this replica."""

    def __init__(self, models: Dict[str, Dict[str, Any]], get_model: Any, loaded: Dict[str, str]) -> None:
        self.models, self.get_model, self.loaded = models, get_model, loaded

    def model_list(self) -> Dict[str, Any]:
        """Every preset model, and its status on the replica that answers (the router's shape)."""
        data = []
        for name in sorted({v["alias"] for v in self.models.values()}):
            v = self.models[name]
            status = {"value": self.loaded.get(name, "unloaded")}
            if v["problem"]:
                status = {"value": "failed", "reason": v["problem"]}
            aliases = sorted(n for n, w in self.models.items() if w is v and n != name)
            data.append({"id": name, "object": "model", "owned_by": "llamapy", "aliases": aliases, "status": status})
        return {"object": "list", "data": data}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from ..server.errors import error_body

        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in HEALTH_PATHS:
            return await _send_json(send, 200, {"status": "ok"})
        if path in LIST_PATHS and method == "GET":
            return await _send_json(send, 200, self.model_list())
        body = b""
        while True:  # the body limit middleware has bounded it
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        name = serve.get_multiplexed_model_id() or _model_field(body, scope)
        if not name:
            return await _send_json(send, 400, error_body(400, "name a model: the request's 'model' field (or the "
                                                               "serve_multiplexed_model_id header)", "model_required",
                                                          path))
        if name not in self.models:
            return await _send_json(send, 404, error_body(404, f"no model {name!r}; GET /v1/models lists them",
                                                          "model_not_found", path))
        try:
            loaded = await self.get_model(self.models[name]["alias"])
        except Exception as e:  # noqa: BLE001 - the client hears why the model cannot serve
            return await _send_json(send, 503, error_body(503, f"model {name!r} is not available: {e}",
                                                          "model_unavailable", path))
        sent = [False]

        async def replay() -> Any:
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then the client's disconnect, when it comes

        await loaded.app(scope, replay, send)


def _model_field(body: bytes, scope: Any) -> Optional[str]:
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("model"), str):
        return data["model"]
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return (query.get("model") or [None])[0]


def replica_class(models_max: int) -> Any:
    """The deployment class, with Serve's LRU sized to ``models_max`` models per replica (the
    decorator takes the size when the class is made)."""

    @serve.ingress()
    class LlamapyModels:
        def __init__(self, values: Dict[str, Any], models: Dict[str, Dict[str, Any]]) -> None:
            self.settings, self.models = Settings(dict(values)), models
            self.loaded: Dict[str, str] = {}  # name -> "loading" / "loaded", on this replica

        async def __serve_build_asgi_app__(self) -> Any:
            from starlette.applications import Starlette
            from starlette.routing import Mount

            from ..server import security

            app = Starlette(routes=[Mount("/", app=ModelDispatch(self.models, self.get_model, self.loaded))])
            keys = security.load_keys(self.settings.api_key, self.settings.api_key_file)
            security.install_middleware(app, self.settings, keys)
            from .serve import add_replica_header

            add_replica_header(app)
            return app

        @serve.multiplexed(max_num_models_per_replica=models_max)
        async def get_model(self, name: str) -> LoadedModel:
            logger.info("loading model %s on this replica", name)
            self.loaded[name] = "loading"
            try:
                model = await load_model_app(self.models[name], lambda: self.loaded.pop(name, None))
            except BaseException:
                self.loaded.pop(name, None)
                raise
            self.loaded[name] = "loaded"
            return model

    return LlamapyModels
