"""The rendered overlays checked as a cluster would need them (ops.k8s.render renders them).

Every check reads the rendered objects and returns its problems, each one line naming the
object and the field ("Deployment/mcp-server: MCP_DATABASE_URL: …"), so a broken manifest fails
`make test` with the reason and nothing else; `check` is all of them, the schemas
(ops.k8s.schemas) first.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from .render import K8S, WORKLOADS, Obj, containers, pod_labels, pod_spec, ref
from .schemas import validate_schemas

EXTERNAL_SECRETS = K8S / "overlays" / "gpu" / "external-secrets.yaml"
# A vLLM replica's cold start (weights from the shared cache, torch.compile, CUDA graphs) for a
# 7-8B model; a scale-down cooldown shorter than this drops replicas that never served.
VLLM_COLD_START_SECONDS = 300
# How long the loop gives its cancelled runs to record how they ended (loop/app.py), and then
# the requests still open (common/entrypoint.py's GRACEFUL_SHUTDOWN_SECONDS).
LOOP_SHUTDOWN_GRACE_SECONDS = 10
LOOP_OPEN_REQUESTS_SECONDS = 5
# The settings whose SQLite URL would make replicas disagree (each would have a file of its own).
DATABASE_SETTINGS = ("MCP_DATABASE_URL", "LOOP_STORE_URL")
REQUIRED_SETTINGS = (*DATABASE_SETTINGS, "MCP_ELICITATION_STATE_KEY", "LOOP_MODEL_API_KEY")
ROUTER_FLAGS = {
    "--policy": "consistent_hash",
    "--service-discovery": None,
    "--service-discovery-port": "8000",
    "--service-discovery-namespace": "$(POD_NAMESPACE)",
    "--host": "0.0.0.0",
    "--prometheus-host": "0.0.0.0",
}
ROUTER_SELECTOR = "app.kubernetes.io/name=vllm"
# The pods allowed to run as root, and why; and the capabilities a container may add back.
# Settings naming a place a pod connects to outside the bundle, and the component whose
# NetworkPolicy lets it (under default-deny, a pod reaches nothing else).
EGRESS_SETTINGS = {
    "MCP_OIDC_JWKS_URL": "components/oidc-egress",
    "MCP_OTLP_TRACES_ENDPOINT": "components/otlp-egress",
    "LOOP_OTLP_TRACES_ENDPOINT": "components/otlp-egress",
}
ROOT_ALLOWED = {
    "DaemonSet/dcgm-exporter": "DCGM and the kubelet's pod-resources socket need root",
}
CAPABILITIES_ALLOWED = {"DaemonSet/dcgm-exporter": {"SYS_ADMIN"}}  # DCGM's profiling fields


@dataclass(frozen=True)
class Policy:
    """What an overlay must satisfy beyond what every overlay must."""

    gpu: bool  # vLLM pods request GPUs and land on GPU nodes
    ships_secrets: bool  # False: every Secret is the site's (external-secrets.yaml)
    # True: MCP_ENV=development, whose migration seeds demo employees with known demo tokens
    demo_data: bool = False


POLICIES = {
    "sim": Policy(gpu=False, ships_secrets=True, demo_data=True),
    "gpu": Policy(gpu=True, ships_secrets=False),
    "prod": Policy(gpu=True, ships_secrets=False),
}


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and In/NotIn/Exists/DoesNotExist) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o.get("kind") in (*WORKLOADS, "Job", "Pod")]


def check_selectors(objects: list[Obj]) -> list[str]:
    """Workload selectors select their own pods; Services, PDBs and NetworkPolicies select some."""
    problems = []
    pods = [pod_labels(o) for o in _workloads(objects)]
    for obj in objects:
        kind = obj.get("kind")
        if kind in WORKLOADS:
            selector = obj["spec"].get("selector") or {}
            if not _matches(selector, pod_labels(obj)) or not selector:
                problems.append(f"{ref(obj)}: spec.selector: does not match its pod labels")
        elif kind == "Service" and obj["spec"].get("selector"):
            if not any(_matches({"matchLabels": obj["spec"]["selector"]}, p) for p in pods):
                problems.append(f"{ref(obj)}: spec.selector: selects no pod of this overlay")
        elif kind in ("PodDisruptionBudget", "PodMonitor"):
            if not any(_matches(obj["spec"].get("selector") or {}, p) for p in pods):
                problems.append(f"{ref(obj)}: spec.selector: selects no pod of this overlay")
        elif kind == "NetworkPolicy":
            selector = obj["spec"].get("podSelector") or {}
            if selector and not any(_matches(selector, p) for p in pods):
                problems.append(f"{ref(obj)}: spec.podSelector: selects no pod of this overlay")
    return problems


def check_containers(objects: list[Obj]) -> list[str]:
    """Every container has requests and limits; every serving container has its probes."""
    problems = []
    for obj in _workloads(objects):
        serving = obj.get("kind") in WORKLOADS
        for path, container in containers(obj):
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                if not resources.get(part):
                    problems.append(f"{ref(obj)}: {path}.resources.{part}: missing")
            if serving and path.startswith("containers"):
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if not container.get(probe):
                        problems.append(f"{ref(obj)}: {path}.{probe}: missing")
    return problems


def check_images(objects: list[Obj]) -> list[str]:
    """Every image is pinned: a tag other than latest, or a digest."""
    problems = []
    for obj in _workloads(objects):
        for path, container in containers(obj):
            image = str(container.get("image", ""))
            name, _, tag = image.rpartition(":") if "@" not in image else (image, "", "digest")
            if not image or "/" in tag or not name or tag in ("", "latest"):
                problems.append(f"{ref(obj)}: {path}.image: {image!r} is not pinned to a tag")
    return problems


def _flag(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value` in a command line; "" for a bare flag."""
    for index, arg in enumerate(args):
        if arg == flag:
            following = args[index + 1] if index + 1 < len(args) else ""
            return "" if following.startswith("--") else following
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _named(objects: list[Obj], kind: str, name: str) -> Obj | None:
    return next(
        (o for o in objects if o.get("kind") == kind and o["metadata"].get("name") == name), None
    )


def _pre_stop_seconds(container: Obj) -> int:
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command") or []
    if len(command) == 2 and command[0] == "sleep":
        return int(command[1])
    sleep = container.get("lifecycle", {}).get("preStop", {}).get("sleep")
    return int(sleep["seconds"]) if sleep else 0


def _is_vllm(container: Obj) -> bool:
    return "vllm/vllm-openai" in str(container.get("image", ""))


def check_drain(objects: list[Obj]) -> list[str]:
    """terminationGracePeriodSeconds > preStop + vLLM's --shutdown-timeout, for every pod (a
    vLLM container has both: without them a deleted pod drops the requests it holds), and for
    the loop > preStop + the time its runs get to record themselves + its open requests'."""
    problems = []
    for obj in objects:
        if obj.get("kind") not in WORKLOADS:
            continue
        spec = pod_spec(obj) or {}
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        for path, container in containers(obj, init=False):
            pre_stop = _pre_stop_seconds(container)
            args = [
                str(a) for a in (container.get("command") or []) + (container.get("args") or [])
            ]
            shutdown = _flag(args, "--shutdown-timeout")
            if _is_vllm(container):
                if not pre_stop:
                    problems.append(
                        f"{ref(obj)}: {path}.lifecycle.preStop: vLLM needs a drain sleep"
                    )
                if not shutdown:
                    problems.append(f"{ref(obj)}: {path}.args: vLLM needs --shutdown-timeout")
            needed = pre_stop + int(shutdown or 0)
            if grace <= needed:
                problems.append(
                    f"{ref(obj)}: spec.template.spec.terminationGracePeriodSeconds: {grace} s is "
                    f"not longer than preStop {pre_stop} s + --shutdown-timeout "
                    f"{int(shutdown or 0)} s of {path}"
                )
            # On SIGTERM the loop ends its runs (a run waiting on a person is left for another
            # loop to take over), gives them time to record themselves, then cuts the
            # requests still open after a few seconds.
            if _setting(objects, container, "LOOP_CONFIRMATION_TIMEOUT_SECONDS", None):
                needed = pre_stop + LOOP_SHUTDOWN_GRACE_SECONDS + LOOP_OPEN_REQUESTS_SECONDS
                if grace <= needed:
                    problems.append(
                        f"{ref(obj)}: spec.template.spec.terminationGracePeriodSeconds: {grace} s "
                        f"is not longer than preStop {pre_stop} s + the loop's "
                        f"{LOOP_SHUTDOWN_GRACE_SECONDS} s for its runs to record themselves + "
                        f"{LOOP_OPEN_REQUESTS_SECONDS} s for its open requests"
                    )
    return problems


def _autoscalers(objects: list[Obj], workload: Obj) -> list[Obj]:
    """The HorizontalPodAutoscalers and ScaledObjects whose scaleTargetRef is the workload."""
    name, kind = workload["metadata"]["name"], workload["kind"]
    return [
        obj
        for obj in objects
        if (target := obj.get("spec", {}).get("scaleTargetRef", {})).get("name") == name
        and target.get("kind", "Deployment") == kind
    ]


def _max_replicas(objects: list[Obj], workload: Obj) -> tuple[int, str]:
    """The most replicas the workload can have, and what says so."""
    count, source = int(workload["spec"].get("replicas", 1)), "spec.replicas"
    if workload.get("kind") == "DaemonSet":
        return 2, "a DaemonSet (one per node)"
    for obj in _autoscalers(objects, workload):
        if obj.get("kind") == "HorizontalPodAutoscaler":
            most = int(obj["spec"].get("maxReplicas", 1))
            if most > count:
                count, source = most, f"{ref(obj)} maxReplicas"
        elif obj.get("kind") == "ScaledObject":
            most = int(obj["spec"].get("maxReplicaCount", 100))  # KEDA's default maximum
            if most > count:
                count, source = most, f"{ref(obj)} maxReplicaCount"
    return count, source


def check_pdbs(objects: list[Obj]) -> list[str]:
    """Every workload that runs more than one pod has a PodDisruptionBudget."""
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    problems = []
    for obj in objects:
        if obj.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        if _max_replicas(objects, obj)[0] > 1 and not any(
            _matches(b["spec"].get("selector") or {}, pod_labels(obj)) for b in budgets
        ):
            problems.append(
                f"{ref(obj)}: spec.replicas: more than one pod and no PodDisruptionBudget"
            )
    return problems


def _min_replicas(objects: list[Obj], workload: Obj) -> tuple[int, str]:
    """The fewest replicas the workload can be left with by its autoscaler, and what says so
    (an autoscaler owns the count: spec.replicas no longer holds once one targets it)."""
    count, source = int(workload["spec"].get("replicas", 1)), "spec.replicas"
    for obj in _autoscalers(objects, workload):
        if obj.get("kind") == "HorizontalPodAutoscaler":
            count, source = int(obj["spec"].get("minReplicas", 1)), f"{ref(obj)} minReplicas"
        elif obj.get("kind") == "ScaledObject":
            # KEDA's default minimum is 0
            count = int(obj["spec"].get("minReplicaCount", 0))
            source = f"{ref(obj)} minReplicaCount"
    return count, source


def _scaled(value: int | str, expected: int) -> int:
    """An IntOrString of a PDB as the disruption controller reads it (percentages round up)."""
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * expected // 100)
    return int(value)


def disruptions_allowed(budget: Obj, expected: int, healthy: int) -> int:
    """How many pods the PodDisruptionBudget lets an eviction take, as Kubernetes computes it
    (pkg/controller/disruption): healthy − desired healthy, never below 0."""
    spec = budget["spec"]
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected)
    elif "maxUnavailable" in spec:
        desired = expected - _scaled(spec["maxUnavailable"], expected)
    else:
        desired = 0
    return max(0, healthy - desired)


def check_last_replica(objects: list[Obj]) -> list[str]:
    """No PodDisruptionBudget lets a drain evict a workload's last ready replica at the fewest
    replicas its autoscaler may leave it with (KEDA at 1 with maxUnavailable: 1 would)."""
    problems = []
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    for obj in objects:
        if obj.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        fewest, source = _min_replicas(objects, obj)
        for budget in budgets:
            if not _matches(budget["spec"].get("selector") or {}, pod_labels(obj)):
                continue
            # every replica ready, and each one the budget lets go evicted in turn
            if fewest and disruptions_allowed(budget, fewest, fewest) >= fewest:
                problems.append(
                    f"{ref(budget)}: spec: lets a drain evict the last ready replica of "
                    f"{ref(obj)} at {fewest} replica(s) ({source})"
                )
    return problems


@cache
def external_secrets() -> dict[str, dict[str, str]]:
    """The Secrets the gpu and prod overlays use and the site creates: name → key → what."""
    listed = yaml.safe_load(EXTERNAL_SECRETS.read_text(encoding="utf-8"))["secrets"]
    return {entry["name"]: dict(entry["keys"]) for entry in listed}


def _rendered_secrets(objects: list[Obj]) -> dict[str, dict[str, str]]:
    secrets: dict[str, dict[str, str]] = {}
    for obj in objects:
        if obj.get("kind") != "Secret":
            continue
        values = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        values.update(obj.get("stringData") or {})
        secrets[obj["metadata"]["name"]] = values
    return secrets


def check_secret_refs(objects: list[Obj], policy: Policy) -> list[str]:
    """Every Secret a pod reads exists with that key: in the render, or (an overlay that ships
    no Secret) in external-secrets.yaml. One the overlay may not ship is an error too."""
    problems = []
    rendered = _rendered_secrets(objects)
    if not policy.ships_secrets:
        problems += [
            f"Secret/{name}: data: this overlay ships no Secret (the site creates it)"
            for name in rendered
        ]
    # Where the overlay ships none, a Secret rendered anyway is reported above, not resolved.
    known = rendered if policy.ships_secrets else external_secrets()
    for obj in _workloads(objects):
        for path, container in containers(obj):
            for env in container.get("env") or []:
                key_ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if key_ref and not key_ref.get("optional"):
                    name, key = key_ref["name"], key_ref["key"]
                    if name not in known:
                        problems.append(f"{ref(obj)}: {path}.env[{env['name']}]: no Secret {name}")
                    elif key not in known[name]:
                        problems.append(
                            f"{ref(obj)}: {path}.env[{env['name']}]: Secret {name} has no key {key}"
                        )
            for source in container.get("envFrom") or []:
                secret_ref = source.get("secretRef")
                if (
                    secret_ref
                    and not secret_ref.get("optional")
                    and secret_ref["name"] not in known
                ):
                    problems.append(f"{ref(obj)}: {path}.envFrom: no Secret {secret_ref['name']}")
        for volume in (pod_spec(obj) or {}).get("volumes") or []:
            secret = volume.get("secret")
            if secret and not secret.get("optional") and secret.get("secretName") not in known:
                problems.append(
                    f"{ref(obj)}: volumes[{volume['name']}]: no Secret {secret.get('secretName')}"
                )
    return problems


def _setting(objects: list[Obj], container: Obj, name: str, policy: Policy | None) -> str | None:
    """What a container's environment variable holds: its value, the Secret's (an external
    Secret's documented form; not looked up without a policy), or its ConfigMap's."""
    for source in container.get("envFrom") or []:
        config = _named(objects, "ConfigMap", (source.get("configMapRef") or {}).get("name", ""))
        if config and name in (config.get("data") or {}):
            found = str(config["data"][name])
            break
    else:
        found = None
    for env in container.get("env") or []:
        if env.get("name") != name:
            continue
        if "value" in env:
            return str(env["value"])
        key_ref = (env.get("valueFrom") or {}).get("secretKeyRef")
        if key_ref and policy is not None:
            secrets = _rendered_secrets(objects) if policy.ships_secrets else external_secrets()
            return secrets.get(key_ref["name"], {}).get(key_ref["key"])
    return found


def check_single_writer_databases(objects: list[Obj], policy: Policy) -> list[str]:
    """More than one replica (spec.replicas, an HPA's or a ScaledObject's maximum) needs
    PostgreSQL: each replica would otherwise write a SQLite file of its own."""
    problems = []
    for obj in objects:
        if obj.get("kind") not in WORKLOADS:
            continue
        most, source = _max_replicas(objects, obj)
        for path, container in containers(obj, init=False):
            for name in DATABASE_SETTINGS:
                url = _setting(objects, container, name, policy)
                if url is None:
                    continue
                if most > 1 and url.startswith("sqlite"):
                    problems.append(
                        f"{ref(obj)}: {path}.env[{name}]: SQLite with {most} replicas ({source}); "
                        "more than one replica needs PostgreSQL"
                    )
    return problems


def check_required_values(objects: list[Obj], policy: Policy) -> list[str]:
    """The settings a service refuses to start without are not empty where the overlay gives
    their values (an empty model API key stops the loop: the OpenAI client refuses it)."""
    problems = []
    for obj in _workloads(objects):
        for path, container in containers(obj):
            for name in REQUIRED_SETTINGS:
                if _setting(objects, container, name, policy) == "":
                    problems.append(
                        f"{ref(obj)}: {path}.env[{name}]: empty; the service needs a value"
                    )
    return problems


def check_production_mode(objects: list[Obj], policy: Policy) -> list[str]:
    """Outside the demo overlay every MCP_ENV is production: in development the migration Job
    seeds demo employees whose tokens are published, into the site's own database."""
    if policy.demo_data:
        return []
    problems = []
    for obj in _workloads(objects):
        for path, container in containers(obj):
            value = _setting(objects, container, "MCP_ENV", policy)
            if value is not None and value != "production":
                problems.append(
                    f"{ref(obj)}: {path}.env[MCP_ENV]: {value!r}; only the sim overlay may seed "
                    "demo data (production here)"
                )
    return problems


def _bound_accounts(objects: list[Obj]) -> set[str]:
    return {
        str(subject.get("name"))
        for o in objects
        if o.get("kind") == "RoleBinding"
        for subject in o.get("subjects") or []
    }


def check_pod_security(objects: list[Obj]) -> list[str]:
    """Every pod: no service-account token unless its account is bound to a Role (the
    router's pod watcher), seccomp RuntimeDefault, not root (ROOT_ALLOWED aside), an fsGroup
    where it mounts a claim; every container: no privilege escalation, ALL capabilities
    dropped (CAPABILITIES_ALLOWED added back)."""
    problems = []
    bound = _bound_accounts(objects)
    for obj in _workloads(objects):
        spec, name = pod_spec(obj) or {}, ref(obj)
        pod = spec.get("securityContext") or {}
        account = spec.get("serviceAccountName")
        if spec.get("automountServiceAccountToken") is not False and account not in bound:
            problems.append(
                f"{name}: spec.template.spec.automountServiceAccountToken: must be false "
                "(nothing in this pod talks to the API server)"
            )
        claims = [v for v in spec.get("volumes") or [] if v.get("persistentVolumeClaim")]
        if (claims or obj.get("spec", {}).get("volumeClaimTemplates")) and "fsGroup" not in pod:
            problems.append(
                f"{name}: spec.template.spec.securityContext.fsGroup: missing (it mounts a claim)"
            )
        for path, container in containers(obj):
            own = container.get("securityContext") or {}
            seccomp = (own.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
            if seccomp != "RuntimeDefault":
                problems.append(
                    f"{name}: {path}.securityContext.seccompProfile: not RuntimeDefault"
                )
            non_root = own.get("runAsNonRoot", pod.get("runAsNonRoot"))
            user = own.get("runAsUser", pod.get("runAsUser"))
            if name not in ROOT_ALLOWED and (non_root is not True or user in (None, 0)):
                problems.append(
                    f"{name}: {path}.securityContext.runAsNonRoot: must run as a non-root uid"
                )
            if own.get("allowPrivilegeEscalation") is not False:
                problems.append(
                    f"{name}: {path}.securityContext.allowPrivilegeEscalation: must be false"
                )
            capabilities = own.get("capabilities") or {}
            if "ALL" not in (capabilities.get("drop") or []):
                problems.append(f"{name}: {path}.securityContext.capabilities.drop: not ALL")
            extra = set(capabilities.get("add") or []) - CAPABILITIES_ALLOWED.get(name, set())
            if extra:
                problems.append(
                    f"{name}: {path}.securityContext.capabilities.add: {sorted(extra)} not allowed"
                )
    return problems


def _url_port(url: str) -> int:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _egress_ports(objects: list[Obj], labels: Mapping[str, str]) -> set[int] | None:
    """The TCP ports the NetworkPolicies let pods with these labels reach; None: every port."""
    ports: set[int] = set()
    for obj in objects:
        if obj.get("kind") != "NetworkPolicy" or "Egress" not in obj["spec"].get("policyTypes", []):
            continue
        if not _matches(obj["spec"].get("podSelector") or {}, labels):
            continue
        for rule in obj["spec"].get("egress") or []:
            if not rule.get("ports"):
                return None
            ports |= {int(p["port"]) for p in rule["ports"] if isinstance(p.get("port"), int)}
    return ports


def check_egress(objects: list[Obj], policy: Policy) -> list[str]:
    """A pod given a URL outside the bundle (EGRESS_SETTINGS) may reach its port: under the
    default-deny policy a JWKS URL or trace collector without its egress fails at run time."""
    problems = []
    # The servers only: the migration Job reads the same settings but `seed` neither checks
    # tokens nor sends spans.
    for obj in (o for o in objects if o.get("kind") in WORKLOADS):
        allowed = _egress_ports(objects, pod_labels(obj))
        for path, container in containers(obj, init=False):
            for name, component in EGRESS_SETTINGS.items():
                url = _setting(objects, container, name, policy)
                if not url or allowed is None or _url_port(url) in allowed:
                    continue
                problems.append(
                    f"{ref(obj)}: {path}.env[{name}]: no NetworkPolicy lets it reach port "
                    f"{_url_port(url)} (add {component})"
                )
    return problems


def check_router(objects: list[Obj]) -> list[str]:
    """The router discovers this namespace's Ready vLLM pods with a namespaced Role, hashes on
    the session, and listens (metrics included) on every address."""
    problems = [
        f"{ref(o)}: kind: the bundle needs nothing cluster-wide"
        for o in objects
        if o.get("kind") in ("ClusterRole", "ClusterRoleBinding")
    ]
    routers = [
        o
        for o in objects
        if o.get("kind") == "Deployment" and o["metadata"]["name"] == "vllm-router"
    ]
    if not routers:
        return [*problems, "Deployment/vllm-router: missing"]
    router = routers[0]
    container = next(c for _, c in containers(router, init=False))
    args = [str(a) for a in container.get("args") or []]
    for flag, wanted in ROUTER_FLAGS.items():
        value = _flag(args, flag)
        if value is None or (wanted is not None and value != wanted):
            problems.append(f"{ref(router)}: args {flag}: {value!r}, wanted {wanted or 'set'}")
    selector = _flag(args, "--selector")
    vllm_pods = [
        pod_labels(o)
        for o in objects
        if o.get("kind") == "Deployment" and o["metadata"]["name"] == "vllm"
    ]
    if selector != ROUTER_SELECTOR or not vllm_pods:
        problems.append(f"{ref(router)}: args --selector: {selector!r}, wanted {ROUTER_SELECTOR}")
    else:
        key, _, value = selector.partition("=")
        if any(labels.get(key) != value for labels in vllm_pods):
            problems.append(f"{ref(router)}: args --selector: {selector} matches no vLLM pod")
    if int(router["spec"].get("replicas", 1)) < 2:
        problems.append(f"{ref(router)}: spec.replicas: two routers, so that one can go")
    account = (pod_spec(router) or {}).get("serviceAccountName")
    bound = [
        o for o in objects
        if o.get("kind") == "RoleBinding"
        and any(s.get("name") == account for s in o.get("subjects") or [])
    ]  # fmt: skip
    if not bound:
        problems.append(f"{ref(router)}: serviceAccountName: {account!r} has no RoleBinding")
    for binding in bound:
        role = _named(objects, "Role", binding["roleRef"]["name"])
        if binding["roleRef"].get("kind") != "Role" or role is None:
            problems.append(f"{ref(binding)}: roleRef: must be a Role of this namespace")
            continue
        for rule in role.get("rules") or []:
            if rule.get("resources") != ["pods"] or set(rule.get("verbs") or []) - {
                "get",
                "list",
                "watch",
            }:
                problems.append(f"{ref(role)}: rules: only pods get/list/watch, found {rule}")
    return problems


def _served_model(container: Obj) -> str | None:
    args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    served = _flag(args, "--served-model-name")
    if served:
        return served
    return next(
        (str(e.get("value")) for e in container.get("env") or [] if e.get("name") == "SIM_MODEL"),
        None,
    )


def check_vllm(objects: list[Obj], policy: Policy) -> list[str]:
    """vLLM pods: Ready only once /v1/models lists the served model; a startup budget for the
    weights; in a GPU overlay, a GPU each, GPU nodes, the taint tolerated, /dev/shm for TP."""
    problems = []
    for obj in objects:
        if (
            obj.get("kind") != "Deployment"
            or pod_labels(obj).get("app.kubernetes.io/name") != "vllm"
        ):
            continue
        spec = pod_spec(obj) or {}
        for path, container in containers(obj, init=False):
            readiness = json.dumps(container.get("readinessProbe") or {})
            model = _served_model(container)
            if "/v1/models" not in readiness or not model or model not in readiness:
                problems.append(
                    f"{ref(obj)}: {path}.readinessProbe: must check that /v1/models lists {model!r}"
                )
            if not policy.gpu:
                continue
            startup = container.get("startupProbe") or {}
            budget = int(startup.get("periodSeconds", 10)) * int(startup.get("failureThreshold", 3))
            if budget < 600:
                problems.append(
                    f"{ref(obj)}: {path}.startupProbe: {budget} s is no budget for loading weights"
                )
            args = [str(a) for a in container.get("args") or []]
            parallel = int(_flag(args, "--tensor-parallel-size") or 1)
            gpus = int(
                (container.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0)
            )
            if gpus != parallel:
                problems.append(
                    f"{ref(obj)}: {path}.resources.limits.nvidia.com/gpu: {gpus}, wanted "
                    f"{parallel} (--tensor-parallel-size)"
                )
            volumes = spec.get("volumes") or []
            in_memory = {
                v["name"] for v in volumes if (v.get("emptyDir") or {}).get("medium") == "Memory"
            }
            mounts = container.get("volumeMounts") or []
            shm = [m for m in mounts if m.get("mountPath") == "/dev/shm"]
            if parallel > 1 and not any(m.get("name") in in_memory for m in shm):
                problems.append(
                    f"{ref(obj)}: {path}.volumeMounts: tensor parallel needs /dev/shm in memory"
                )
        if policy.gpu:
            if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations") or []):
                problems.append(
                    f"{ref(obj)}: spec.template.spec.tolerations: no nvidia.com/gpu toleration"
                )
            if not spec.get("nodeSelector") and not spec.get("affinity"):
                problems.append(
                    f"{ref(obj)}: spec.template.spec.nodeSelector: GPU nodes are not selected"
                )
    return problems


def _selectors(expression: Any) -> list[Any]:
    import promql_parser

    found: list[Any] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(expression, visit, None)
    return found


def parse_promql(query: str) -> tuple[Any, str | None]:
    """(the expression, None) or (None, the parser's one-line complaint)."""
    import promql_parser

    try:
        return promql_parser.parse(query), None
    except ValueError as error:
        return None, str(error).splitlines()[0]


def check_autoscalers(objects: list[Obj]) -> list[str]:
    """ScaledObjects: each Prometheus query parses, is one summed number, counts only this
    namespace's vLLM service, names no metricName; cooldowns outlast a cold start; a cron
    trigger is one KEDA accepts. Every PrometheusRule expression parses."""
    import promql_parser

    problems = []
    for obj in objects:
        if obj.get("kind") == "PrometheusRule":
            for group in obj["spec"].get("groups") or []:
                for index, rule in enumerate(group.get("rules") or []):
                    _, error = parse_promql(str(rule.get("expr", "")))
                    if error:
                        what = rule.get("alert") or rule.get("record") or index
                        problems.append(
                            f"{ref(obj)}: spec.groups[{group['name']}].rules[{what}].expr: {error}"
                        )
        if obj.get("kind") != "ScaledObject":
            continue
        namespace = obj["metadata"].get("namespace")
        target = obj["spec"]["scaleTargetRef"]["name"]
        for field in ("cooldownPeriod", "initialCooldownPeriod"):
            if int(obj["spec"].get(field, 0)) < VLLM_COLD_START_SECONDS:
                problems.append(
                    f"{ref(obj)}: spec.{field}: {obj['spec'].get(field, 0)} s is shorter than a "
                    f"vLLM cold start ({VLLM_COLD_START_SECONDS} s)"
                )
        for trigger in obj["spec"].get("triggers") or []:
            where = f"{ref(obj)}: spec.triggers[{trigger.get('name')}].metadata"
            metadata = trigger.get("metadata") or {}
            if "metricName" in metadata:
                problems.append(f"{where}.metricName: deprecated since KEDA 2.10; remove it")
            if trigger.get("type") == "cron":
                problems += _cron_problems(obj, where, metadata)
            if trigger.get("type") != "prometheus":
                continue
            expression, error = parse_promql(str(metadata.get("query", "")))
            if error:
                problems.append(f"{where}.query: does not parse: {error}")
                continue
            if not (
                isinstance(expression, promql_parser.AggregateExpr) and str(expression.op) == "sum"
            ):
                problems.append(f"{where}.query: must be one number: wrap it in sum(...)")
            for selector in _selectors(expression):
                labels = {m.name: m.value for m in selector.matchers.matchers}
                if labels.get("namespace") != namespace or labels.get("service") != target:
                    problems.append(
                        f"{where}.query: {selector.name} must be scoped to "
                        f'namespace="{namespace}", service="{target}"'
                    )
    return problems


def _cron_problems(obj: Obj, where: str, metadata: Mapping[str, Any]) -> list[str]:
    """A KEDA cron trigger KEDA would accept and that means what it says: a known IANA
    timezone, five-field start and end that differ, and desiredReplicas between the
    ScaledObject's floor and ceiling (above the ceiling KEDA would hold it at the ceiling)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    problems = []
    try:
        ZoneInfo(str(metadata.get("timezone", "")))
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(f"{where}.timezone: {metadata.get('timezone')!r} is not an IANA timezone")
    for field in ("start", "end"):
        if len(str(metadata.get(field, "")).split()) != 5:
            problems.append(f"{where}.{field}: not a five-field cron expression")
    if metadata.get("start") == metadata.get("end"):
        problems.append(f"{where}: start and end are the same time (KEDA refuses it)")
    lowest = int(obj["spec"].get("minReplicaCount", 0))
    highest = int(obj["spec"].get("maxReplicaCount", 100))
    desired = str(metadata.get("desiredReplicas", ""))
    if not desired.isdigit() or not lowest <= int(desired) <= highest:
        problems.append(
            f"{where}.desiredReplicas: {desired!r} is not a count from minReplicaCount "
            f"({lowest}) to maxReplicaCount ({highest})"
        )
    return problems


def check(objects: list[Obj], policy: Policy) -> list[str]:
    """Every problem of an overlay's rendered objects."""
    return [
        *validate_schemas(objects),
        *check_selectors(objects),
        *check_containers(objects),
        *check_images(objects),
        *check_drain(objects),
        *check_pdbs(objects),
        *check_last_replica(objects),
        *check_secret_refs(objects, policy),
        *check_single_writer_databases(objects, policy),
        *check_required_values(objects, policy),
        *check_production_mode(objects, policy),
        *check_pod_security(objects),
        *check_egress(objects, policy),
        *check_router(objects),
        *check_vllm(objects, policy),
        *check_autoscalers(objects),
    ]
