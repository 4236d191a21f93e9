"""A real uvicorn server on a free loopback port, in a background thread."""
from __future__ import annotations

import socket
import threading
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, argv, load=None) -> None:
        import uvicorn

        from llamapy.server.app import create_app
        from llamapy.server.config import parse_settings

        self.port = free_port()
        self.settings = parse_settings(list(argv) + ["--port", str(self.port)], environ={})
        self.app = create_app(self.settings, load)
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
                             timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, ready: bool = True) -> "LiveServer":
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if time.monotonic() - t0 > 30:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        if ready:
            while httpx.get(self.url + "/health").status_code != 200:
                runner = self.app.state.server.runner
                if runner.state == "failed":
                    self.stop()
                    raise RuntimeError(f"the model failed to load: {runner.error}")
                if time.monotonic() - t0 > 60:
                    raise RuntimeError("model did not load")
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        import signal

        self.server.handle_exit(signal.SIGTERM, None)  # what SIGTERM does (sse-starlette watches it too)
        self.thread.join(15)
        from sse_starlette.sse import AppStatus

        AppStatus.should_exit = False  # sse-starlette's process-wide flag: a later server in this process starts afresh
