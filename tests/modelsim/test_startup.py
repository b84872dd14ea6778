"""Whatever is wrong at start is one line naming the setting, and exit status 2."""

from __future__ import annotations

import pytest

from modelsim.settings import SimSettings
from tests.support import port_in_use, run_to_exit


def test_a_port_in_use_is_one_line_naming_the_settings():
    with port_in_use() as port:
        status, output = run_to_exit(["modelsim"], {"SIM_PORT": str(port)})
    assert status == 2
    assert output.strip().startswith("configuration error: SIM_HOST/SIM_PORT: cannot listen")
    assert len(output.strip().splitlines()) == 1, output


def test_a_bad_value_is_one_line_naming_the_variable():
    status, output = run_to_exit(["modelsim"], {"SIM_MAX_MODEL_LEN": "lots"})
    assert status == 2
    assert output.strip().startswith("configuration error: SIM_MAX_MODEL_LEN: ")
    assert len(output.strip().splitlines()) == 1, output


@pytest.mark.parametrize("level", ["WARNING", "warning", "Info"])
def test_log_levels_in_either_case(monkeypatch, level):
    monkeypatch.setenv("SIM_LOG_LEVEL", level)
    assert SimSettings().log_level == level.lower()
