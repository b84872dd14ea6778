"""Whatever is wrong at start is one line naming the setting, and exit status 2."""

from __future__ import annotations

import gc
import socket

import pytest
import uvicorn

from common.entrypoint import load_settings, serve
from loop.settings import LoopSettings
from ops.services import free_port
from tests.support import port_in_use, run_to_exit


def one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("command", [[], ["export"]])
def test_a_store_that_cannot_be_opened_is_one_line(tmp_path, command):
    env = {"LOOP_STORE_URL": f"sqlite:///{tmp_path}"}  # a folder, not a database file
    status, output = run_to_exit(["loop", *command], env)
    assert status == 2
    assert one_line(output).startswith("configuration error: LOOP_STORE_URL: cannot open")


def test_a_model_url_that_is_not_a_url_is_refused_at_start(tmp_path):
    env = {"LOOP_MODEL_BASE_URL": "notaurl", "LOOP_STORE_URL": f"sqlite:///{tmp_path / 'l.db'}"}
    status, output = run_to_exit(["loop"], env)
    assert status == 2
    assert one_line(output) == (
        "configuration error: LOOP_MODEL_BASE_URL: must be an http:// or https:// URL with a host"
    )


def test_a_port_in_use_is_one_line_naming_the_settings(tmp_path):
    with port_in_use() as port:
        env = {"LOOP_PORT": str(port), "LOOP_STORE_URL": f"sqlite:///{tmp_path / 'l.db'}"}
        status, output = run_to_exit(["loop"], env)
    assert status == 2
    assert one_line(output).startswith("configuration error: LOOP_HOST/LOOP_PORT: cannot listen")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOOP_MODEL_BASE_URL", "localhost:8000/v1"),
        ("LOOP_MCP_URL", "ftp://mcp/mcp"),
        ("LOOP_STORE_URL", "::not a url::"),
        ("LOOP_LOG_LEVEL", "verbose"),
    ],
)
def test_a_value_that_does_not_parse_is_one_line_naming_the_variable(
    monkeypatch, capsys, variable, value
):
    monkeypatch.setenv(variable, value)
    assert load_settings(LoopSettings) is None
    assert one_line(capsys.readouterr().err).startswith(f"configuration error: {variable}: ")


@pytest.mark.parametrize("level", ["INFO", "info", "Debug"])
def test_log_levels_in_either_case(monkeypatch, level):
    monkeypatch.setenv("LOOP_LOG_LEVEL", level)
    assert LoopSettings().log_level == level.lower()


def test_serving_starts_with_the_startup_objects_out_of_the_collectors_sight(monkeypatch):
    frozen_at_start: list[int] = []

    def run(_server: object, sockets: list[socket.socket]) -> None:
        frozen_at_start.append(gc.get_freeze_count())
        sockets[0].close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    try:
        serve(object(), LoopSettings(port=free_port(), host="127.0.0.1"))
    finally:
        gc.unfreeze()
    # a full collection under load would otherwise scan the modules and the app each time
    assert frozen_at_start and frozen_at_start[0] > 10_000
