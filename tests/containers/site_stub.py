"""What a company's site has and the container tier has not: an identity provider's JWKS URL
and a webhook that alerts are sent to. Standard library only, so it runs in the bundle's image.

GET /jwks.json serves the key set the test wrote (over HTTPS on 8443 too, given a certificate
and its key: production takes a provider's keys only over https); POST /alerts keeps Alertmanager's payloads,
which GET /alerts returns as a JSON list; GET /healthz answers once it serves.
"""

from __future__ import annotations

import json
import ssl
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


def serve_tls(certificate: str, key: str) -> None:
    """The same answers over HTTPS on 8443, as a provider's key set is served in production."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    server = ThreadingHTTPServer(("0.0.0.0", 8443), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


if __name__ == "__main__":
    Handler.jwks = Path(sys.argv[1])
    if len(sys.argv) == 4:  # a certificate and its key: HTTPS too
        serve_tls(sys.argv[2], sys.argv[3])
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
