"""``python -m llamapy serve`` / ``python -m llamapy.server``: parse the
settings, build the app, serve it with uvicorn (which handles SIGTERM: it
stops accepting, lets open streams end, then the app's shutdown cancels
what still runs)."""
from __future__ import annotations

import logging
import sys
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
    try:
        app = create_app(settings)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", access_log=False,
                timeout_graceful_shutdown=10)
    return 0
