"""Where a setting's value is deployed, said on the settings field itself.

The settings classes are the one place a setting is written: its name (prefix + field), type,
default and `description` (the prose). `python -m devtools.settings_generated` (`make
settings-generate`) writes docs/configuration.md's settings tables, deploy/.env.example's
service settings and the Kubernetes settings ConfigMaps from them; this marker, given as a
field's `json_schema_extra`, says which of the deployment files carry the setting and with
what value:

    confirmation_timeout_seconds: float = Field(
        120.0, gt=0, description="…", json_schema_extra=deployed(env=True, configmap=True)
    )

A field without it is documented only: its default is what every deployment runs.
"""

from __future__ import annotations

from typing import Any, TypedDict

# The keys in a field's json_schema_extra; devtools/settings_generated.py reads them.
ENV_EXAMPLE = "env_example"
CONFIGMAP = "configmap"
SECRET = "secret"
SHOWN_DEFAULT = "shown_default"


class Deployed(TypedDict, total=False):
    env_example: bool | str
    configmap: bool | str
    secret: bool
    shown_default: str


def deployed(
    *,
    env: bool | str = False,
    configmap: bool | str = False,
    secret: bool = False,
    shown_default: str | None = None,
) -> dict[str, Any]:
    """A field's deployment marker (its `json_schema_extra`).

    env: deploy/.env.example carries it, for a site to set, and compose passes it on;
        True with the default, a string with this value (the containers' own, e.g. a path in a
        volume, or a development secret that production refuses).
    configmap: the service's settings ConfigMap in deploy/k8s/base carries it; True with the
        default, a string with this value (in-cluster wiring: an address, a Service's URL).
    secret: its value comes from a Secret on Kubernetes, never a ConfigMap (the generator
        refuses both).
    shown_default: the docs' default column, where the value itself does not read well (a
        computed or very long default).
    """
    if secret and configmap is not False:
        raise ValueError("a secret setting never goes into a ConfigMap")
    marker: Deployed = {}
    if env is not False:
        marker["env_example"] = env
    if configmap is not False:
        marker["configmap"] = configmap
    if secret:
        marker["secret"] = True
    if shown_default is not None:
        marker["shown_default"] = shown_default
    return dict(marker)
