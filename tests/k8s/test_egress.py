"""The ways out of default-deny: a JWKS URL or a trace endpoint needs its egress, the components
give it, and docs/kubernetes.md lists every egress policy the bundle renders."""

from __future__ import annotations

import os
import re
import textwrap

from ops import k8s
from ops.k8s import checks
from tests.support import REPO_ROOT

URLS = {
    "MCP_OIDC_ISSUER": "https://idp.example.com/realms/staff",
    "MCP_OIDC_AUDIENCE": "leave-mcp",
    "MCP_OIDC_JWKS_URL": "https://idp.example.com/realms/staff/protocol/openid-connect/certs",
    "MCP_OTLP_TRACES_ENDPOINT": "http://otel-collector.observability:4318/v1/traces",
}
LOOP_URLS = {"LOOP_OTLP_TRACES_ENDPOINT": "http://otel-collector.observability:4318/v1/traces"}
COMPONENTS = ("oidc-egress", "otlp-egress")


def site(tmp_path, components: tuple[str, ...]) -> list[k8s.Obj]:
    """A site's overlay over prod with single sign-on and traces, and these components."""
    listed = ", ".join(os.path.relpath(k8s.K8S / "components" / c, tmp_path) for c in components)
    mcp = "".join(f"\n              - {k}={v}" for k, v in URLS.items())
    loop = "".join(f"\n              - {k}={v}" for k, v in LOOP_URLS.items())
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [{os.path.relpath(k8s.K8S / "overlays" / "prod", tmp_path)}]
        components: [{listed}]
        configMapGenerator:
          - name: mcp-server-settings
            behavior: merge
            literals:{mcp}
          - name: loop-settings
            behavior: merge
            literals:{loop}
        """)
    )
    return k8s.render(tmp_path)


def test_single_sign_on_and_traces_without_their_egress_fail_the_check(tmp_path):
    objects = site(tmp_path, ())
    assert k8s.check_egress(objects, k8s.POLICIES["prod"]) == [
        "Deployment/loop: containers[loop].env[LOOP_OTLP_TRACES_ENDPOINT]: no NetworkPolicy "
        "lets it reach port 4318 (add components/otlp-egress)",
        "Deployment/mcp-server: containers[mcp-server].env[MCP_OIDC_JWKS_URL]: no NetworkPolicy "
        "lets it reach port 443 (add components/oidc-egress)",
        "Deployment/mcp-server: containers[mcp-server].env[MCP_OTLP_TRACES_ENDPOINT]: no "
        "NetworkPolicy lets it reach port 4318 (add components/otlp-egress)",
    ]


def test_the_components_open_exactly_those_ways(tmp_path):
    objects = site(tmp_path, COMPONENTS)
    assert k8s.check(objects, k8s.POLICIES["prod"]) == []
    mcp = k8s.pod_labels(next(o for o in objects if k8s.ref(o) == "Deployment/mcp-server"))
    loop = k8s.pod_labels(next(o for o in objects if k8s.ref(o) == "Deployment/loop"))
    assert {443, 4318} <= (checks._egress_ports(objects, mcp) or set())
    assert 4318 in (checks._egress_ports(objects, loop) or set())
    assert 443 not in (checks._egress_ports(objects, loop) or set())  # the IdP is the MCP server's


def test_the_page_lists_every_egress_policy(rendered, tmp_path):
    page = (REPO_ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    section = page.split("\n## Egress\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.MULTILINE))
    rendered_objects = [o for overlay in k8s.OVERLAYS for o in rendered(overlay)]
    rendered_objects += site(tmp_path, COMPONENTS)
    egress = {
        o["metadata"]["name"]
        for o in rendered_objects
        if o["kind"] == "NetworkPolicy"
        and "Egress" in o["spec"]["policyTypes"]
        and o["spec"].get("egress")  # default-deny opens nothing
    }
    assert egress == listed
