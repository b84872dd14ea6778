"""Each way of breaking a manifest fails the checks with one line naming the object and field:
the rendered objects are changed as a wrong edit of the overlay would change them."""

from __future__ import annotations

import base64
import os
import textwrap

from ops import k8s

from .objects import container, env, find


def problems(objects, overlay):
    return k8s.check(objects, k8s.POLICIES[overlay])


def set_secret(objects, name, key, value):
    secret = next(
        o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"].startswith(name)
    )
    secret["data"][key] = base64.b64encode(value.encode()).decode()


def test_a_reference_to_a_missing_secret(rendered):
    objects = rendered("sim")
    mcp = container(find(objects, "Deployment", "mcp-server"))
    env(mcp, "MCP_ELICITATION_STATE_KEY")["valueFrom"]["secretKeyRef"]["name"] = "leave-keys"
    assert problems(objects, "sim") == [
        "Deployment/mcp-server: containers[mcp-server].env[MCP_ELICITATION_STATE_KEY]: no Secret leave-keys"
    ]


def test_a_reference_to_a_key_the_secret_lacks(rendered):
    objects = rendered("prod")
    loop = container(find(objects, "Deployment", "loop"))
    env(loop, "LOOP_STORE_URL")["valueFrom"]["secretKeyRef"]["key"] = "STORE_URL"
    assert problems(objects, "prod") == [
        "Deployment/loop: containers[loop].env[LOOP_STORE_URL]: Secret leave-secrets has no key STORE_URL"
    ]


def test_a_missing_secret_in_an_overlay_on_disk(tmp_path):
    """The whole path: a site's overlay over sim with a patch naming a Secret nobody makes."""
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [{os.path.relpath(k8s.K8S / "overlays" / "sim", tmp_path)}]
        patches:
          - patch: |
              apiVersion: apps/v1
              kind: Deployment
              metadata: {{name: loop}}
              spec:
                template:
                  spec:
                    containers:
                      - name: loop
                        env:
                          - name: LOOP_MODEL_API_KEY
                            valueFrom:
                              secretKeyRef: {{name: model-key, key: KEY}}
        """)
    )
    assert problems(k8s.render(tmp_path), "sim") == [
        "Deployment/loop: containers[loop].env[LOOP_MODEL_API_KEY]: no Secret model-key"
    ]


def test_prod_may_not_ship_a_secret(rendered):
    objects = rendered("prod")
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "leave-secrets", "namespace": "leave-copilot"},
            "data": {},
        }
    )
    assert problems(objects, "prod") == [
        "Secret/leave-secrets: data: this overlay ships no Secret (the site creates it)"
    ]


def test_sqlite_with_two_replicas(rendered):
    objects = rendered("sim")
    set_secret(objects, "leave-secrets", "MCP_DATABASE_URL", "sqlite:////data/leave.db")
    assert problems(objects, "sim") == [
        "Deployment/mcp-server: containers[mcp-server].env[MCP_DATABASE_URL]: SQLite with 2 replicas (spec.replicas); more than one replica needs PostgreSQL"
    ]


def test_sqlite_with_one_replica_but_an_autoscaler_maximum_above_one(rendered):
    objects = rendered("sim")
    set_secret(objects, "leave-secrets", "LOOP_STORE_URL", "sqlite:////data/loop.db")
    find(objects, "Deployment", "loop")["spec"]["replicas"] = 1
    find(objects, "HorizontalPodAutoscaler", "loop")["spec"]["minReplicas"] = 1
    assert problems(objects, "sim") == [
        "Deployment/loop: containers[loop].env[LOOP_STORE_URL]: SQLite with 4 replicas (HorizontalPodAutoscaler/loop maxReplicas); more than one replica needs PostgreSQL"
    ]


def test_sqlite_with_one_replica_and_a_scaled_object_maximum_above_one(rendered):
    objects = rendered("sim")
    set_secret(objects, "leave-secrets", "MCP_DATABASE_URL", "sqlite:////data/leave.db")
    find(objects, "Deployment", "mcp-server")["spec"]["replicas"] = 1
    objects.append({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "mcp-server", "namespace": "leave-copilot"},
        "spec": {"scaleTargetRef": {"name": "mcp-server"}, "minReplicaCount": 1, "maxReplicaCount": 3,
                 "cooldownPeriod": 300, "initialCooldownPeriod": 300,
                 "triggers": [{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "70"}}]},
    })  # fmt: skip
    assert problems(objects, "sim") == [
        "Deployment/mcp-server: containers[mcp-server].env[MCP_DATABASE_URL]: SQLite with 3 replicas (ScaledObject/mcp-server maxReplicaCount); more than one replica needs PostgreSQL"
    ]


def test_sqlite_with_one_replica_and_nothing_to_scale_it_passes(rendered):
    objects = rendered("sim")
    set_secret(objects, "leave-secrets", "MCP_DATABASE_URL", "sqlite:////data/leave.db")
    find(objects, "Deployment", "mcp-server")["spec"]["replicas"] = 1
    assert [p for p in problems(objects, "sim") if "SQLite" in p] == []


def test_a_vllm_pod_without_a_gpu_in_the_gpu_overlay(rendered):
    objects = rendered("gpu")
    del container(find(objects, "Deployment", "vllm"))["resources"]["limits"]["nvidia.com/gpu"]
    assert problems(objects, "gpu") == [
        "Deployment/vllm: containers[vllm].resources.limits.nvidia.com/gpu: 0, wanted 1 (--tensor-parallel-size)"
    ]


def test_tensor_parallel_without_its_gpus_or_shared_memory(rendered):
    objects = rendered("gpu")
    vllm = find(objects, "Deployment", "vllm")
    serving = container(vllm)
    serving["args"] = [
        a.replace("--tensor-parallel-size=1", "--tensor-parallel-size=2") for a in serving["args"]
    ]
    serving["volumeMounts"] = [m for m in serving["volumeMounts"] if m["mountPath"] != "/dev/shm"]
    assert problems(objects, "gpu") == [
        "Deployment/vllm: containers[vllm].resources.limits.nvidia.com/gpu: 1, wanted 2 (--tensor-parallel-size)",
        "Deployment/vllm: containers[vllm].volumeMounts: tensor parallel needs /dev/shm in memory",
    ]


def test_a_vllm_pod_off_the_gpu_nodes(rendered):
    objects = rendered("gpu")
    spec = find(objects, "Deployment", "vllm")["spec"]["template"]["spec"]
    del spec["tolerations"], spec["nodeSelector"]
    assert problems(objects, "gpu") == [
        "Deployment/vllm: spec.template.spec.tolerations: no nvidia.com/gpu toleration",
        "Deployment/vllm: spec.template.spec.nodeSelector: GPU nodes are not selected",
    ]


def test_a_scaled_object_query_that_does_not_parse(rendered):
    objects = rendered("prod")
    trigger = find(objects, "ScaledObject", "vllm")["spec"]["triggers"][0]
    trigger["metadata"]["query"] = 'sum(vllm:num_requests_waiting{namespace="leave-copilot"'
    (problem,) = problems(objects, "prod")
    assert problem.startswith(
        "ScaledObject/vllm: spec.triggers[vllm-waiting].metadata.query: does not parse: "
    )


def test_a_scaled_object_query_unaggregated_unscoped_or_with_metric_name(rendered):
    objects = rendered("prod")
    waiting, running = find(objects, "ScaledObject", "vllm")["spec"]["triggers"]
    waiting["metadata"]["query"] = (
        'vllm:num_requests_waiting{namespace="leave-copilot", service="vllm"}'
    )
    running["metadata"]["query"] = "sum(vllm:num_requests_running)"
    running["metadata"]["metricName"] = "vllm_running"
    assert problems(objects, "prod") == [
        # the CRD schema of KEDA 2.16 still lists metricName: only our own rule refuses it
        "ScaledObject/vllm: spec.triggers[vllm-waiting].metadata.query: must be one number: wrap it in sum(...)",
        "ScaledObject/vllm: spec.triggers[vllm-running].metadata.metricName: deprecated since KEDA 2.10; remove it",
        'ScaledObject/vllm: spec.triggers[vllm-running].metadata.query: vllm:num_requests_running must be scoped to namespace="leave-copilot", service="vllm"',
    ]


def test_a_cooldown_shorter_than_a_cold_start(rendered):
    objects = rendered("prod")
    find(objects, "ScaledObject", "vllm")["spec"]["cooldownPeriod"] = 60
    assert problems(objects, "prod") == [
        "ScaledObject/vllm: spec.cooldownPeriod: 60 s is shorter than a vLLM cold start (300 s)"
    ]


def test_a_rule_expression_that_does_not_parse(rendered):
    objects = rendered("sim")
    rule = find(objects, "PrometheusRule", "leave-copilot")["spec"]["groups"][0]["rules"][0]
    rule["expr"] = 'up{job="vllm"} =='
    (problem,) = problems(objects, "sim")
    assert problem.startswith(
        f"PrometheusRule/leave-copilot: spec.groups[leave-copilot-alerts].rules[{rule['alert']}].expr: "
    )


def test_a_grace_period_shorter_than_the_drain(rendered):
    objects = rendered("gpu")
    find(objects, "Deployment", "vllm")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ] = 75
    assert problems(objects, "gpu") == [
        "Deployment/vllm: spec.template.spec.terminationGracePeriodSeconds: 75 s is not longer than preStop 15 s + --shutdown-timeout 60 s of containers[vllm]"
    ]


def test_vllm_without_its_drain(rendered):
    objects = rendered("gpu")
    serving = container(find(objects, "Deployment", "vllm"))
    del serving["lifecycle"]
    serving["args"] = [a for a in serving["args"] if not a.startswith("--shutdown-timeout")]
    assert problems(objects, "gpu") == [
        "Deployment/vllm: containers[vllm].lifecycle.preStop: vLLM needs a drain sleep",
        "Deployment/vllm: containers[vllm].args: vLLM needs --shutdown-timeout",
    ]


def test_vllm_ready_on_health_alone(rendered):
    objects = rendered("gpu")
    container(find(objects, "Deployment", "vllm"))["readinessProbe"] = {
        "httpGet": {"path": "/health", "port": "http"}
    }
    assert problems(objects, "gpu") == [
        "Deployment/vllm: containers[vllm].readinessProbe: must check that /v1/models lists 'leave-copilot'"
    ]


def test_the_router_with_cluster_wide_rights_or_wrong_flags(rendered):
    objects = rendered("sim")
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "vllm-router"},
            "rules": [],
        }
    )
    router = container(find(objects, "Deployment", "vllm-router"))
    router["args"] = [
        a
        for a in router["args"]
        if not a.startswith(("--prometheus-host", "--service-discovery-namespace"))
    ]
    find(objects, "Role", "vllm-router")["rules"][0]["verbs"].append("delete")
    assert problems(objects, "sim") == [
        "ClusterRole/vllm-router: kind: the bundle needs nothing cluster-wide",
        "Deployment/vllm-router: args --service-discovery-namespace: None, wanted $(POD_NAMESPACE)",
        "Deployment/vllm-router: args --prometheus-host: None, wanted 0.0.0.0",
        "Role/vllm-router: rules: only pods get/list/watch, found {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'delete']}",
    ]


def test_the_router_selecting_no_vllm_pod(rendered):
    objects = rendered("sim")
    labels = find(objects, "Deployment", "vllm")["spec"]["template"]["metadata"]["labels"]
    labels["app.kubernetes.io/name"] = "model-server"
    found = problems(objects, "sim")
    assert (
        "Deployment/vllm-router: args --selector: app.kubernetes.io/name=vllm matches no vLLM pod"
        in found
        or ("Deployment/vllm: spec.selector: does not match its pod labels" in found)
    )


def test_a_selector_that_misses_its_pods_and_a_service_that_selects_nothing(rendered):
    objects = rendered("sim")
    find(objects, "Service", "mcp-server")["spec"]["selector"] = {"app.kubernetes.io/name": "mcp"}
    find(objects, "PodDisruptionBudget", "loop")["spec"]["selector"]["matchLabels"] = {
        "app.kubernetes.io/name": "agent"
    }
    assert problems(objects, "sim") == [
        "Service/mcp-server: spec.selector: selects no pod of this overlay",
        "PodDisruptionBudget/loop: spec.selector: selects no pod of this overlay",
        "Deployment/loop: spec.replicas: more than one pod and no PodDisruptionBudget",
    ]


def test_a_container_without_probes_or_limits_and_a_latest_image(rendered):
    objects = rendered("sim")
    mcp = container(find(objects, "Deployment", "mcp-server"))
    del mcp["readinessProbe"], mcp["resources"]["limits"]
    mcp["image"] = "leave-copilot-bundle:latest"
    assert problems(objects, "sim") == [
        "Deployment/mcp-server: containers[mcp-server].resources.limits: missing",
        "Deployment/mcp-server: containers[mcp-server].readinessProbe: missing",
        "Deployment/mcp-server: containers[mcp-server].image: 'leave-copilot-bundle:latest' is not pinned to a tag",
    ]


def test_an_unknown_field_fails_the_schemas_core_and_custom(rendered):
    objects = rendered("prod")
    container(find(objects, "Deployment", "loop"))["readinessProbes"] = {}
    find(objects, "ScaledObject", "vllm")["spec"]["cooldownSeconds"] = 600
    find(objects, "PodMonitor", "loop")["spec"]["podMetricsEndpoints"][0]["interval"] = 5
    found = sorted(problems(objects, "prod"))
    assert len(found) == 3, found
    assert found[0].startswith("Deployment/loop: spec.template.spec.containers.0: ")
    assert "'readinessProbes' was unexpected" in found[0]
    assert found[1].startswith("PodMonitor/loop: spec.podMetricsEndpoints.0.interval: 5 is not ")
    assert found[2].startswith(
        "ScaledObject/vllm: spec: Additional properties are not allowed ('cooldownSeconds'"
    )


def test_a_custom_resource_without_a_schema(rendered):
    objects = rendered("sim")
    objects.append(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "loop"},
            "spec": {},
        }
    )
    assert problems(objects, "sim") == [
        "ServiceMonitor/loop: apiVersion: no schema for monitoring.coreos.com/v1 ServiceMonitor (a custom resource needs its CRD's schema in deploy/k8s/crds/)"
    ]


def test_an_empty_model_api_key(rendered):
    """The pod tier found it: with VLLM_API_KEY empty the loop does not start."""
    objects = rendered("sim")
    set_secret(objects, "leave-secrets", "VLLM_API_KEY", "")
    assert problems(objects, "sim") == [
        "Deployment/loop: containers[loop].env[LOOP_MODEL_API_KEY]: empty; the service needs a value"
    ]


def test_a_loop_grace_period_shorter_than_its_shutdown(rendered):
    """On SIGTERM the loop's runs get 10 s to record themselves and its open requests 5 s more:
    Kubernetes' default 30 s of grace is enough, 20 s is not (with the 5 s preStop)."""
    objects = rendered("sim")
    spec = find(objects, "Deployment", "loop")["spec"]["template"]["spec"]
    spec["terminationGracePeriodSeconds"] = 30
    assert problems(objects, "sim") == []
    spec["terminationGracePeriodSeconds"] = 20
    assert problems(objects, "sim") == [
        "Deployment/loop: spec.template.spec.terminationGracePeriodSeconds: 20 s is not longer than preStop 5 s + the loop's 10 s for its runs to record themselves + 5 s for its open requests"
    ]


def test_development_mode_outside_the_sim_overlay(rendered):
    objects = rendered("gpu")
    settings = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("mcp-server-settings")
    )
    settings["data"]["MCP_ENV"] = "development"
    assert sorted(problems(objects, "gpu")) == [
        f"{workload}: containers[{name}].env[MCP_ENV]: 'development'; only the sim overlay may "
        "seed demo data (production here)"
        for workload, name in (
            ("Deployment/mcp-server", "mcp-server"),
            ("Job/mcp-migrate", "migrate"),
        )
    ]


def test_a_pod_running_as_root_with_its_token_and_capabilities(rendered):
    objects = rendered("gpu")
    vllm = find(objects, "Deployment", "vllm")
    spec = vllm["spec"]["template"]["spec"]
    del spec["securityContext"], spec["automountServiceAccountToken"]
    container(vllm)["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"]}}
    where = "Deployment/vllm"
    assert problems(objects, "gpu") == [
        f"{where}: spec.template.spec.automountServiceAccountToken: must be false (nothing in "
        "this pod talks to the API server)",
        f"{where}: spec.template.spec.securityContext.fsGroup: missing (it mounts a claim)",
        f"{where}: initContainers[wait-for-model].securityContext.seccompProfile: not RuntimeDefault",
        f"{where}: initContainers[wait-for-model].securityContext.runAsNonRoot: must run as a "
        "non-root uid",
        f"{where}: containers[vllm].securityContext.seccompProfile: not RuntimeDefault",
        f"{where}: containers[vllm].securityContext.runAsNonRoot: must run as a non-root uid",
        f"{where}: containers[vllm].securityContext.allowPrivilegeEscalation: must be false",
        f"{where}: containers[vllm].securityContext.capabilities.drop: not ALL",
        f"{where}: containers[vllm].securityContext.capabilities.add: ['NET_ADMIN'] not allowed",
    ]


def test_the_root_exception_is_dcgm_exporters_alone(rendered):
    objects = rendered("gpu")
    k8s.pod_spec(find(objects, "Job", "model-fetch"))["securityContext"]["runAsUser"] = 0
    assert problems(objects, "gpu") == [
        "Job/model-fetch: containers[fetch].securityContext.runAsNonRoot: must run as a non-root uid"
    ]
