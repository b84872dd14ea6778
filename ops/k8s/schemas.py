"""Rendered objects against their schemas: core kinds against Kubernetes KUBERNETES_VERSION's
(kubernetes-validate, strict), custom resources against their CRDs' kept in deploy/k8s/crds/."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from .render import K8S, Obj, ref

CRDS = K8S / "crds"
# The Kubernetes release whose API schemas the core kinds are validated against.
KUBERNETES_VERSION = "1.32.0"


def _open_schema(path: Path) -> Obj:
    schema: Obj = json.loads(path.read_text(encoding="utf-8"))
    return schema


@cache
def crd_schema(api_version: str, kind: str) -> Obj | None:
    path = CRDS / f"{api_version.replace('/', '-')}-{kind}.json"
    return _open_schema(path) if path.exists() else None


def validate_schemas(objects: list[Obj]) -> list[str]:
    """Core kinds against Kubernetes KUBERNETES_VERSION's schemas (strict: no unknown field);
    custom resources against their CRDs' schemas kept in deploy/k8s/crds/."""
    return [problem for obj in objects for problem in _schema_problems(json.dumps(obj))]


@cache
def _schema_problems(document: str) -> tuple[str, ...]:
    # By the object's text: an object checked once (in any overlay) is not checked again.
    import jsonschema
    import kubernetes_validate  # type: ignore[import-untyped]  # no type information upstream

    obj = json.loads(document)
    schema = crd_schema(str(obj.get("apiVersion")), str(obj.get("kind")))
    if schema is not None:
        problems = []
        for error in jsonschema.Draft202012Validator(schema).iter_errors(obj):
            # Optional fields are anyOf [their schema, null]: name the field that failed
            # inside, not the whole list around it.
            while error.context:
                error = max(error.context, key=lambda inner: len(inner.absolute_path))
            where = ".".join(str(p) for p in error.absolute_path) or "(top)"
            problems.append(f"{ref(obj)}: {where}: {error.message.splitlines()[0]}")
        return tuple(problems)
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return (
            f"{ref(obj)}: apiVersion: no schema for {obj.get('apiVersion')} {obj.get('kind')} "
            "(a custom resource needs its CRD's schema in deploy/k8s/crds/)",
        )
    except kubernetes_validate.ValidationError as error:
        where = ".".join(str(p) for p in error.path) or "(top)"
        return (f"{ref(obj)}: {where}: {error.message.splitlines()[0]}",)
    return ()
