"""A setting is written once, on its field: docs/configuration.md's tables, deploy/.env.example's
service settings and the Kubernetes settings ConfigMaps are generated from the settings classes
(devtools/settings_generated.py). A stale file, a setting without prose, a secret on its way into
a ConfigMap or a compose fallback that disagrees with the class fail here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.settings_meta import deployed
from devtools import settings_generated
from devtools.settings_generated import CONFIGMAPS, DOCUMENTED, ENV_EXAMPLE_CLASSES
from ops import compose
from tests.support import REPO_ROOT

COMPOSE_FILES = (compose.BASE_FILE, compose.SIM_FILE, compose.LOAD_FILE)


def fields(classes: Any) -> list[tuple[type[BaseSettings], str, Any]]:
    return [(c, name, f) for c in classes for name, f in c.model_fields.items()]


def env_values(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text, re.MULTILINE))


def test_the_generated_files_are_what_the_settings_classes_give():
    stale = [
        str(path.relative_to(REPO_ROOT))
        for path, text in settings_generated.generated().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], "run `make settings-generate`"


def test_each_generated_file_names_the_command_that_writes_it():
    for path in settings_generated.generated():
        assert "`make settings-generate`" in path.read_text(encoding="utf-8")[:2000], path


def test_every_setting_has_its_prose_on_its_field():
    undescribed = [
        settings_generated.name_of(c, name)
        for c, name, field in fields(d.settings for d in DOCUMENTED)
        if not (field.description or "").strip()
    ]
    assert undescribed == []


def test_the_configuration_page_lists_every_setting_with_its_default():
    page = settings_generated.CONFIGURATION.read_text(encoding="utf-8")
    for c, name, field in fields(d.settings for d in DOCUMENTED):
        variable = settings_generated.name_of(c, name)
        (row,) = re.findall(rf"^\| `{variable}` \|.*$", page, re.MULTILINE)
        assert settings_generated.default_text(field).replace("|", "\\|") in row, variable


def test_env_example_carries_exactly_the_settings_marked_env():
    values = env_values(settings_generated.ENV_EXAMPLE.read_text(encoding="utf-8"))
    for c, name, field in fields(d.settings for d in ENV_EXAMPLE_CLASSES):
        variable = settings_generated.name_of(c, name)
        wanted = settings_generated.deployed_value(field, "env_example")
        assert values.get(variable) == wanted, variable


def test_secrets_stay_out_of_the_configmaps_and_env_example_holds_only_development_ones():
    from mcp_server.settings import KNOWN_DEFAULT_SECRETS

    secret = {
        settings_generated.name_of(c, name)
        for c, name, field in fields(d.settings for d in DOCUMENTED)
        if settings_generated.marker(field).get("secret")
    }
    assert {"MCP_ELICITATION_STATE_KEY", "LOOP_STORE_URL", "LOOP_MODEL_API_KEY"} <= secret
    for path in CONFIGMAPS:
        assert secret & set(env_values(path.read_text(encoding="utf-8"))) == set(), path
    shipped = env_values(settings_generated.ENV_EXAMPLE.read_text(encoding="utf-8"))
    assert shipped["MCP_ELICITATION_STATE_KEY"] in KNOWN_DEFAULT_SECRETS  # production refuses it


def test_every_setting_a_site_sets_in_env_reaches_its_service_under_its_own_name():
    """compose passes each `.env` setting on: `NAME: ${NAME:-…}` in a service's environment."""
    text = "".join(path.read_text(encoding="utf-8") for path in COMPOSE_FILES)
    unwired = [
        variable
        for c, name, field in fields(d.settings for d in ENV_EXAMPLE_CLASSES)
        if settings_generated.deployed_value(field, "env_example") is not None
        and not re.search(
            rf"^\s+{(variable := settings_generated.name_of(c, name))}: \$\{{{variable}:[-?]",
            text,
            re.MULTILINE,
        )
    ]
    assert unwired == []


def _same(given: str, wanted: str) -> bool:
    try:
        return float(given) == float(wanted)
    except ValueError:
        return given.lower() == wanted.lower()


def test_a_fallback_written_in_compose_is_the_settings_own_value():
    """A `${NAME:-value}` fallback (a site's .env without the variable) must be the value the
    class or its marker gives, not a copy that drifted; `${NAME:-}` takes the class default."""
    wanted = {}
    for c, name, field in fields(d.settings for d in DOCUMENTED):
        value = settings_generated.deployed_value(field, "env_example")
        wanted[settings_generated.name_of(c, name)] = (
            value if value is not None else settings_generated.value_text(field.get_default())
        )
    text = "".join(path.read_text(encoding="utf-8") for path in COMPOSE_FILES)
    fallbacks = re.findall(r"\$\{([A-Z][A-Z0-9_]*):-([^}]+)\}", text)
    checked = [(name, value) for name, value in fallbacks if name in wanted]
    assert ("COST_GPU_HOURLY_USD", "6.35") in checked  # the pattern still finds them
    assert [(n, v, wanted[n]) for n, v in checked if not _same(v, wanted[n])] == []


# -- the generator itself ------------------------------------------------------------------------


class Example(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EX_")

    port: int = Field(8080, ge=1, le=65535, description="A port.")
    url: str = Field(
        "x", description="See [Traces](operations.md#traces).", json_schema_extra=deployed(env="y")
    )
    key: str | None = Field(None, description="A key.", json_schema_extra=deployed(secret=True))


def test_a_table_gives_type_bounds_default_and_where_it_is_deployed():
    table = settings_generated.table(Example)
    assert "| `EX_PORT` | integer ≥ 1, ≤ 65535 | `8080` | A port. | — |" in table
    assert "| `EX_URL` | text | `x` | See [Traces](operations.md#traces). | `.env`: `y` |" in table
    assert "| `EX_KEY` | text | unset | A key. | Secret |" in table


def test_env_entries_are_commented_in_plain_text():
    assert settings_generated.env_entries(Example) == [
        "# See Traces (docs/operations.md#traces).",
        "EX_URL=y",
    ]


def test_a_secret_is_never_marked_for_a_configmap():
    with pytest.raises(ValueError, match="never goes into a ConfigMap"):
        deployed(secret=True, configmap=True)

    class Smuggled(BaseSettings):
        key: str = Field("k", json_schema_extra={"configmap": True, "secret": True})

    with pytest.raises(ValueError, match="never in a ConfigMap"):
        settings_generated.configmap_env([Smuggled])


def test_a_file_without_its_markers_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="no `<!-- settings: mcp-server -->`"):
        settings_generated.configuration_page("# Configuration\n")
    with pytest.raises(ValueError, match=r"\.env\.example has no"):
        settings_generated.env_example("VLLM_IMAGE=x\n")
