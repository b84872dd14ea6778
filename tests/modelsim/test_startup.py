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


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SIM_BLOCK_SIZE": "0"}, "greater than or equal to 1"),
        (
            {"SIM_BLOCK_SIZE": "64", "SIM_KV_CACHE_TOKENS": "32"},
            "a block of 64 tokens is larger than the whole KV cache (32 tokens)",
        ),
    ],
)
def test_a_block_size_the_kv_cache_cannot_hold_is_one_line(env, says):
    status, output = run_to_exit(["modelsim"], env)
    assert status == 2
    assert output.strip().startswith("configuration error: SIM_BLOCK_SIZE: ")
    assert says in output
    assert len(output.strip().splitlines()) == 1, output
