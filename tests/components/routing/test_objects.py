"""Inference routing: prod's InferencePool, endpoint picker and gateway wiring, exactly; the failure
and streaming settings; and the rejections for routes that cannot use a pool."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from llm_serving.platform import crd_manifest_text
from llm_serving.platform.args import validate
from llm_serving.routing import pool_problems
from llm_serving.routing.objects import picker_config
from stacks import checks
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_gpu_node_group_checks import BASE
from tests.support import reference

MODEL = "llama-70b"
VLLM_LABELS = {"app.kubernetes.io/component": "vllm", "app.kubernetes.io/name": MODEL}
PICKER_LABELS = {"app.kubernetes.io/component": "endpoint-picker", "app.kubernetes.io/name": f"{MODEL}-epp"}


def _by(result: Any, kind: str, name: str) -> dict[str, Any]:
    return result.manifest(kind, name)


def test_prods_pool_selects_exactly_the_models_vllm_pods_on_their_port(rendered):
    prod = rendered["prod"]
    pool = _by(prod, "InferencePool", MODEL)
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"] == {
        "selector": {"matchLabels": VLLM_LABELS},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"group": "", "kind": "Service", "name": f"{MODEL}-epp", "port": {"number": 9002},
                              "failureMode": "FailOpen"},
    }
    # The response streams through the picker's filter: duplex, never buffered.
    assert pool["metadata"]["annotations"] == {"aigateway.envoyproxy.io/processing-body-mode": "duplex"}
    assert pool_problems(pool, _by(prod, "Deployment", MODEL)) == []
    assert reference.custom_resource_errors(pool) == []


def test_a_pool_that_misses_the_deployment_is_named_with_what_it_selects():
    pool = {"metadata": {"name": MODEL}, "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "llama-7b"}},
                                                  "targetPorts": [{"number": 8080}]}}
    deployment = {"metadata": {"name": MODEL}, "spec": {"template": {
        "metadata": {"labels": VLLM_LABELS},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]}}}}
    assert pool_problems(pool, deployment) == [
        "InferencePool llama-70b: selector {'app.kubernetes.io/name': 'llama-7b'} matches no pod of Deployment "
        "llama-70b (its pods carry {'app.kubernetes.io/component': 'vllm', 'app.kubernetes.io/name': 'llama-70b'})",
        "InferencePool llama-70b: target port 8080 is not a container port of Deployment llama-70b (it listens on "
        "[8000])",
    ]


def test_prods_picker_runs_two_active_replicas_that_drain_for_the_longest_stream(rendered):
    deployment = _by(rendered["prod"], "Deployment", f"{MODEL}-epp")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == ("ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
                                  "@sha256:2e516fa1310da7be59b82beb1445362139597d6d553ef04d546716abe3aaaa70")
    # prod's stream bound: 16,384 tokens at the 0.1 s ITL objective after the 2 s TTFT objective, plus 10 %.
    assert container["args"] == [
        "--pool-name", MODEL, "--pool-namespace", "llm-serving", "--pool-group", "inference.networking.k8s.io",
        "--config-file", "/config/config.yaml", "--grpc-port", "9002", "--grpc-health-port", "9003",
        "--metrics-port", "9090", "--drain-timeout=1805s", "--metrics-endpoint-auth=false", "--enable-pprof=false",
        "--tracing=false", "--zap-encoder", "json",
    ]
    # No leader election: every replica is Ready, so the rollout and the PDB work and failover is the Service's.
    assert not any("leader-election" in arg for arg in container["args"])
    assert pod["terminationGracePeriodSeconds"] == 1805 + 30
    # A config change rolls the pickers: they read the file once, at startup.
    config = _by(rendered["prod"], "ConfigMap", f"{MODEL}-epp")["data"]
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations == {"llm-serving/picker-config-sha256": hashlib.sha256(
        f"config.yaml\0{config['config.yaml']}\0".encode()).hexdigest()}
    assert container["readinessProbe"] == {"grpc": {"port": 9003, "service": "readiness"}, "periodSeconds": 2,
                                           "failureThreshold": 2}
    assert container["livenessProbe"] == {"grpc": {"port": 9003, "service": "liveness"}, "initialDelaySeconds": 10,
                                          "periodSeconds": 10, "failureThreshold": 6}
    # Headless: the gateway resolves every picker and drops a draining one from DNS.
    assert _by(rendered["prod"], "Service", f"{MODEL}-epp")["spec"]["clusterIP"] == "None"
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "4096Mi"}, "limits": {"memory": "8192Mi"}}
    # Pod Security `restricted`.
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert [(c["topologyKey"], c["whenUnsatisfiable"]) for c in pod["topologySpreadConstraints"]] == [
        ("kubernetes.io/hostname", "ScheduleAnyway"), ("topology.kubernetes.io/zone", "ScheduleAnyway")]
    assert _by(rendered["prod"], "PodDisruptionBudget", f"{MODEL}-epp")["spec"] == {
        "maxUnavailable": 1, "selector": {"matchLabels": PICKER_LABELS}}


def test_prods_picker_scores_queue_kv_cache_and_prefix_from_vllm_metrics(rendered):
    config = _by(rendered["prod"], "ConfigMap", f"{MODEL}-epp")["data"]["config.yaml"]
    # Prod adds overload admission around the same scoring (tests/components/routing/test_admission.py).
    scoring = picker_config().split("kind: EndpointPickerConfig\n")[1]
    assert scoring.split("schedulingProfiles:")[1] in config
    assert picker_config() == (
        "apiVersion: llm-d.ai/v1alpha1\n"
        "kind: EndpointPickerConfig\n"
        "plugins:\n"
        "- type: queue-scorer\n"
        "- type: kv-cache-utilization-scorer\n"
        "- type: prefix-cache-scorer\n"
        "- type: metrics-data-source\n"
        "  parameters:\n"
        "    scheme: http\n"
        "    path: /metrics\n"
        "- type: core-metrics-extractor\n"
        "schedulingProfiles:\n"
        "- name: default\n"
        "  plugins:\n"
        "  - pluginRef: queue-scorer\n"
        "    weight: 2\n"
        "  - pluginRef: kv-cache-utilization-scorer\n"
        "    weight: 2\n"
        "  - pluginRef: prefix-cache-scorer\n"
        "    weight: 3\n"
    )


def test_prods_route_names_the_pool_and_keeps_every_streaming_setting(rendered, dev_awake):
    prod, dev = rendered["prod"], dev_awake
    rule = _by(prod, "HTTPRoute", MODEL)["spec"]["rules"][0]
    assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": MODEL}]
    assert rule["timeouts"] == {"request": "1805s"}
    policy = _by(prod, "BackendTrafficPolicy", MODEL)["spec"]
    assert policy["retry"] == {"numRetries": 0} and "requestBuffer" not in policy
    assert policy["timeout"]["http"]["requestTimeout"] == "1805s"
    # A model of one replica all day: its route keeps the Service, and no AI Gateway is installed.
    dev_rule = _by(dev, "HTTPRoute", "llama-8b")["spec"]["rules"][0]
    assert dev_rule["backendRefs"] == [{"group": "", "kind": "Service", "name": "llama-8b", "port": 8000}]
    assert not [r for r in dev.resources if r["name"].startswith("edge-ai-gateway")]


def test_envoy_gateway_starts_after_the_pool_crd_and_its_right_to_read_pools(rendered):
    prod = rendered["prod"]
    gateway = prod.resource("kubernetes:helm.sh/v3:Release", "edge-envoy-gateway")
    assert sorted(gateway["options"]["dependsOn"]) == [
        "kubernetes:core/v1:Namespace::edge-namespace",
        "kubernetes:helm.sh/v4:Chart::edge-gateway-crds",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole::edge-clusterrole-pool-reader",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding::edge-clusterrolebinding-pool-reader",
        "kubernetes:yaml/v2:ConfigGroup::edge-inference-pool-crds",
    ]
    crds = prod.resource("kubernetes:yaml/v2:ConfigGroup", "edge-inference-pool-crds")
    assert crds["inputs"]["yaml"] == crd_manifest_text("gateway-api-inference-extension-v1.6.0.yaml")
    extension = gateway["inputs"]["values"]["config"]["envoyGateway"]["extensionManager"]
    assert extension["backendResources"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}]
    assert extension["service"] == {"fqdn": {
        "hostname": "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local", "port": 1063}}
    binding = _by(prod, "ClusterRoleBinding", "envoy-gateway-inference-pool-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "envoy-gateway",
                                    "namespace": "envoy-gateway-system"}]
    ai_crds = prod.resource("kubernetes:helm.sh/v3:Release", "edge-ai-gateway-crds")
    assert "kubernetes:helm.sh/v3:Release::edge-envoy-gateway" in ai_crds["options"]["dependsOn"]
    ai = prod.resource("kubernetes:helm.sh/v3:Release", "edge-ai-gateway")
    assert "kubernetes:helm.sh/v3:Release::edge-ai-gateway-crds" in ai["options"]["dependsOn"]
    values = ai["inputs"]["values"]
    assert values["envoyGateway"] == {"namespace": "envoy-gateway-system"}
    assert values["controller"]["replicaCount"] == 2
    assert values["controller"]["podDisruptionBudget"] == {"enabled": True, "minAvailable": 1}
    # The pod webhook selects a label value no pod carries: it is never called.
    assert values["controller"]["mutatingWebhook"] == {
        "objectSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "llm-serving-no-ai-gateway-sidecar"}}}
    assert reference.helm_value_errors("ai-gateway-helm", "1.1.0", values) == []


def test_extension_manager_keys_are_fields_of_envoy_gateways_api():
    # EnvoyGateway v1.9.0 api/v1alpha1/envoygateway_types.go: ExtensionManager and ExtensionHooks fields.
    from llm_serving.edge.objects import envoy_gateway_chart_values

    gateway = envoy_gateway_chart_values(inference_extension=True)["config"]["envoyGateway"]
    assert set(gateway["extensionManager"]) <= {"resources", "policyResources", "backendResources", "hooks",
                                                "service", "failOpen", "maxMessageSize"}
    assert set(gateway["extensionManager"]["hooks"]["xdsTranslator"]) == {"translation", "post"}
    assert set(gateway["extensionApis"]) <= {"enableEnvoyPatchPolicy", "enableBackend"}
    assert envoy_gateway_chart_values() == {
        "config": {"envoyGateway": {"gateway": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"}}},
        "crds": {"enabled": False},
    }


def test_pickers_are_fenced_and_admitted_to_the_vllm_pods(dev_awake, rendered):
    prod = rendered["prod"]
    serving = _by(prod, "NetworkPolicy", "vllm-serving")["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "endpoint-picker"}}} in serving
    fence = _by(prod, "NetworkPolicy", "endpoint-pickers")["spec"]
    # Only this Gateway's Envoy proxies call ext_proc; only the operator's Prometheus pods scrape.
    assert fence["ingress"] == [
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}},
                   "podSelector": {"matchLabels": {
                       "app.kubernetes.io/name": "envoy", "app.kubernetes.io/component": "proxy",
                       "app.kubernetes.io/managed-by": "envoy-gateway",
                       "gateway.envoyproxy.io/owning-gateway-name": "llm-serving",
                       "gateway.envoyproxy.io/owning-gateway-namespace": "envoy-gateway-system"}}}],
         "ports": [{"protocol": "TCP", "port": 9002}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus",
                                                   "app.kubernetes.io/managed-by": "prometheus-operator"}}}],
         "ports": [{"protocol": "TCP", "port": 9090}]},
    ]
    # A model routed through its Service: no picker to admit; the proxies and Prometheus by label, and its
    # verification Job (same namespace), as in prod.
    dev_sources = _by(dev_awake, "NetworkPolicy", "vllm-serving")["spec"]["ingress"][0]["from"]
    assert fence["ingress"][0]["from"][0] in dev_sources and fence["ingress"][1]["from"][0] in dev_sources
    assert [s for s in dev_sources if "namespaceSelector" not in s] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "verify"}}}]
    assert len(dev_sources) == 3


def test_picker_alerts_page_when_no_picker_is_up(rendered):
    rule = _by(rendered["prod"], "PrometheusRule", "endpoint-picker-alerts")
    group, ttft = rule["spec"]["groups"]
    assert (group["name"], ttft["name"]) == ("endpoint-picker-llama-70b", "edge-ttft-llama-70b")
    assert [r["alert"] for r in ttft["rules"]] == ["EdgeTtftBudgetBurnFast", "EdgeTtftBudgetBurnSlow"]
    by_name = {r["alert"]: r for r in group["rules"]}
    assert list(by_name) == ["EndpointPickerBelowDisruptionBudget", "EndpointPickerRestarting", "EndpointPickerDown",
                             "EndpointPickerDegraded", "EndpointPickerErrors", "EndpointPickerSaturated",
                             "InferencePoolNoReadyEndpoints", "ModelShedding", "EndpointPickerMetricsStale"]
    # Below the PDB's floor pages within 2 minutes (a flapping picker never holds sum(up) == 0 for one);
    # any restart warns, since each one sends requests to a dead picker for seconds.
    below = by_name["EndpointPickerBelowDisruptionBudget"]
    pdb = 'namespace="llm-serving", poddisruptionbudget="llama-70b-epp"'
    assert below["expr"] == (f"kube_poddisruptionbudget_status_current_healthy{{{pdb}}} < "
                             f"kube_poddisruptionbudget_status_desired_healthy{{{pdb}}}")
    assert (below["for"], below["labels"]["severity"]) == ("2m", "critical")
    restarts = by_name["EndpointPickerRestarting"]
    assert restarts["expr"] == ('sum(increase(kube_pod_container_status_restarts_total{namespace="llm-serving", '
                                'pod=~"llama-70b-epp-[a-z0-9]+-[a-z0-9]+"}[15m])) > 0')
    assert (restarts["for"], restarts["labels"]["severity"]) == ("0m", "warning")
    down = by_name["EndpointPickerDown"]
    assert down["expr"] == ('sum(up{job="llm-serving/llama-70b-epp"}) == 0 or '
                            'absent(up{job="llm-serving/llama-70b-epp"})')
    assert (down["for"], down["labels"]["severity"]) == ("1m", "critical")
    assert by_name["EndpointPickerDegraded"]["expr"] == 'sum(up{job="llm-serving/llama-70b-epp"}) < 2'
    assert reference.custom_resource_errors(rule) == []


# --- what a preview refuses -------------------------------------------------------------------------------


def _lines(edge: dict[str, Any] | None = None, route: dict[str, Any] | None = None, **top: Any) -> list[str]:
    model = {**BASE["models"][0], "route": {**BASE["models"][0].get("route", {}), **(route or {})}}
    config = validate(ServingStackArgs,
        {**BASE, **top, "edge": {**BASE["edge"], **(edge or {})}, "models": [model]})
    return [p.line() for p in checks.check(config)]


def test_an_alb_cannot_route_to_a_pool():
    assert _lines(edge={"mode": "alb", "albControllerRoleArn": "arn:aws:iam::123456789012:role/alb",
                        "loadBalancerSubnetIds": ["subnet-0aaa1111", "subnet-0bbb2222"],
                        "tls": {"acmCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/"
                                "0a1b2c3d-0000-4000-8000-000000000000"}},
                  route={"routing": "inferencePool"}) == [
        "llm-serving:models[qwen-7b].route.routing: alb mode cannot route to an InferencePool (got "
        "\"inferencePool\"; expected service, or edge.mode gateway)"]


def test_an_existing_gateway_cannot_route_to_a_pool():
    assert _lines(edge={"controller": "existing"}, route={"routing": "inferencePool"}) == [
        "llm-serving:models[qwen-7b].route.routing: an existing Envoy Gateway is not configured here with Envoy "
        "AI Gateway as its extension, which InferencePool routes need (got \"inferencePool\"; expected service, or "
        "edge.controller install)"]


def test_one_picker_is_refused_outside_dev():
    assert _lines(edge={"inferenceRouting": {"pickerReplicas": 1}}, route={"routing": "inferencePool"}) == [
        "llm-serving:edge.inferenceRouting.pickerReplicas: the gateway fails closed without a picker, so one picker "
        "is a single point of failure for qwen-7b (got 1; expected >= 2 outside dev)"]


def test_a_ttft_objective_below_the_pickers_smallest_bucket_is_refused_for_a_pooled_model():
    model = {**BASE["models"][0], "route": {"routing": "inferencePool"}, "slo": {"ttftP95Seconds": 0.001}}
    config = validate(ServingStackArgs, {**BASE, "models": [model]})
    assert [p.line() for p in checks.check(config)] == [
        "llm-serving:models[qwen-7b].slo.ttftP95Seconds: below the endpoint picker's smallest time-to-first-token "
        "bucket: the edge cannot tell a first token within it from a slower one (got 0.001; expected >= 0.005)"]
    # Routed to its Service, the model has no edge TTFT alert and needs no such bucket.
    served = {**model, "route": {"routing": "service"}}
    assert checks.check(validate(ServingStackArgs, {**BASE, "models": [served]})) == []


def test_a_picker_memory_limit_below_its_request_is_refused():
    assert _lines(edge={"inferenceRouting": {"pickerMemoryRequestMib": 4096, "pickerMemoryLimitMib": 2048}}) == [
        "llm-serving:edge.inferenceRouting.pickerMemoryLimitMib: below the memory request (got 2048; expected >= "
        "pickerMemoryRequestMib (4096))"]


@pytest.mark.parametrize(("edge", "autoscaling", "expected"), [
    ({}, {"minReplicas": 1, "maxReplicas": 3}, "inferencePool"),  # can scale past one replica
    ({}, {}, "service"),  # one replica: nothing to choose between
    ({"controller": "existing"}, {"minReplicas": 1, "maxReplicas": 3}, "service"),
])
def test_unset_routing_picks_a_pool_only_where_it_can_help_and_work(edge, autoscaling, expected):
    from llm_serving.stack.planning import routing_mode

    model = {**BASE["models"][0], "autoscaling": autoscaling}
    config = validate(ServingStackArgs, {**BASE, "edge": {**BASE["edge"], **edge}, "models": [model]})
    assert routing_mode(config, config.models[0]).value == expected


def test_a_negative_priority_makes_the_models_requests_sheddable_through_its_objective():
    from llm_serving.edge.objects import Route, _route_objects
    from llm_serving.routing import OBJECTIVE_HEADER, RoutedModel, inference_objective
    from tests.components.edge.test_objects import SETTINGS

    batch = RoutedModel(name="batch-8b", namespace="llm-serving", pod_selector={}, port=8000, drain_seconds=900,
                        priority=-1)
    objective = inference_objective(batch)
    assert objective == {
        "apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceObjective",
        "metadata": {"name": "batch-8b", "namespace": "llm-serving",
                     "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "spec": {"poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "batch-8b"},
                 "priority": -1},
    }
    assert reference.custom_resource_errors(objective) == []
    unset = RoutedModel(name="m", namespace="n", pod_selector={}, port=8000, drain_seconds=1)
    assert inference_objective(unset) is None
    route = Route(model_name="batch-8b", namespace="llm-serving", port=8000, host="llm.example.com", path_prefix="/",
                  request_timeout_seconds=0, stream_idle_timeout_seconds=300, request_body_limit_bytes=8 << 20,
                  drain_seconds=300, inference_pool=True, objective_header=(OBJECTIVE_HEADER, "batch-8b"))
    http_route, _ = _route_objects(SETTINGS, route)
    rule = http_route["spec"]["rules"][0]
    assert rule["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "x-llm-d-inference-objective", "value": "batch-8b"}]}}]
    assert reference.custom_resource_errors(http_route) == []


def test_a_priority_on_a_service_route_is_refused():
    assert _lines(route={"routing": "service", "priority": -1}) == [
        "llm-serving:models[qwen-7b].route.priority: only an endpoint picker reads a priority; this model's route "
        "uses its Service (got -1; expected unset, or route.routing inferencePool)"]


def test_the_route_switches_to_the_pool_only_once_its_picker_is_ready(rendered, dev_awake):
    # Pulumi waits for a Deployment to be Ready; the gateway fails closed, so the route must wait too.
    prod = rendered["prod"]
    for kind, name in (("gateway.networking.k8s.io/v1:HTTPRoute", "edge-httproute-llama-70b"),
                       ("gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy", "edge-backendtrafficpolicy-llama-70b")):
        depends = prod.resource(f"kubernetes:{kind}", name)["options"]["dependsOn"]
        assert "kubernetes:apps/v1:Deployment::llama-70b-epp-deployment" in depends
        assert "kubernetes:inference.networking.k8s.io/v1:InferencePool::llama-70b-inferencepool" in depends
    # A Service route waits for nothing of the kind.
    dev_route = dev_awake.resource("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "edge-httproute-llama-8b")
    assert not any("epp" in d for d in dev_route["options"]["dependsOn"])
