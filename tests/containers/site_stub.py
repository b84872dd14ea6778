"""What a company's site has and the container tier has not: an identity provider's JWKS URL
and a webhook that alerts are sent to. Standard library only, so it runs in the bundle's image.

GET /jwks.json serves the key set the test wrote; POST /alerts keeps Alertmanager's payloads,
which GET /alerts returns as a JSON list; GET /healthz answers once it serves.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

received: list[object] = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    jwks: Path

    def do_GET(self) -> None:
        if self.path == "/jwks.json":
            self._answer(200, self.jwks.read_bytes())
        elif self.path == "/alerts":
            with lock:
                self._answer(200, json.dumps(received).encode())
        elif self.path == "/healthz":
            self._answer(200, b"{}")
        else:
            self._answer(404, b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/alerts":
            self._answer(404, b"{}")
            return
        with lock:
            received.append(json.loads(body))
        self._answer(200, b"{}")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    Handler.jwks = Path(sys.argv[1])
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
