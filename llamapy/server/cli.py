"""``python -m llamapy serve`` / ``python -m llamapy.server``: parse the
settings, build the app, load the model, then serve it with uvicorn (which
handles SIGTERM: it stops accepting, lets open streams end, then the app's
shutdown cancels what still runs). A model that cannot load ends the
command before it listens, with the reason and exit status 1."""
from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

_MISSING = ("the server needs its extra: pip install 'llamapy-engine[server]' "
            "(FastAPI, uvicorn, sse-starlette)")


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m llamapy.server") -> int:
    from .config import ConfigError, build_parser, parse_settings

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        build_parser(prog).print_help()
        print(RAY_HELP)
        return 0
    try:
        argv, ray_opts = _ray_options(argv)
        settings = parse_settings(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if ray_opts is not None:
        return _serve_on_ray(settings, ray_opts)
    try:
        import uvicorn

        from .app import create_app
    except ImportError as e:
        print(f"error: {_MISSING} ({e})", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.router_mode:
        return _serve_router(settings)
    try:
        app = create_app(settings)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    problem = _model_file_problem(settings.model)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    runner = app.state.server.runner
    # Load before listening: a client (or the router, waiting for /health) sees a
    # server only once it can serve, and a failure is the command's own error.
    runner.start()
    try:
        runner.loaded.wait()
    except KeyboardInterrupt:
        runner.stop()
        return 130
    if runner.state != "ready":
        print(f"error: the model {settings.model} failed to load: {runner.error or runner.state}", file=sys.stderr)
        runner.stop()
        return 1
    uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",
                                  access_log=False, timeout_graceful_shutdown=10)).run()
    return 0


RAY_HELP = """
Ray Serve (pip install 'llamapy-engine[ray]'):
  --ray                 serve the same app as replicas on Ray Serve (its proxy listens on --host:--port);
                        with --models-dir / --models-preset, every replica serves every model, --models-max
                        of them loaded at once (Serve's model multiplexing)
  --replicas N          replicas (default 1), each with --threads CPUs and the memory plan_memory predicts
  --autoscale MIN,MAX   instead of --replicas: Serve adds and removes replicas by ongoing requests
  --ray-address ADDR    Ray cluster to join (default: RAY_ADDRESS, else a local Ray)"""


def _ray_options(argv: Sequence[str]) -> "tuple[list, Optional[dict]]":
    """The Ray flags out of ``argv`` (None without --ray); ConfigError for a Ray flag
    without --ray, or a bad value."""
    from .config import ConfigError

    rest, opts, i = [], {"replicas": 1, "autoscale": None, "address": None}, 0
    on, seen = False, []
    argv = list(argv)
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if a == "--ray":
            on = True
        elif name in ("--replicas", "--autoscale", "--ray-address"):
            seen.append(name)
            if not eq:
                i += 1
                if i >= len(argv):
                    raise ConfigError(f"{name} needs a value")
                val = argv[i]
            try:
                if name == "--replicas":
                    opts["replicas"] = int(val)
                    if opts["replicas"] < 1:
                        raise ValueError
                elif name == "--autoscale":
                    lo, hi = (int(x) for x in val.split(","))
                    if not 0 <= lo <= hi or hi < 1:
                        raise ValueError
                    opts["autoscale"] = [lo, hi]
                else:
                    opts["address"] = val
            except ValueError:
                raise ConfigError(f"{name}: bad value {val!r} (--replicas N >= 1; --autoscale MIN,MAX)") from None
        else:
            rest.append(a)
        i += 1
    if seen and not on:
        raise ConfigError(f"{seen[0]} goes with --ray (serving on Ray Serve)")
    return rest, (opts if on else None)


def _serve_on_ray(settings: "object", opts: dict) -> int:
    try:
        from ..ray.serve import run_cli
    except ImportError as e:  # the message names the extra
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_cli(settings, opts["replicas"], opts["address"], opts["autoscale"])


def _model_file_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot be a model file (missing, a directory, unreadable), or None."""
    if os.path.isdir(path):
        return f"the model path {path} is a directory, not a GGUF file"
    try:
        with open(path, "rb") as f:
            f.read(4)
    except OSError as e:
        return f"cannot read the model file {path}: {e.strerror or e}"
    return None


def _serve_router(settings: "object") -> int:
    """Router mode (no -m): one child server per model (llamapy/server/router.py)."""
    import uvicorn

    from .config import ConfigError
    from .router_routes import create_router_app

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per proxied request otherwise
    try:
        app = create_router_app(settings)  # type: ignore[arg-type]
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",  # type: ignore
                                  access_log=False, timeout_graceful_shutdown=10)).run()
    return 0
