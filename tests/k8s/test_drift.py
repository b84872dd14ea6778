"""Kubernetes and compose run the same bundle: the same images, ports, settings and command
lines, read from compose's own model (`docker compose config` with deploy/.env.example) and
from the rendered overlays. A change on one side only fails here."""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from devtools import k8s_generated
from ops import compose, k8s
from tests.support import REPO_ROOT

from .objects import container, find

# Values each side takes from its own secret store (compose: deploy/.env; Kubernetes: Secrets).
SECRET_SOURCED = {
    "MCP_DATABASE_URL", "MCP_ELICITATION_STATE_KEY", "LOOP_STORE_URL", "LOOP_MODEL_API_KEY",
    "VLLM_API_KEY", "HF_TOKEN",
}  # fmt: skip
SERVE_HELP = REPO_ROOT / "tests" / "fixtures" / "vllm-0.32" / "serve-help.txt"
# What Kubernetes does otherwise: the drain timeout (compose stops with its own grace), and the
# router's discovery in place of compose's list of replicas.
K8S_ONLY_VLLM_FLAGS = {"--shutdown-timeout"}
K8S_ONLY_ROUTER_FLAGS = {
    "--service-discovery", "--selector", "--service-discovery-port", "--service-discovery-namespace",
}  # fmt: skip
COMPOSE_ONLY_ROUTER_FLAGS = {"--worker-urls"}
# Where the GPU overlays differ from deploy/.env.example's development defaults on purpose: a
# cluster's database is the site's, so no demo data goes into it (the sim overlay keeps compose's).
K8S_PRODUCTION_SETTINGS = {
    "mcp-server": {"MCP_ENV": "production"},
    "loop": {"LOOP_CHAT_DEMO_SIGN_IN": "false"},  # production: no demo employees offered
}

# Set on Kubernetes only: compose runs one loop, with no other replica to send requests on to.
K8S_ONLY_SETTINGS = {"mcp-server": set(), "loop": {"LOOP_PEER_URL"}}


@cache
def project(*, sim: bool = False) -> dict[str, Any]:
    environ = {**os.environ, "COMPOSE_PROFILES": "postgres,load" if sim else "gpu,postgres,load"}
    return compose.config(sim=sim, environ=environ, extra_files=[compose.LOAD_FILE])


def service(name: str, *, sim: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = project(sim=sim)["services"][name]
    return found


def flags(command: list[str]) -> dict[str, str]:
    """A command line's flags as {flag: value} ("" for a bare flag), both spellings alike;
    positional words under their place ("#0" …)."""
    found: dict[str, str] = {}
    words = [str(w) for w in command]
    index = 0
    while index < len(words):
        word = words[index]
        if word.startswith("--"):
            flag, equals, value = word.partition("=")
            if not equals:
                following = words[index + 1] if index + 1 < len(words) else "--"
                value = "" if following.startswith("--") else following
                index += 0 if following.startswith("--") else 1
            found[flag] = value
        else:
            found[f"#{len(found)}"] = word
        index += 1
    return found


def k8s_environment(objects: list[k8s.Obj], workload: k8s.Obj, name: str) -> dict[str, str]:
    """A container's environment: its ConfigMaps' data, then its own env (a Secret's → "<secret>")."""
    serving = container(workload, name)
    environment: dict[str, str] = {}
    for source in serving.get("envFrom") or []:
        config = source["configMapRef"]["name"]
        environment.update(
            next(
                o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == config
            )["data"]
        )
    for variable in serving.get("env") or []:
        if "value" in variable:
            environment[variable["name"]] = str(variable["value"])
        elif "secretKeyRef" in variable.get("valueFrom", {}):
            environment[variable["name"]] = "<secret>"
    return environment


@pytest.mark.parametrize("name", ["mcp-server", "loop"])
def test_each_service_has_composes_settings_and_values(rendered, name):
    objects = rendered("gpu")
    ours = k8s_environment(objects, find(objects, "Deployment", name), name)
    theirs = {k: str(v) for k, v in (service(name)["environment"] or {}).items()}
    only_compose = sorted(set(theirs) - set(ours))
    only_k8s = sorted(set(ours) - set(theirs) - K8S_ONLY_SETTINGS[name])
    assert (only_compose, only_k8s) == ([], []), (
        f"{name}: settings only compose sets {only_compose} (add them to "
        f"deploy/k8s/base/{name}.env, or to a Secret), only Kubernetes sets {only_k8s}"
    )
    for variable in SECRET_SOURCED & set(theirs):
        assert ours[variable] == "<secret>", f"{variable} must come from a Secret"
    theirs |= K8S_PRODUCTION_SETTINGS[name]
    differ = {
        k: (theirs[k], ours[k]) for k in theirs if k not in SECRET_SOURCED and theirs[k] != ours[k]
    }
    assert differ == {}


@pytest.mark.parametrize("name", ["mcp-server", "loop"])
def test_the_sim_overlay_keeps_composes_development_values(rendered, name):
    objects = rendered("sim")
    ours = k8s_environment(objects, find(objects, "Deployment", name), name)
    theirs = {k: str(v) for k, v in (service(name)["environment"] or {}).items()}
    assert {k: ours[k] for k in K8S_PRODUCTION_SETTINGS[name]} == {
        k: theirs[k] for k in K8S_PRODUCTION_SETTINGS[name]
    }


def test_images_are_composes(rendered):
    gpu, sim = rendered("gpu"), rendered("sim")
    bundle = service("mcp-server")["image"]
    expected = {
        ("gpu", "Deployment", "vllm"): service("vllm-0")["image"],
        ("gpu", "Job", "model-fetch"): service("vllm-0")["image"],
        ("gpu", "Deployment", "vllm-router"): service("vllm-router")["image"],
        ("gpu", "Deployment", "mcp-server"): bundle,
        ("gpu", "Job", "mcp-migrate"): service("mcp-seed")["image"],
        ("gpu", "Deployment", "loop"): service("loop")["image"],
        ("gpu", "DaemonSet", "dcgm-exporter"): service("dcgm-exporter-0")["image"],
        ("sim", "Deployment", "vllm"): service("vllm-0", sim=True)["image"],
        ("sim", "StatefulSet", "postgres"): service("postgres", sim=True)["image"],
        ("sim", "Job", "locust-master"): service("locust-master", sim=True)["image"],
        ("sim", "Deployment", "locust-worker"): service("locust-worker", sim=True)["image"],
    }
    for (overlay, kind, name), image in expected.items():
        workload = find(gpu if overlay == "gpu" else sim, kind, name)
        found = {c["image"] for _, c in k8s.containers(workload)}
        assert found == {image}, f"{overlay} {kind}/{name}"


def test_the_vllm_command_line_is_composes_plus_the_drain(rendered):
    theirs = flags(service("vllm-0")["command"])
    ours = flags(container(find(rendered("gpu"), "Deployment", "vllm"))["args"])
    assert {k: v for k, v in ours.items() if k not in K8S_ONLY_VLLM_FLAGS} == theirs
    # every flag is one vLLM 0.32 takes (its recorded --help=all)
    known = SERVE_HELP.read_text(encoding="utf-8")
    assert [f for f in ours if f.startswith("--") and f not in known] == []


def test_the_router_command_line_is_composes_with_discovery(rendered):
    theirs = flags(service("vllm-router")["command"])
    ours = flags(
        ["vllm-router", *container(find(rendered("gpu"), "Deployment", "vllm-router"))["args"]]
    )
    assert {k: v for k, v in ours.items() if k not in K8S_ONLY_ROUTER_FLAGS} == {
        k: v for k, v in theirs.items() if k not in COMPOSE_ONLY_ROUTER_FLAGS
    }


def test_the_router_takes_every_flag_given_to_it(rendered):
    """The pinned vllm-router's own --help lists each flag the manifest passes."""
    binary = Path(REPO_ROOT / ".venv" / "bin" / "vllm-router")
    if not binary.exists():
        pytest.skip("vllm-router is not installed (make install)")
    known = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    args = container(find(rendered("gpu"), "Deployment", "vllm-router"))["args"]
    assert [
        a
        for a in flags(args)
        if a.startswith("--") and f"{a} " not in known and f"[{a}]" not in known
    ] == []


def test_the_simulator_is_composes(rendered):
    objects = rendered("sim")
    vllm = find(objects, "Deployment", "vllm")
    theirs = service("vllm-0", sim=True)
    ours = k8s_environment(objects, vllm, "vllm")
    # SIM_GPU_IDS names the GPUs a compose replica stands for; a pod stands for none.
    wanted = {k: str(v) for k, v in theirs["environment"].items() if k != "SIM_GPU_IDS"}
    # compose.sim.yaml's vllm-0 environment ⇄ overlays/sim/modelsim.yaml's
    assert {k: v for k, v in ours.items() if k != "VLLM_API_KEY"} == wanted
    assert container(vllm)["command"] == theirs["command"]


def _probe_path(probe: dict[str, Any]) -> str:
    return str(probe["httpGet"]["path"]) if "httpGet" in probe else ""


@pytest.mark.parametrize(
    ("overlay", "name", "probe"),
    [
        ("gpu", "vllm-router", "readinessProbe"),
        ("gpu", "mcp-server", "readinessProbe"),
        ("gpu", "loop", "livenessProbe"),
        ("gpu", "vllm", "livenessProbe"),
        ("sim", "vllm", "livenessProbe"),
    ],
)
def test_probes_ask_what_composes_healthchecks_ask(rendered, overlay, name, probe):
    compose_name = "vllm-0" if name == "vllm" else name
    test = service(compose_name, sim=overlay == "sim")["healthcheck"]["test"]
    url = next(word for word in test if str(word).startswith("http://"))
    port, path = url.split("127.0.0.1:")[1].split("/", 1)
    serving = container(find(rendered(overlay), "Deployment", name))
    assert _probe_path(serving[probe]) == "/" + path
    named = {p["name"]: p["containerPort"] for p in serving["ports"]}
    assert named[serving[probe]["httpGet"]["port"]] == int(port)


def test_the_generated_manifests_are_what_their_files_give():
    stale = [
        str(path.relative_to(REPO_ROOT))
        for path, text in k8s_generated.generated().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert stale == [], "run `make kubernetes-generate`"


def test_the_rules_in_the_cluster_are_the_rules_of_compose(rendered):
    import yaml

    shipped = find(rendered("sim"), "PrometheusRule", "leave-copilot")["spec"]["groups"]
    files = sorted((REPO_ROOT / "monitoring" / "prometheus" / "rules").glob("*.yml"))
    assert shipped == [
        g for f in files for g in yaml.safe_load(f.read_text(encoding="utf-8"))["groups"]
    ]
    dashboards = find(rendered("gpu"), "ConfigMap", "leave-copilot-dashboards")["data"]
    for file in (REPO_ROOT / "monitoring" / "grafana" / "dashboards").glob("*.json"):
        assert dashboards[file.name] == file.read_text(encoding="utf-8")


@pytest.mark.parametrize("overlay", ["gpu", "sim"])
def test_the_settings_configmaps_hold_the_settings_marked_for_them_and_no_secret(rendered, overlay):
    """The rendered ConfigMaps are the generated .env files: every setting marked `configmap`
    (with its value; the sim overlay's MCP_ENV and LOOP_CHAT_DEMO_SIGN_IN only are its own),
    none marked `secret`, whose values each pod takes from leave-secrets."""
    from devtools import settings_generated

    objects = rendered(overlay)
    for path, classes in settings_generated.CONFIGMAPS.items():
        name = f"{path.stem}-settings"
        workload = find(objects, "Deployment", path.stem)
        (reference,) = [  # kustomize names it with a hash of its data
            source["configMapRef"]["name"]
            for source in container(workload, path.stem).get("envFrom") or []
            if source["configMapRef"]["name"].startswith(name)
        ]
        data = find(objects, "ConfigMap", reference)["data"]
        wanted = {
            settings_generated.name_of(c, field): value
            for c in classes
            for field, info in c.model_fields.items()
            if (value := settings_generated.deployed_value(info, "configmap")) is not None
        }
        if overlay == "sim" and name == "mcp-server-settings":
            wanted["MCP_ENV"] = "development"  # the only overlay with demo data
        if overlay == "sim" and name == "loop-settings":
            wanted["LOOP_CHAT_DEMO_SIGN_IN"] = "true"  # and the chat page offers its employees
        assert data == wanted, name
        secrets = {
            settings_generated.name_of(c, field)
            for c in classes
            for field, info in c.model_fields.items()
            if settings_generated.marker(info).get("secret")
        }
        from_secrets = {
            v["name"]
            for v in container(workload, path.stem).get("env") or []
            if "secretKeyRef" in v.get("valueFrom", {})
        }
        assert secrets <= from_secrets, name
