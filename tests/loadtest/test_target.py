"""Where `python -m loadtest` sends the load: a URL given wins, else the running local stack's
(whose ports move with LOOP_PUBLISHED_PORT, MCP_PUBLISHED_PORT, LOCAL_MODEL_PORT), else the
default; and when nothing answers there, one line naming the URL before any load is made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from devtools.localstack import URLS_FILE, LocalStack
from loadtest import target
from loadtest.__main__ import main
from loadtest.settings import LoadSettings
from tests.support import free_port, serving_in_thread, wait_until


@pytest.fixture(autouse=True)
def no_load_environment(monkeypatch):
    for name in [n for n in os.environ if n.startswith("LOAD_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def local_stack(tmp_path):
    """A local stack's run folder as `make dev` leaves it: the loop and the simulator running
    (a process standing in for each; the model endpoint is the router), the MCP server's
    process gone."""
    run_dir = tmp_path / ".run"
    (run_dir / "pids").mkdir(parents=True)
    # a process that lives until its standard input closes (the fixture kills it first)
    stand_in = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    processes = [subprocess.Popen(stand_in, stdin=subprocess.PIPE) for _ in range(2)]
    try:
        # a pid is the stand-in's only once it has exec'd (before, it is still a fork of pytest)
        for process in processes:
            cmdline = Path(f"/proc/{process.pid}/cmdline")
            wait_until(lambda c=cmdline: b"stdin.read" in c.read_bytes(), timeout=10,
                       what="the stand-in process")  # fmt: skip
        for name, process in zip(("loop", "vllm-router"), processes, strict=True):
            (run_dir / "pids" / f"{name}.pid").write_text(f"{process.pid}\n{' '.join(stand_in)}\n")
        (run_dir / "pids" / "mcp-server.pid").write_text("999999999\nnot running\n")
        urls = {
            "loop": "http://127.0.0.1:28080",
            "vllm-router": "http://127.0.0.1:28000",
            "mcp-server": "http://127.0.0.1:28090",
        }
        (run_dir / URLS_FILE).write_text(json.dumps(urls))
        yield LocalStack(run_dir)
    finally:
        for process in processes:
            process.kill()
            process.wait()
            if process.stdin:
                process.stdin.close()


def test_the_urls_of_the_running_local_stack_are_used_unless_one_is_given(local_stack):
    running = local_stack.urls()
    assert running == {"loop": "http://127.0.0.1:28080", "vllm-router": "http://127.0.0.1:28000"}
    settings, targets = target.resolve(LoadSettings(), running)
    assert settings.loop_url == "http://127.0.0.1:28080"
    assert settings.model_url == "http://127.0.0.1:28000/v1"
    assert settings.mcp_url == "http://127.0.0.1:8090/mcp"  # its process is gone: the default
    origins = {t.setting: t.origin for t in targets}
    assert origins["loop_url"] == "the running local stack (.run/urls.json)"
    assert origins["mcp_url"] == "the default; no local stack is running"
    given, _ = target.resolve(LoadSettings(loop_url="http://loop:8080"), running)
    assert given.loop_url == "http://loop:8080"
    # a stopped stack leaves nothing behind to follow
    local_stack.stop()
    assert local_stack.urls() == {} and not (local_stack.run_dir / URLS_FILE).exists()


def test_nothing_answering_ends_the_run_with_one_line_naming_the_url(tmp_path, capsys):
    loop = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    argv = ["--loop-url", loop, "--mcp-url", f"http://127.0.0.1:{free_port()}/mcp"]
    assert main([*argv, "--results-dir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"load: nothing answers at {loop}/healthz (the loop, from --loop-url / LOAD_LOOP_URL): "
    )
    assert line.endswith(
        "start the stack (make demo, make dev or make up) or point --loop-url at it"
    )
    assert list(tmp_path.iterdir()) == []  # no load was started


def test_only_the_places_the_chosen_users_need_are_asked(tmp_path, capsys):
    model = f"http://127.0.0.1:{free_port()}/v1"
    argv = ["--user-classes", "model", "--model-url", model, "--loop-url", "http://nowhere:1"]
    assert main([*argv, "--results-dir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"load: nothing answers at {model}/models (the model server, from ")


def test_a_target_that_answers_late_is_asked_again_and_one_that_refuses_is_not():
    """Under load the router's /v1/models answered after the probe's 3 s, and the container
    tier's load run ended as if nothing were there."""
    import socket
    import threading

    answered = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        first, _ = listener.accept()  # left unanswered: the first probe times out
        second, _ = listener.accept()
        second.recv(1024)
        second.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        second.close()
        first.close()
        answered.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    late = target.Target("the model server", "model_url", "u", "o", f"http://127.0.0.1:{port}/v1")
    try:
        assert target.unanswered(late, timeout=0.5) is None
        assert answered.wait(5)
    finally:
        listener.close()
    gone = target.Target(
        "the model server", "model_url", "u", "o", f"http://127.0.0.1:{free_port()}/"
    )
    assert "refused" in (target.unanswered(gone, timeout=0.5) or "")


def test_a_target_that_never_answers_is_asked_until_the_budget_is_spent_then_named_timed_out():
    """After a replica restart the container tier's router let three 3-s probes go unanswered
    and then served normally: timeouts are asked again for a budget of seconds, not 3 tries."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []

    def accept_and_say_nothing() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return  # the listener was closed

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    silent = target.Target("the model server", "model_url", "u", "o", f"http://127.0.0.1:{port}/")
    try:
        why = target.unanswered(silent, timeout=0.2, budget=1.5)
    finally:
        listener.close()
        for connection in accepted:
            connection.close()
    assert why is not None and "timed out" in why
    assert len(accepted) >= 5, f"asked {len(accepted)} times in a 1.5 s budget of 0.2 s tries"


def test_a_name_server_that_does_not_answer_for_a_moment_is_asked_again_an_unknown_name_is_not(
    monkeypatch,
):
    """In the container tier the network's name server went unanswered (EAI_AGAIN) while
    Locust's workers left the network, and the load run took the stack for absent."""
    import socket

    real = socket.getaddrinfo
    calls: list[str] = []

    def lookup(host, *args, **kwargs):
        calls.append(host)
        if host == "vllm-router" and calls.count(host) <= 2:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host == "no-such-router":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real("127.0.0.1" if host == "vllm-router" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    models = Starlette(routes=[Route("/v1/models", lambda _: JSONResponse({"data": []}))])
    with serving_in_thread(models, "a model server") as url:
        port = url.rsplit(":", 1)[1]
        passing = target.Target(
            "the model server", "model_url", "u", "o", f"http://vllm-router:{port}/v1/models"
        )
        assert target.unanswered(passing, timeout=0.5, budget=10) is None
    assert calls.count("vllm-router") == 3
    unknown = target.Target("the model server", "model_url", "u", "o", "http://no-such-router/")
    assert "not known" in (target.unanswered(unknown, timeout=0.5, budget=10) or "")
    assert calls.count("no-such-router") == 1
