"""Static checks of the compose files, through the real Docker Compose v2 binary (no engine)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from ops import compose, layout
from tests.deploy.vllm_flags import recorded_flags

REPO = compose.REPO_ROOT
VLLM_VERSION = "0.32.0"
LORA_ARGS = "--enable-lora --lora-modules leave-copilot=/models/adapter --max-lora-rank 16"


@pytest.fixture(scope="module")
def gpu() -> dict:
    return compose.config(sim=False)


@pytest.fixture(scope="module")
def sim() -> dict:
    return compose.config(sim=True)


@pytest.mark.parametrize(
    "files",
    [
        ["compose.yaml"],
        ["compose.yaml", "compose.sim.yaml"],
        ["compose.yaml", "compose.load.yaml"],
        ["compose.yaml", "compose.sim.yaml", "compose.load.yaml"],
        ["compose.yaml", "compose.sim.yaml", "compose.ops.yaml"],
    ],
)
def test_files_satisfy_the_compose_specification(files):
    assert compose.validate([compose.DEPLOY / f for f in files], compose.EXAMPLE_ENV) == ""


def test_a_schema_violation_is_caught(tmp_path):
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        compose.BASE_FILE.read_text().replace(
            "restart: unless-stopped\n    networks", "restarts: always\n    networks", 1
        )
    )
    error = compose.validate([broken], compose.EXAMPLE_ENV)
    assert "restarts" in error


def test_required_variables_fail_fast_with_a_message(tmp_path):
    env = tmp_path / ".env"
    env.write_text(
        "\n".join(
            line
            for line in compose.EXAMPLE_ENV.read_text().splitlines()
            if not line.startswith("VLLM_MODEL=")
        )
    )
    with pytest.raises(compose.ComposeError, match=re.escape("set VLLM_MODEL in deploy/.env")):
        compose.config(sim=False, env_file=env, environ={"PATH": "/usr/bin:/bin"})


def test_every_long_running_service_is_health_checked_and_restarts(gpu, sim):
    for project in (gpu, sim):
        for name, service in project["services"].items():
            assert "container_name" not in service, name
            if service.get("restart") == "no":  # the one-shot seed step
                continue
            assert service.get("healthcheck", {}).get("test"), name
            assert service.get("restart") == "unless-stopped", name


def test_healthchecks_survive_podmans_argument_splitting(gpu, sim):
    # podman 4.3's Docker API joins an exec-form test with spaces and splits it again, so an
    # argument with a space in it (`python -c "import …"`) falls apart there.
    for project in (gpu, sim):
        for name, service in project["services"].items():
            check = service.get("healthcheck", {})
            if check.get("disable"):
                continue
            test = check["test"]
            if test[0] == "CMD-SHELL":  # one string, which podman passes on whole
                assert len(test) == 2, (name, test)
                continue
            assert test[0] == "CMD", (name, test)
            assert all(" " not in argument for argument in test), (name, test)


def test_the_one_shot_seed_job_has_no_healthcheck(gpu):
    # it would inherit the image's, and show as "Exited (0) (starting)" forever
    assert gpu["services"]["mcp-seed"]["healthcheck"]["disable"] is True


def test_start_up_is_health_gated(gpu):
    services = gpu["services"]
    assert services["mcp-server"]["depends_on"]["mcp-seed"]["condition"] == (
        "service_completed_successfully"
    )
    assert services["loop"]["depends_on"]["vllm-router"]["condition"] == "service_healthy"
    assert services["loop"]["depends_on"]["mcp-server"]["condition"] == "service_healthy"
    # the router takes traffic only once its replica answers /health
    assert services["vllm-router"]["depends_on"]["vllm-0"]["condition"] == "service_healthy"
    # weights load and CUDA graph capture take minutes before /health answers
    assert seconds(services["vllm-0"]["healthcheck"]["start_period"]) >= 300


def seconds(duration: str) -> float:
    """A Go duration as compose prints it ("10m0s", "20s") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|h|m|s)", duration))


def test_every_image_is_pinned(gpu, sim):
    for project in (gpu, sim):
        for name, service in project["services"].items():
            image = service["image"]
            repository, _, tag = image.rpartition(":")
            assert repository and tag and tag != "latest", (name, image)
            assert re.search(r"\d+\.\d+\.\d+", tag), (name, image)


def test_vllm_gets_a_gpu_shared_memory_caches_and_no_published_port(gpu):
    vllm = gpu["services"]["vllm-0"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    # by id: Docker maps `count: N` to GPUs 0..N-1, which would stack replicas on one GPU
    assert devices == [{"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu"]}]
    assert vllm["ipc"] == "host"
    targets = {v["target"] for v in vllm["volumes"]}
    assert targets == {"/models", "/tool-parsers", "/root/.cache/huggingface", "/root/.cache/vllm"}
    read_only = {v["target"] for v in vllm["volumes"] if v.get("read_only")}
    assert read_only == {"/models", "/tool-parsers"}
    assert "ports" not in vllm
    assert set(vllm["networks"]) == {"backend"}
    assert gpu["networks"]["backend"]["internal"] is True


def test_the_simulator_layout_changes_only_the_model_service(gpu, sim):
    for name in ("mcp-seed", "mcp-server", "loop", "vllm-router"):
        assert gpu["services"][name] == sim["services"][name], name
    model = sim["services"]["vllm-0"]
    assert model["command"] == ["python", "-m", "modelsim"]
    assert model["environment"]["SIM_PORT"] == "8000"
    assert "deploy" not in model and "ipc" not in model and not model.get("volumes")


def test_services_reach_each_other_by_the_names_and_ports_they_serve(gpu):
    services = gpu["services"]
    loop = services["loop"]["environment"]
    assert loop["LOOP_MODEL_BASE_URL"] == "http://vllm-router:8000/v1"
    assert loop["LOOP_MCP_URL"] == "http://mcp-server:8090/mcp"
    assert "mcp-server:8090" in services["mcp-server"]["environment"]["MCP_ALLOWED_HOSTS"]
    engine = services["vllm-0"]["command"]
    assert engine[engine.index("--port") + 1] == "8000"
    router = services["vllm-router"]["command"]
    assert "--port=8000" in router
    assert router[router.index("--worker-urls") + 1 :] == ["http://vllm-0:8000"]


# -- variables: compose ⇄ .env.example ⇄ the configuration page ---------------------------------


def compose_variables() -> set[str]:
    """What the compose files interpolate, and what the layout they are written with reads."""
    text = "".join(f.read_text() for f in (compose.BASE_FILE, compose.SIM_FILE, compose.LOAD_FILE))
    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text)) | set(layout.VARIABLES)


def example_variables() -> set[str]:
    return {
        line.split("=", 1)[0]
        for line in compose.EXAMPLE_ENV.read_text().splitlines()
        if re.match(r"^[A-Z][A-Z0-9_]*=", line)
    }


def configuration_page_variables() -> set[str]:
    """The variables in the first column of docs/configuration.md's tables."""
    page = (REPO / "docs" / "configuration.md").read_text()
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)`", page, re.MULTILINE))


def test_every_compose_variable_is_in_env_example_and_vice_versa():
    assert compose_variables() == example_variables()


def test_every_env_example_variable_is_in_the_configuration_table():
    assert example_variables() - configuration_page_variables() == set()


def test_every_env_example_entry_is_commented():
    lines = compose.EXAMPLE_ENV.read_text().splitlines()
    for index, line in enumerate(lines):
        if re.match(r"^[A-Z][A-Z0-9_]*=", line):
            above = lines[index - 1]
            assert above.startswith("#") or re.match(r"^[A-Z][A-Z0-9_]*=", above), line


# -- the vLLM command line against vLLM 0.32's own flags ---------------------------------------


@pytest.mark.parametrize("extra", ["", LORA_ARGS])
def test_vllm_command_uses_only_flags_of_the_pinned_version(extra):
    import os

    project = compose.config(sim=False, environ={**os.environ, "VLLM_EXTRA_ARGS": extra})
    command = project["services"]["vllm-0"]["command"]
    image = project["services"]["vllm-0"]["image"]
    assert image.endswith(f":v{VLLM_VERSION}"), "serve-help.txt was recorded from this version"
    flags, parsers = recorded_flags()
    used = [arg for arg in command if arg.startswith("--")]
    assert used and set(used) <= flags, set(used) - flags
    parser = command[command.index("--tool-call-parser") + 1]
    assert parser in parsers
    assert not command[0].startswith("--"), "the model is positional and comes first"
    if extra:
        assert shlex.split(extra) == command[-len(shlex.split(extra)) :]


def test_a_tool_parser_plugin_is_passed_only_when_set():
    import os

    plugin = {"VLLM_TOOL_PARSER_PLUGIN": "json_tool_calls.py"}
    with_plugin = compose.config(
        sim=False, environ={**os.environ, **plugin, "VLLM_TOOL_CALL_PARSER": "json_tool_calls"}
    )
    command = with_plugin["services"]["vllm-0"]["command"]
    flags, _ = recorded_flags()
    assert "--tool-parser-plugin" in flags
    at = command.index("--tool-parser-plugin")
    assert command[at + 1] == "/tool-parsers/json_tool_calls.py"
    assert command[command.index("--tool-call-parser") + 1] == "json_tool_calls"
    mount = next(
        v for v in with_plugin["services"]["vllm-0"]["volumes"] if v["target"] == "/tool-parsers"
    )
    assert (Path(mount["source"]) / "json_tool_calls.py").is_file()
    without = compose.config(sim=False)["services"]["vllm-0"]["command"]
    assert "--tool-parser-plugin" not in without


def test_vllm_command_parses_with_vllms_own_parser_when_installed():
    cli = pytest.importorskip("vllm.entrypoints.launchers.cli_args", reason="vLLM not installed")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    project = compose.config(sim=False)
    parser = cli.make_arg_parser(FlexibleArgumentParser())
    parser.parse_args(project["services"]["vllm-0"]["command"])


def test_every_parser_named_in_env_example_is_a_real_choice():
    _, parsers = recorded_flags()
    comment = next(
        line for line in compose.EXAMPLE_ENV.read_text().splitlines() if "Tool-call parser" in line
    )
    named = set(re.findall(r"([a-z0-9_]+) \(", comment))
    assert named and named <= parsers


def test_compose_binary_is_the_real_v2():
    version = subprocess.run(
        [compose.compose_binary(), "version", "--short"], capture_output=True, text=True
    ).stdout.strip()
    assert version.startswith("2.")


# -- what a site sets in deploy/.env reaches the process that reads it --------------------------

SIGN_IN = {
    "MCP_OIDC_ISSUER": "https://login.example.com/",
    "MCP_OIDC_AUDIENCE": "https://leave.example.com/mcp",
    "MCP_OIDC_JWKS_URL": "https://login.example.com/keys",
    "MCP_OIDC_EMPLOYEE_CLAIM": "staff_no",
    "MCP_OIDC_ALGORITHMS": "ES256",
    "MCP_OIDC_JWKS_REFRESH_SECONDS": "120",
    "MCP_OIDC_JWKS_MAX_STALE_SECONDS": "900",
}


def test_single_sign_on_set_in_the_env_file_reaches_the_mcp_server(tmp_path):
    env = tmp_path / ".env"
    extra = [f"{name}={value}" for name, value in SIGN_IN.items()]
    extra.append("LOOP_REJECTED_TOKEN_CACHE_SECONDS=5")
    env.write_text(compose.EXAMPLE_ENV.read_text() + "\n".join(extra) + "\n")
    services = compose.config(sim=True, env_file=env, environ={"PATH": "/usr/bin:/bin"})["services"]
    for service in ("mcp-server", "mcp-seed"):
        environment = services[service]["environment"]
        assert {name: environment.get(name) for name in SIGN_IN} == SIGN_IN, service
    assert services["loop"]["environment"]["LOOP_REJECTED_TOKEN_CACHE_SECONDS"] == "5"


def test_sign_in_left_unset_in_the_env_file_is_unset_for_the_mcp_server(sim, monkeypatch):
    from mcp_server.settings import ServerSettings

    for name, value in sim["services"]["mcp-server"]["environment"].items():
        monkeypatch.setenv(name, value or "")
    settings = ServerSettings()
    assert settings.oidc_issuer is None and settings.oidc_jwks_url is None
    assert settings.oidc_employee_claim == "employee_id"
