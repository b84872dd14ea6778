"""The replica layout for 1 to 8 GPUs: deploy/compose.layout.yaml, from deploy/.env.

The site says how many GPUs serve (VLLM_GPUS) and how many each replica spans
(VLLM_TENSOR_PARALLEL_SIZE); VLLM_GPU_IDS may name which of the host's GPUs. Compose has no
loops, so this writes the replicas out: vllm-1 … `extends` vllm-0 of compose.yaml (or of
compose.sim.yaml: a simulator standing for those GPUs), each pinned to its own GPUs by
`device_ids` (Docker maps `count: N` to GPUs 0..N-1, which would stack every replica on the
same ones), with a dcgm-exporter on the same GPUs, and the router's `--worker-urls` names
every replica. `docker compose config` with this file shows the whole layout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values

from . import compose, model_identity

LAYOUT_FILE = compose.DEPLOY / "compose.layout.yaml"
MAX_GPUS = 8
ENGINE_PORT = 8000
ROUTER = "vllm-router"
# What the layout reads from the env file that no compose file interpolates.
VARIABLES = ("VLLM_GPUS", "VLLM_GPU_IDS", "VLLM_MODEL_REVISION")


class LayoutError(ValueError):
    """The env file asks for a layout that cannot be served; the message names the variable."""


@dataclass(frozen=True)
class Replica:
    name: str  # vllm-0 …
    gpus: tuple[str, ...]  # host GPU ids, as Docker's device_ids takes them

    @property
    def url(self) -> str:
        return f"http://{self.name}:{ENGINE_PORT}"

    @property
    def exporter(self) -> str:
        return f"dcgm-exporter-{self.name.removeprefix('vllm-')}"


@dataclass(frozen=True)
class Layout:
    gpus: int
    tensor_parallel_size: int
    replicas: tuple[Replica, ...]

    def describe(self) -> str:
        each = "GPU" if self.tensor_parallel_size == 1 else "GPUs"
        placed = ", ".join(f"{r.name} on {each} {','.join(r.gpus)}" for r in self.replicas)
        return f"{len(self.replicas)} replica(s) × {self.tensor_parallel_size} {each}: {placed}"


def settings(env_file: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The env file's values with the environment's winning, as Compose reads them."""
    values = {k: v or "" for k, v in dotenv_values(env_file).items()}
    return {**values, **(os.environ if environ is None else environ)}


def _whole(values: Mapping[str, str], name: str, default: int) -> int:
    raw = values.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise LayoutError(f"{name}={raw!r} is not a whole number") from None


def plan(values: Mapping[str, str]) -> Layout:
    """The replicas VLLM_GPUS, VLLM_TENSOR_PARALLEL_SIZE and VLLM_GPU_IDS ask for."""
    gpus = _whole(values, "VLLM_GPUS", 1)
    size = _whole(values, "VLLM_TENSOR_PARALLEL_SIZE", 1)
    if not 1 <= gpus <= MAX_GPUS:
        raise LayoutError(f"VLLM_GPUS={gpus}: this layout serves 1 to {MAX_GPUS} GPUs on one host")
    if size < 1 or gpus % size:
        raise LayoutError(
            f"VLLM_TENSOR_PARALLEL_SIZE={size} does not divide VLLM_GPUS={gpus}: each replica "
            "spans the same number of GPUs"
        )
    named = [g.strip() for g in values.get("VLLM_GPU_IDS", "").split(",") if g.strip()]
    ids = named or [str(i) for i in range(gpus)]
    if len(ids) != gpus:
        raise LayoutError(f"VLLM_GPU_IDS names {len(ids)} GPUs, VLLM_GPUS asks for {gpus}")
    if len(set(ids)) != len(ids):
        raise LayoutError(f"VLLM_GPU_IDS={','.join(ids)} names a GPU twice")
    replicas = tuple(
        Replica(f"vllm-{k}", tuple(ids[k * size : (k + 1) * size])) for k in range(gpus // size)
    )
    return Layout(gpus, size, replicas)


class _Override(dict[str, Any]):
    """A mapping Compose must take instead of merging it into the one before (`!override`):
    device lists, for one, are appended to, which would pin a replica to GPU 0 as well."""


class _OverrideList(list[Any]):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    str,
    lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None),
)
_Dumper.add_representer(_Override, lambda d, v: d.represent_mapping("!override", dict(v)))
_Dumper.add_representer(_OverrideList, lambda d, v: d.represent_sequence("!override", list(v)))


def _devices(gpus: tuple[str, ...]) -> _Override:
    device = {"driver": "nvidia", "device_ids": list(gpus), "capabilities": ["gpu"]}
    return _Override({"resources": {"reservations": {"devices": [device]}}})


def router_command(command: list[str], layout: Layout) -> list[str]:
    """The router's command with `--worker-urls` naming every replica. The values are
    resolved already, so a `$` is escaped from Compose's second interpolation."""
    kept: list[str] = []
    skipping = False
    for argument in command:
        if argument == "--worker-urls":
            skipping = True
            continue
        if skipping and argument.startswith("--"):
            skipping = False
        if not skipping:
            kept.append(argument.replace("$", "$$"))
    return [*kept, "--worker-urls", *(r.url for r in layout.replicas)]


def services(
    layout: Layout, project: dict[str, Any], *, sim: bool, revision: str = "unknown"
) -> dict[str, Any]:
    """The services compose.layout.yaml adds to or changes in `project` (config without it).
    `extends` names the bundle's files relative to the project directory, deploy/."""
    base = compose.BASE_FILE.name
    template = compose.SIM_FILE.name if sim else base
    written: dict[str, Any] = {}
    for k, replica in enumerate(layout.replicas):
        engine: dict[str, Any] = {}
        if k:
            engine["extends"] = {"file": template, "service": "vllm-0"}
        if sim:
            environment = project["services"]["vllm-0"].get("environment") or {}
            if k or environment.get("SIM_GPU_IDS") != ",".join(replica.gpus):
                engine["environment"] = {"SIM_GPU_IDS": ",".join(replica.gpus)}
        else:
            engine["deploy"] = _devices(replica.gpus)
            exporter: dict[str, Any] = {"deploy": _devices(replica.gpus)}
            if k:
                exporter = {"extends": {"file": base, "service": "dcgm-exporter-0"}}
                exporter["deploy"] = _devices(replica.gpus)
            written[replica.exporter] = exporter
        if engine:
            written[replica.name] = engine
    written["loop"] = {"environment": {"LOOP_MODEL_REVISION": revision}}
    router = project["services"][ROUTER]
    written[ROUTER] = {
        "command": _OverrideList(router_command(list(router["command"]), layout)),
        "depends_on": {r.name: {"condition": "service_healthy"} for r in layout.replicas},
    }
    return written


# The compose config (deploy/compose.yaml) Prometheus reads its vLLM targets from.
PROMETHEUS_TARGETS = "prometheus-vllm-replicas"


def prometheus_targets(layout: Layout) -> str:
    """Prometheus's file_sd list of the layout's replicas: each a target, labelled replica, so
    that one stopped stays a target that is down (up == 0) rather than vanishing."""
    groups = [
        {"targets": [f"{r.name}:{ENGINE_PORT}"], "labels": {"replica": r.name}}
        for r in layout.replicas
    ]
    return yaml.safe_dump(groups, sort_keys=False)


def write(
    layout: Layout,
    project: dict[str, Any],
    *,
    sim: bool,
    path: Path = LAYOUT_FILE,
    revision: str = "unknown",
) -> Path:
    kind = "simulator" if sim else "GPU"
    header = (
        f"# Written by `python -m ops layout` for the {kind} layout: {layout.describe()}.\n"
        "# From VLLM_GPUS, VLLM_TENSOR_PARALLEL_SIZE and VLLM_GPU_IDS; `make up` / `make up-sim`\n"
        "# write it again each time, so edit deploy/.env, not this file.\n"
    )
    written = services(layout, project, sim=sim, revision=revision)
    configs = {PROMETHEUS_TARGETS: {"content": prometheus_targets(layout)}}
    body = yaml.dump(
        {"services": written, "configs": configs},
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
    )
    path.write_text(header + body)
    return path


def write_for(
    env_file: Path, *, sim: bool, environ: Mapping[str, str] | None = None, path: Path = LAYOUT_FILE
) -> Layout:
    """Plan the layout env_file asks for and write it; LayoutError or ComposeError if it
    cannot be served."""
    values = settings(env_file, environ)
    layout = plan(values)
    project = compose.config(sim=sim, env_file=env_file, environ=environ)
    write(
        layout,
        project,
        sim=sim,
        path=path,
        revision=model_identity.revision(project, values, sim=sim),
    )
    return layout
