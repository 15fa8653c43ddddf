"""The HTTP side: a stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with explicit lengths.

The SDK builds its own HTTP clients (no transport can be injected), so the local backend is a real server on
``127.0.0.1``; one thread per connection accepts requests and hands them to :class:`~.service.Service`, which queues
the work. No dependency beyond the standard library.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rl_guards.tinker.backend.service import Service

logger = logging.getLogger("rl_guards.tinker.backend")


def make_handler(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, content_type, out = service.handle(self.command, self.path, self.headers, body)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # the SDK polls a lot: debug only
            logger.debug("%s - " + format, self.address_string(), *args)

    return Handler


class Server:
    """A :class:`Service` on ``host:port`` (port 0: a free one), served by a daemon thread."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        self.httpd = ThreadingHTTPServer((host, port), make_handler(service))
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="local-tinker-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)


__all__ = ["Server", "make_handler"]
