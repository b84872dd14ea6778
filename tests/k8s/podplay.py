"""An overlay's workloads run by `podman kube play` (podman 4.3), as near to a cluster as it goes.

What podman 4.3 plays as it is: Deployments (every replica, as pods NAME-pod-0 …), ConfigMaps
(envFrom and volumes), PVCs (named volumes), emptyDir, init containers, security contexts,
commands and arguments. What it does not play, and what stands in here:
- a Service: each workload joins the network under the names of the Services that select its
  pods (`--network NET:alias=NAME`), so the name resolves to every replica, as a headless
  Service's does (no virtual IP, no balancing of its own);
- a Secret: each secretKeyRef is replaced by the rendered Secret's value;
- the downward API's metadata.namespace (podman 4.3 refuses it): the rendered namespace;
- containerPort: podman 4.3 publishes each on the host (two replicas would clash there);
  the pods are reached at their own addresses on the network instead, so the ports go;
- settings the tier may lower to keep its time short (`settings`, ConfigMap values; none
  at present);
- the bundle's image: built from this tree under a tag of the tier's own, so that another
  tier rebuilding the shared image store's copy cannot swap it mid-run;
- a Job: played as a Pod with restartPolicy Never, waited for until its containers exit 0;
- an init container: podman 4.3 may remove a "once" init container while it still runs (the
  pod then fails to start), so each one runs first as a Pod of its own, from the same spec,
  waited for until it exits 0; then the workload is played without it;
- a StatefulSet: played as a Deployment with one PVC per claim template (NAME-0's);
- readiness and startup probes: run here, as the kubelet would, from the manifest: an httpGet
  probe from this host to the pod's address, an exec probe with `podman exec`;
- the router's Kubernetes discovery (no API server): its discovery flags give way to
  --worker-urls with every vLLM pod by name.
Not played at all: NetworkPolicies, RBAC, PDBs, the HPA, preStop hooks, resource limits'
scheduling; those are validated on the rendered objects only (tests/k8s/test_render.py).
"""

from __future__ import annotations

import base64
import copy
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from ops import k8s
from ops.k8s import checks

DISCOVERY_FLAGS = (
    "--service-discovery", "--selector", "--service-discovery-port", "--service-discovery-namespace",
)  # fmt: skip


@dataclass
class Play:
    """One overlay's objects, played workload by workload onto one podman network."""

    podman: Callable[..., subprocess.CompletedProcess[str]]
    objects: list[k8s.Obj]
    network: str
    folder: Path
    images: dict[str, str]  # the manifests' image → the one played in its place
    settings: dict[str, str]  # ConfigMap values played in place of the rendered ones

    def secrets(self) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for obj in self.objects:
            if obj["kind"] == "Secret":
                data = obj.get("data") or {}
                found[obj["metadata"]["name"]] = {
                    key: base64.b64decode(value).decode() for key, value in data.items()
                }
        return found

    def workload(self, kind: str, name: str) -> k8s.Obj:
        return next(o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name)

    def aliases(self, workload: k8s.Obj) -> list[str]:
        labels = k8s.pod_labels(workload)
        return [
            o["metadata"]["name"]
            for o in self.objects
            if o["kind"] == "Service"
            and o["spec"].get("selector")
            and all(labels.get(k) == v for k, v in o["spec"]["selector"].items())
        ]

    def pod_names(self, workload: k8s.Obj) -> list[str]:
        if workload["kind"] == "Pod":
            return [workload["metadata"]["name"]]
        count = int(workload["spec"].get("replicas", 1))
        return [f"{workload['metadata']['name']}-pod-{index}" for index in range(count)]

    def playable(self, workload: k8s.Obj) -> list[k8s.Obj]:
        """The workload as podman 4.3 plays it (see the module's docstring), with its claims."""
        obj = copy.deepcopy(workload)
        secrets = self.secrets()
        extra: list[k8s.Obj] = []
        if obj["kind"] == "Job":
            template = obj["spec"]["template"]
            obj = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": obj["metadata"]["name"],
                    "labels": template["metadata"]["labels"],
                },
                "spec": {**template["spec"], "restartPolicy": "Never"},
            }
        elif obj["kind"] == "StatefulSet":
            name = obj["metadata"]["name"]
            for claim in obj["spec"].pop("volumeClaimTemplates", []):
                claim_name = f"{claim['metadata']['name']}-{name}-0"
                extra.append({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim_name}, "spec": claim["spec"],
                })  # fmt: skip
                obj["spec"]["template"]["spec"].setdefault("volumes", []).append(
                    {
                        "name": claim["metadata"]["name"],
                        "persistentVolumeClaim": {"claimName": claim_name},
                    }
                )
            obj["kind"] = "Deployment"
            obj["spec"].pop("serviceName", None)
        for _, container in k8s.containers(obj):
            container["image"] = self.images.get(container["image"], container["image"])
            container.pop("ports", None)
            for variable in container.get("env") or []:
                field_ref = (variable.get("valueFrom") or {}).get("fieldRef") or {}
                if field_ref.get("fieldPath") == "metadata.namespace":
                    variable.pop("valueFrom")
                    variable["value"] = workload["metadata"]["namespace"]
                key_ref = (variable.get("valueFrom") or {}).get("secretKeyRef")
                if key_ref:
                    variable.pop("valueFrom")
                    variable["value"] = secrets[key_ref["name"]][key_ref["key"]]
        if obj["metadata"]["name"] == "vllm-router":
            self._static_workers(obj)
        return [*extra, obj]

    def _static_workers(self, router: k8s.Obj) -> None:
        container = next(c for _, c in k8s.containers(router, init=False))
        args = [str(a) for a in container["args"]]
        kept: list[str] = []
        skip_value = False
        for arg in args:
            if skip_value and not arg.startswith("--"):
                continue
            skip_value = arg in DISCOVERY_FLAGS
            if arg.split("=", 1)[0] not in DISCOVERY_FLAGS:
                kept.append(arg)
        port = checks._flag(args, "--service-discovery-port")
        vllm = self.workload("Deployment", "vllm")
        container["args"] = [
            *kept, "--worker-urls", *(f"http://{pod}:{port}" for pod in self.pod_names(vllm)),
        ]  # fmt: skip

    def _play_file(self, name: str, objects: list[k8s.Obj], aliases: list[str]) -> None:
        config_maps = copy.deepcopy([o for o in self.objects if o["kind"] == "ConfigMap"])
        for config in config_maps:
            data = config.get("data") or {}
            data.update({k: v for k, v in self.settings.items() if k in data})
        documents = config_maps + objects
        path = self.folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
        joined = ",".join(f"alias={alias}" for alias in aliases)
        network = f"{self.network}:{joined}" if joined else self.network
        self.podman("kube", "play", "--network", network, str(path), timeout=180)

    def init_pods(self, workload: k8s.Obj) -> list[k8s.Obj]:
        """The workload's init containers, each as a Pod of its own (see the docstring)."""
        spec = k8s.pod_spec(self.playable(workload)[-1]) or {}
        return [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{workload['metadata']['name']}-{init['name']}"},
                "spec": {
                    **{k: v for k, v in spec.items() if k not in ("initContainers", "containers")},
                    "containers": [init],
                    "restartPolicy": "Never",
                },
            }
            for init in spec.get("initContainers") or []
        ]

    def play(self, workload: k8s.Obj, wait_exit: Callable[[str], None]) -> list[str]:
        """Play one workload (its init containers first) with every ConfigMap; the names of
        the pods it made. `wait_exit(pod)` returns once that pod's containers exited 0."""
        for init in self.init_pods(workload):
            self._play_file(init["metadata"]["name"], [init], [])
            wait_exit(init["metadata"]["name"])
            self.podman("pod", "rm", "--force", init["metadata"]["name"], check=False)
        *claims, main = self.playable(workload)
        (k8s.pod_spec(main) or {}).pop("initContainers", None)
        self._play_file(
            f"{workload['kind']}-{workload['metadata']['name']}",
            [*claims, main],
            self.aliases(workload),
        )
        return self.pod_names(main)

    def tear_down(self, workloads: list[k8s.Obj]) -> None:
        """Remove the workloads' pods and the volumes they made, played here or left by a run
        that was interrupted (the names are the manifests' own)."""
        pods = [
            pod
            for workload in workloads
            for pod in [
                *(i["metadata"]["name"] for i in self.init_pods(workload)),
                *self.pod_names(self.playable(workload)[-1]),
            ]
        ]
        existing_pods = set(self.podman("pod", "ps", "--format", "{{.Name}}").stdout.split())
        leftover = [p for p in pods if p in existing_pods]
        if leftover:
            self.podman("pod", "rm", "--force", "--time", "2", *leftover, check=False, timeout=120)
        # kube down keeps the volumes it made, as a cluster keeps a released claim's: the
        # claims' and the ConfigMaps' (podman copies a ConfigMap volume into a named one)
        volumes = [o["metadata"]["name"] for o in self.objects if o["kind"] == "ConfigMap"]
        for workload in self.objects:
            for claim in workload.get("spec", {}).get("volumeClaimTemplates") or []:
                volumes.append(f"{claim['metadata']['name']}-{workload['metadata']['name']}-0")
        for obj in self.objects:
            if obj["kind"] == "PersistentVolumeClaim":
                volumes.append(obj["metadata"]["name"])
        existing = set(self.podman("volume", "ls", "--format", "{{.Name}}").stdout.split())
        for volume in sorted(existing & set(volumes)):
            self.podman("volume", "rm", "-f", volume, check=False)

    def address(self, pod: str) -> str:
        infra = self.podman(
            "pod", "inspect", pod, "--format", "{{.InfraContainerID}}"
        ).stdout.strip()
        template = f'{{{{(index .NetworkSettings.Networks "{self.network}").IPAddress}}}}'
        return self.podman("inspect", infra, "--format", template).stdout.strip()

    def probe_passes(self, workload: k8s.Obj, pod: str, kind: str = "readinessProbe") -> bool:
        """Every container's probe of that kind, run as the kubelet runs it."""
        for _, container in k8s.containers(workload, init=False):
            probe = container.get(kind)
            if not probe:
                continue
            if "httpGet" in probe:
                port = probe["httpGet"]["port"]
                named = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
                url = (
                    f"http://{self.address(pod)}:{named.get(port, port)}{probe['httpGet']['path']}"
                )
                try:
                    if not 200 <= httpx.get(url, timeout=2).status_code < 400:
                        return False
                except httpx.HTTPError:
                    return False
            elif "exec" in probe:
                name = f"{pod}-{container['name']}"
                if (
                    self.podman("exec", name, *probe["exec"]["command"], check=False).returncode
                    != 0
                ):
                    return False
        return True

    def exited(self, pod: str) -> dict[str, tuple[str, int]]:
        """Each container of a played Job's pod: (state, exit code)."""
        names = self.podman(
            "ps", "-a", "--filter", f"pod={pod}", "--format", "{{.Names}}"
        ).stdout.split()
        states = {}
        for name in names:
            if name.endswith("-infra"):
                continue
            said = self.podman("inspect", name, "--format", "{{.State.Status}} {{.State.ExitCode}}")
            state, code = said.stdout.split()
            states[name] = (state, int(code))
        return states

    def logs(self, pod: str) -> str:
        names = self.podman(
            "ps", "-a", "--filter", f"pod={pod}", "--format", "{{.Names}}"
        ).stdout.split()
        out = []
        for name in names:
            if not name.endswith("-infra"):
                done = self.podman("logs", "--tail", "20", name, check=False)
                out.append(f"--- {name}\n{done.stdout}{done.stderr}")
        return "\n".join(out)


def metric_total(text: str, name: str) -> float:
    """The sum of a metric's samples in a /metrics page."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )
