"""Whatever is wrong at start is one line naming the setting, and exit status 2."""

from __future__ import annotations

import pytest

from common.entrypoint import load_settings
from mcp_server.settings import ServerSettings
from tests.support import port_in_use, run_to_exit


def one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("command", [[], ["seed"], ["issue-token", "E001"]])
def test_a_database_that_cannot_be_opened_is_one_line(tmp_path, command):
    (tmp_path / "a-file").write_text("")
    env = {"MCP_DATABASE_URL": f"sqlite:///{tmp_path / 'a-file' / 'leave.db'}"}
    status, output = run_to_exit(["mcp_server", *command], env)
    assert status == 2
    assert one_line(output).startswith("configuration error: MCP_DATABASE_URL: cannot open")


def test_a_token_for_an_unknown_employee_is_one_line(tmp_path):
    env = {"MCP_DATABASE_URL": f"sqlite:///{tmp_path / 'leave.db'}"}
    assert run_to_exit(["mcp_server", "seed"], env)[0] == 0
    status, output = run_to_exit(["mcp_server", "issue-token", "E999"], env)
    assert status == 2
    assert one_line(output) == "error: issue-token: no employee 'E999' in the leave database"


def test_a_port_in_use_is_one_line_naming_the_settings(tmp_path):
    with port_in_use() as port:
        env = {"MCP_DATABASE_URL": f"sqlite:///{tmp_path / 'leave.db'}", "MCP_PORT": str(port)}
        status, output = run_to_exit(["mcp_server"], env)
    assert status == 2
    assert one_line(output).startswith("configuration error: MCP_HOST/MCP_PORT: cannot listen")


def test_log_level_in_lower_case_is_accepted(tmp_path):
    env = {"MCP_DATABASE_URL": f"sqlite:///{tmp_path / 'leave.db'}", "MCP_LOG_LEVEL": "debug"}
    assert run_to_exit(["mcp_server", "seed"], env) == (0, "demo data created\n")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MCP_DATABASE_URL", "::not a url::"),
        ("MCP_PUBLIC_URL", "notaurl"),
        ("MCP_PORT", "eighty"),
        ("MCP_LOG_LEVEL", "loud"),
    ],
)
def test_a_value_that_does_not_parse_is_one_line_naming_the_variable(
    monkeypatch, capsys, variable, value
):
    monkeypatch.setenv(variable, value)
    assert load_settings(ServerSettings) is None
    assert one_line(capsys.readouterr().err).startswith(f"configuration error: {variable}: ")


@pytest.mark.parametrize("level", ["INFO", "info", "Warning"])
def test_log_levels_in_either_case(monkeypatch, level):
    monkeypatch.setenv("MCP_LOG_LEVEL", level)
    assert ServerSettings().log_level == level.lower()
