"""``python -m llamapy serve`` / ``python -m llamapy.server``: parse the
settings, build the app, serve it with uvicorn (which handles SIGTERM: it
stops accepting, lets open streams end, then the app's shutdown cancels
what still runs)."""
from __future__ import annotations

import logging
import sys
import threading
from typing import Optional, Sequence

_MISSING = ("the server needs its extra: pip install 'llamapy-engine[server]' "
            "(FastAPI, uvicorn, sse-starlette)")


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m llamapy.server") -> int:
    from .config import ConfigError, build_parser, parse_settings

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        build_parser(prog).print_help()
        return 0
    try:
        settings = parse_settings(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
    server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",
                                           access_log=False, timeout_graceful_shutdown=10))
    runner = app.state.server.runner

    def exit_if_load_fails() -> None:
        # As llama-server: a model that cannot load ends the server (with the reason logged).
        runner.loaded.wait()
        if runner.state == "failed":
            server.should_exit = True

    threading.Thread(target=exit_if_load_fails, daemon=True).start()
    server.run()
    if runner.state == "failed" or (runner.state == "stopped" and runner.error):
        print(f"error: the model failed to load: {runner.error}", file=sys.stderr)
        return 1
    return 0


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
