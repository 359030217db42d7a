"""Running the app: `serve` (what ``attnlab serve`` calls, in the foreground) and `BackgroundServer` (the same
server on a thread, for tests and benchmarks).

Graceful shutdown is uvicorn's: on SIGINT/SIGTERM it stops accepting connections, lets in-flight requests
finish (up to ``graceful_s``), then runs the app's shutdown, which drains the batch queue
(`DynamicBatcher.drain`) before the model thread stops.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from attnlab.serving.settings import ServeSettings
from attnlab.train.distributed import free_port


def uvicorn_config(
    app: Any, settings: ServeSettings, access_log: bool = False, log_level: str = "info"
) -> Any:
    import uvicorn

    return uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=log_level, access_log=access_log,
        timeout_graceful_shutdown=settings.graceful_s, lifespan="on",
    )  # fmt: skip


def serve(app: Any, settings: ServeSettings, access_log: bool = False) -> None:
    """Serve ``app`` until interrupted (SIGINT/SIGTERM: in-flight requests finish first)."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, settings, access_log)).run()


class BackgroundServer:
    """``with BackgroundServer(app) as url: ...``: uvicorn on a free 127.0.0.1 port on a thread."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int | None = None, start_timeout: float = 60):
        import uvicorn

        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        settings = ServeSettings(host=host, port=self.port, graceful_s=10)
        self.server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="attnlab-server", daemon=True)
        self.start_timeout = start_timeout

    def __enter__(self) -> str:
        self.thread.start()
        end = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > end:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
