"""What `make up` needs before it starts anything, each missing piece named."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from . import compose, layout
from .compose import host_ports

ENV_FILE = compose.DEPLOY / ".env"
# Secrets whose example value is published with the bundle: fine on a laptop, never on a box
# a team uses.
EXAMPLE_SECRETS = {
    "MCP_ELICITATION_STATE_KEY": 'python -c "import secrets; print(secrets.token_hex(32))"',
    "GRAFANA_ADMIN_PASSWORD": 'python -c "import secrets; print(secrets.token_urlsafe(18))"',
}


def _run(*command: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def problems(*, sim: bool, env_file: Path = ENV_FILE, engine: str = "docker") -> list[str]:
    if engine == "podman":
        found = _podman_problems(sim=sim)
        if found[:1] == [PODMAN_MISSING]:
            return found
    else:
        found = _docker_problems(sim=sim)
        if found[:1] == [DOCKER_MISSING]:
            return found
    return found + _project_problems(sim=sim, env_file=env_file, engine=engine)


DOCKER_MISSING = "docker is not installed (https://docs.docker.com/engine/install/)"
PODMAN_MISSING = "podman is not installed (`dnf install podman`, `apt-get install podman`)"
PODMAN_MINIMUM = (4, 3)


def _podman_problems(*, sim: bool) -> list[str]:
    """Podman ≥ 4.3, its API (started if need be), the Compose v2 binary; CDI for a GPU."""
    from . import podman

    if shutil.which("podman") is None:
        return [PODMAN_MISSING]
    version = _run("podman", "version", "--format", "{{.Client.Version}}")
    if version is None or version.returncode != 0:
        return ["`podman version` fails: " + (version.stderr.strip() if version else "timeout")]
    try:
        numbers = tuple(int(part) for part in version.stdout.strip().split(".")[:2])
    except ValueError:
        numbers = PODMAN_MINIMUM
    found: list[str] = []
    if numbers < PODMAN_MINIMUM:
        found.append(f"podman {version.stdout.strip()} is older than 4.3: upgrade it")
    try:
        compose.compose_binary()
        podman.engine_env()
    except compose.ComposeError as error:
        found.append(str(error))
    if not sim and not any(Path(d, "nvidia.yaml").exists() for d in ("/etc/cdi", "/var/run/cdi")):
        found.append(
            "no NVIDIA CDI specification (/etc/cdi/nvidia.yaml): install the NVIDIA Container "
            "Toolkit and run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` "
            "(or use `make up-sim ENGINE=podman`)"
        )
    return found


def _docker_problems(*, sim: bool) -> list[str]:
    found: list[str] = []
    if shutil.which("docker") is None:
        return [DOCKER_MISSING]
    version = _run("docker", "compose", "version")
    if version is None or version.returncode != 0:
        found.append("the Docker Compose v2 plugin is missing (`docker compose version` fails)")
    info = _run("docker", "info", "--format", "{{json .Runtimes}}")
    if info is None or info.returncode != 0:
        found.append("the Docker engine is not reachable (`docker info` fails): start dockerd")
    elif not sim and "nvidia" not in info.stdout:
        found.append(
            "no NVIDIA runtime in `docker info`: install the NVIDIA Container Toolkit and run "
            "`nvidia-ctk runtime configure --runtime=docker` (or use `make up-sim`)"
        )
    return found


def _project_problems(*, sim: bool, env_file: Path, engine: str) -> list[str]:
    found: list[str] = []
    if not env_file.exists():
        found.append(f"{env_file.name} is missing: cp deploy/.env.example deploy/.env")
        return found
    try:
        project = compose.config(sim=sim, env_file=env_file)
    except compose.ComposeError as error:
        found.append(f"deploy/.env does not resolve: {error}")
        return found
    try:
        planned = layout.plan(layout.settings(env_file))
    except layout.LayoutError as error:
        found.append(str(error))
        planned = None
    found += production_problems(env_file)
    if not sim:
        found += _model_problems(project)
        found += _tool_parser_problems(project)
        if planned is not None:
            found += gpu_problems(planned)
    found += _port_problems(project, engine)
    return found


def example_defaults(env_file: Path) -> tuple[bool, list[str]]:
    """(whether MCP_ENV is production, the example secrets deploy/.env still holds)."""
    values = layout.settings(env_file)
    example = layout.settings(compose.EXAMPLE_ENV, environ={})
    kept = [name for name in EXAMPLE_SECRETS if values.get(name) == example.get(name)]
    return values.get("MCP_ENV", "development") == "production", kept


def production_problems(env_file: Path) -> list[str]:
    """A production box refuses the published example secrets."""
    production, kept = example_defaults(env_file)
    if not production:
        return []
    return [
        f"MCP_ENV=production but {name} is the published example's value: set a fresh one "
        f"({EXAMPLE_SECRETS[name]})"
        for name in kept
    ]


def warnings(env_file: Path) -> list[str]:
    """What a laptop may keep and a team's box may not: said, not refused."""
    if not env_file.exists():
        return []
    production, kept = example_defaults(env_file)
    if production:
        if not layout.settings(env_file).get("ALERTMANAGER_WEBHOOK_URL", "").strip():
            return [
                "ALERTMANAGER_WEBHOOK_URL is empty: alerts are shown at Alertmanager's port and "
                "sent to nobody (docs/operations.md#alerts)"
            ]
        return []
    said = [
        "MCP_ENV=development: the seed job writes demo employees and demo tokens that anyone "
        "who read the docs can use; for a real team set MCP_ENV=production and import its "
        "people (docs/operations.md)"
    ]
    said += [f"{name} is the published example's value ({EXAMPLE_SECRETS[name]})" for name in kept]
    return said


def host_gpus() -> set[str] | None:
    """The host's GPUs by index and by UUID (Docker's device_ids take either); None when
    nvidia-smi cannot say."""
    listed = _run("nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader")
    if listed is None or listed.returncode != 0:
        return None
    return {part.strip() for line in listed.stdout.splitlines() for part in line.split(",")}


def gpu_problems(planned: layout.Layout, present: set[str] | None = None) -> list[str]:
    """The GPUs the layout pins replicas to that the host does not have, named."""
    wanted = [gpu for replica in planned.replicas for gpu in replica.gpus]
    present = host_gpus() if present is None else present
    if present is None:
        return [
            f"nvidia-smi does not answer, so GPUs {', '.join(wanted)} cannot be checked: install "
            "the NVIDIA driver (or use `make up-sim`)"
        ]
    missing = [gpu for gpu in wanted if gpu not in present]
    if not missing:
        return []
    indices = sorted(g for g in present if g.isdigit())
    return [
        f"VLLM_GPUS/VLLM_GPU_IDS ask for GPU {', '.join(missing)}, which this host does not "
        f"have (nvidia-smi lists {', '.join(indices) or 'none'})"
    ]


def _port_problems(project: dict[str, Any], engine: str = "docker") -> list[str]:
    """Published ports another program holds (not a running copy of this stack)."""
    own = _run(
        engine, "ps", "-q", "--filter", f"label=com.docker.compose.project={project['name']}"
    )
    if own is not None and own.returncode == 0 and own.stdout.strip():
        return []  # the stack is up already: `up` replaces its own containers
    found = []
    for name, service in project["services"].items():
        for port in service.get("ports", []):
            if not port.get("published"):
                continue
            host = port.get("host_ip") or "0.0.0.0"
            for number in host_ports(port["published"]):
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        probe.bind((host, number))
                    except OSError:
                        found.append(
                            f"{host}:{number} ({name}) is already in use by another "
                            "program: stop it or choose another port in deploy/.env"
                        )
    return found


def _model_problems(project: dict[str, Any]) -> list[str]:
    vllm = project["services"]["vllm-0"]
    model = vllm["command"][0]
    mounts = [v for v in vllm.get("volumes", []) if v.get("target") == "/models"]
    if not mounts:
        return ["the vllm service mounts no /models folder"]
    source = Path(mounts[0]["source"])
    if not source.is_dir():
        return [f"MODEL_DIR {source} does not exist on this host"]
    if model.startswith("/models/"):
        local = source / model.removeprefix("/models/")
        if not (local / "config.json").exists():
            return [f"VLLM_MODEL {model} has no config.json at {local} (merged weights expected)"]
    return []


def _tool_parser_problems(project: dict[str, Any]) -> list[str]:
    vllm = project["services"]["vllm-0"]
    command: list[str] = vllm["command"]
    if "--tool-parser-plugin" not in command:
        return []
    plugin = command[command.index("--tool-parser-plugin") + 1]
    mounts = [v for v in vllm.get("volumes", []) if v.get("target") == "/tool-parsers"]
    if not mounts or not plugin.startswith("/tool-parsers/"):
        return [f"the tool-parser plugin {plugin} is not in the mounted /tool-parsers folder"]
    local = Path(mounts[0]["source"]) / plugin.removeprefix("/tool-parsers/")
    if not local.is_file():
        return [f"VLLM_TOOL_PARSER_PLUGIN: no file {local} on this host"]
    return []


def urls(project_ports: dict[str, int]) -> list[str]:
    loop, mcp = project_ports.get("loop", 8080), project_ports.get("mcp-server", 8090)
    return [
        f"loop API      http://127.0.0.1:{loop}   (OpenAPI: http://127.0.0.1:{loop}/docs)",
        f"loop metrics  http://127.0.0.1:{loop}/metrics",
        f"MCP server    http://127.0.0.1:{mcp}/mcp   (metrics: /metrics)",
    ]


def published_ports(project: dict[str, Any]) -> dict[str, int]:
    ports = {}
    for name, service in project["services"].items():
        for port in service.get("ports", []):
            if port.get("published"):
                ports[name] = host_ports(port["published"])[0]
    return ports
