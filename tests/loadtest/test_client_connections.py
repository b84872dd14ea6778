"""The load client's keep-alive connection: a server that closed it while the user thought
is reconnected to, not reported as the system under test failing."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from loadtest.client import StreamingClient

BODY = b'{"ok": true}'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + (
    b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
)


@pytest.fixture
def closes_after_each_answer() -> Iterator[tuple[str, list[int]]]:
    """Answers one request per connection, then closes it without saying so (as a server whose
    keep-alive timeout ran out between two requests does)."""
    listener = socket.create_server(("127.0.0.1", 0))
    served: list[int] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += connection.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length")),
                    0,
                )  # fmt: skip
                while len(body) < length:
                    body += connection.recv(65536)
                served.append(1)  # before answering: the client may check as soon as it reads
                connection.sendall(ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", served
    finally:
        listener.close()


def test_a_connection_the_server_closed_between_requests_is_reopened(closes_after_each_answer):
    base, served = closes_after_each_answer
    client = StreamingClient(base)
    try:
        for _ in range(3):
            assert client.request_json("POST", "/x", {"n": 1}) == {"ok": True}
    finally:
        client.close()
    assert len(served) == 3


def test_a_stream_left_unread_does_not_break_the_next_request(closes_after_each_answer):
    base, served = closes_after_each_answer
    client = StreamingClient(base)
    try:
        client.stream("/x", {"n": 1})  # its events never read: the reader gave up early
        assert client.request_json("POST", "/x", {"n": 2}) == {"ok": True}
    finally:
        client.close()
    assert len(served) == 2
