"""The whole stack as a user's request and an autoscaler see it: every edge mode's request path
for prod, the scaling objects, and every PromQL expression any stack emits."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from llm_serving.edge import ENVOY_METRIC_TYPES
from llm_serving.gpu.counters import COUNTERS
from llm_serving.observability.serving_alerts import CONTAINER_METRICS, KUBE_STATE_METRICS
from llm_serving.platform.pod_identity import ADMISSION_CHECKS_METRIC
from llm_serving.routing import PICKER_METRICS, pool_problems
from llm_serving.routing.alerts import PICKER_KUBE_STATE_METRICS
from llm_serving.stack import planning
from llm_serving.stack.stack import ServingStack
from stacks.config import EdgeAuth, EdgeMode
from stacks.config.files import PROJECT_DIR
from stacks.environment import load_stack_file
from stacks.offline import render
from tests.conftest import STACK_NAMES, render_file
from tests.support import components, promql, reference, stack_variants
from tests.support.components import EXISTING_EVERYTHING

MODEL = "llama-70b"
HOST = "llm.example.com"
# Each edge mode's prod: prod's own edge is the Gateway API one, the others are variants of it.
MODES = ("gateway", "alb", "ingress-nginx")
INGRESS_NGINX = {"mode": "ingress-nginx", "namespace": "ingress-nginx", "controller": "existing"}


@pytest.fixture(scope="module")
def prod_in_mode(variants_dir) -> dict[str, Any]:
    directory = variants_dir
    paths = {"gateway": PROJECT_DIR / "Pulumi.prod.yaml",
             "alb": stack_variants.prod_behind_an_alb(directory),
             "ingress-nginx": stack_variants.write(directory, "prod-ingress-nginx", {"edge": INGRESS_NGINX})}
    renders = {mode: (render_file(path), load_stack_file(path)[1]) for mode, path in paths.items()}
    assert renders["gateway"][1].edge.mode is EdgeMode.GATEWAY
    return renders


def _container(result, model: str = MODEL) -> dict:
    return result.manifest("Deployment", model)["spec"]["template"]["spec"]["containers"][0]


def _service_and_pods(result, service_name: str, port: int | str) -> tuple[dict, dict]:
    service = result.manifest("Service", service_name)
    (service_port,) = [p for p in service["spec"]["ports"] if port in (p["port"], p.get("name"))]
    deployment = next(
        d for d in result.manifests
        if d["kind"] == "Deployment"
        and all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (container_port,) = [p for p in container["ports"] if p["name"] == service_port["targetPort"]]
    return service_port, {"deployment": deployment["metadata"]["name"], "port": container_port["containerPort"]}


def _gateway_backend(result, host: str, path: str) -> tuple[str, int]:
    for route in (m for m in result.manifests if m["kind"] == "HTTPRoute"):
        if host not in route["spec"]["hostnames"]:
            continue
        for rule in route["spec"]["rules"]:
            if any(path.startswith(m["path"]["value"]) for m in rule["matches"]):
                (backend,) = rule["backendRefs"]
                if backend.get("kind") == "InferencePool":
                    return backend["name"], None
                return backend["name"], backend["port"]
    raise AssertionError(f"no route for {host}{path}")


def _pool_pods(result, name: str) -> dict:
    """The Deployment and container port an InferencePool's selector and target port reach."""
    pool = result.manifest("InferencePool", name)
    selector = pool["spec"]["selector"]["matchLabels"]
    (deployment,) = [
        d for d in result.manifests
        if d["kind"] == "Deployment"
        and all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    assert pool_problems(pool, deployment) == []
    (target,) = pool["spec"]["targetPorts"]
    return {"deployment": deployment["metadata"]["name"], "port": target["number"]}


def _ingress_backend(result, host: str, path: str) -> tuple[str, int]:
    for ingress in (m for m in result.manifests if m["kind"] == "Ingress"):
        for rule in ingress["spec"]["rules"]:
            if rule["host"] != host:
                continue
            for p in rule["http"]["paths"]:
                if path.startswith(p["path"]):
                    service = p["backend"]["service"]
                    return service["name"], service["port"].get("number", service["port"].get("name"))
    raise AssertionError(f"no ingress for {host}{path}")


@pytest.mark.parametrize("mode", list(MODES))
def test_request_path_reaches_the_model_pods_in_every_mode(prod_in_mode, mode):
    result, _ = prod_in_mode[mode]
    backend = _gateway_backend if mode == "gateway" else _ingress_backend
    service, port = backend(result, HOST, "/v1/chat/completions")
    if mode == "gateway":
        # prod scales to several replicas, so its route names the model's InferencePool.
        assert (service, port) == (MODEL, None)
        assert _pool_pods(result, service) == {"deployment": MODEL, "port": 8000}
    else:
        service_port, pods = _service_and_pods(result, service, port)
        assert (service, service_port["port"]) == (MODEL, 8000)
        assert pods == {"deployment": MODEL, "port": 8000}
    with pytest.raises(AssertionError):
        backend(result, HOST, "/metrics")
    with pytest.raises(AssertionError):
        backend(result, HOST, "/health")
    assert [e for m in result.manifests for e in reference.kubernetes_object_errors(m, "1.34")] == []


def test_gateway_path_never_buffers_or_times_out_a_long_generation(prod_in_mode):
    result, config = prod_in_mode["gateway"]
    needed = planning.generation_seconds(config, config.models[0])
    route = result.manifest("HTTPRoute", MODEL)
    # Bounded at the stream bound every drain covers: 16,384 tokens at 0.1 s after 2 s, plus 10 %.
    assert route["spec"]["rules"][0]["timeouts"] == {"request": "1805s"}
    backend = result.manifest("BackendTrafficPolicy", MODEL)["spec"]
    assert backend["retry"] == {"numRetries": 0}
    assert "requestBuffer" not in backend
    assert backend["timeout"]["http"]["requestTimeout"] == "1805s"
    client = result.manifest("ClientTrafficPolicy", "llm-serving")["spec"]
    assert "requestReceivedTimeout" not in client.get("timeout", {}).get("http", {})
    assert needed == 1639  # 16,384 tokens at 10 tokens/s: the route must not cut it


def test_alb_path_idle_timeout_covers_the_longest_generation(prod_in_mode):
    result, config = prod_in_mode["alb"]
    (ingress,) = [m for m in result.manifests if m["kind"] == "Ingress"]
    annotations = ingress["metadata"]["annotations"]
    alb = "alb.ingress.kubernetes.io/"
    # A non-streamed response is silent until its end: the idle timeout covers the stream bound, and a
    # deregistered pod keeps its streams as long as vLLM drains them.
    assert annotations[alb + "load-balancer-attributes"] == "idle_timeout.timeout_seconds=1805"
    assert annotations[alb + "target-group-attributes"] == "deregistration_delay.timeout_seconds=1805"
    env = {e["name"]: e.get("value") for e in _container(result)["env"]}
    assert int(env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 1805
    release = result.resource("kubernetes:helm.sh/v3:Release", "edge-alb-controller")["inputs"]
    assert release["values"]["serviceAccount"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/alb-controller"
    }
    assert reference.helm_value_errors("aws-load-balancer-controller", "3.5.0", release["values"]) == []
    assert annotations[alb + "subnets"] == "subnet-0aaa1111,subnet-0bbb2222"
    # The ALB's two subnets (placeholder CIDRs the render's DescribeSubnets answers), never the VPC's
    # 10.0.0.0/16, which every pod's VPC CNI address falls in; no edge proxy pods in this mode.
    netpol = result.manifest("NetworkPolicy", "vllm-serving")
    cidrs = [peer["ipBlock"]["cidr"] for peer in netpol["spec"]["ingress"][0]["from"] if "ipBlock" in peer]
    assert cidrs == [render.RenderMocks("1.34").call(_subnet_call(s))["cidrBlock"]
                     for s in ("subnet-0aaa1111", "subnet-0bbb2222")]
    assert "10.0.0.0/16" not in cidrs and len(set(cidrs)) == 2
    assert [peer for peer in netpol["spec"]["ingress"][0]["from"] if "ipBlock" not in peer] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus",
                                        "app.kubernetes.io/managed-by": "prometheus-operator"}},
    }, {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "verify"}}}]  # the deploy gate's Job


def _subnet_call(subnet: str):
    return pulumi.runtime.MockCallArgs("aws:ec2/getSubnet:getSubnet", {"id": subnet}, None)


def test_nginx_path_turns_buffering_off_in_both_directions(prod_in_mode):
    result, _ = prod_in_mode["ingress-nginx"]
    # The model's Ingress (beside it, the one that closes vLLM's runtime adapter API, `-closed`).
    (ingress,) = [m for m in result.manifests
                  if m["kind"] == "Ingress" and not m["metadata"]["name"].endswith("-closed")]
    annotations = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert annotations[prefix + "proxy-buffering"] == "off"
    assert annotations[prefix + "proxy-request-buffering"] == "off"
    assert annotations[prefix + "proxy-http-version"] == "1.1"
    assert annotations[prefix + "proxy-read-timeout"] == "300"
    assert annotations[prefix + "proxy-body-size"] == "8m"


API_KEY_ENV = {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}}


@pytest.mark.parametrize("auth", ["vllm-api-key", "gateway-api-key", "jwt"])
def test_vllm_checks_its_own_key_in_every_auth_mode(auth):
    # ServingStack on the component tier, on a cluster that runs everything but the edge, which it creates with
    # prod's edge settings: how the edge's auth meets the engine's key. prod's own mode is the default.
    prod = load_stack_file(PROJECT_DIR / "Pulumi.prod.yaml")[1]
    assert prod.edge.auth is EdgeAuth.VLLM_API_KEY
    edge: dict[str, Any] = {"host": prod.edge.host, "scheme": "internet-facing",
                            "tls": {"certManagerIssuer": "letsencrypt-prod"}}
    if auth != "vllm-api-key":
        edge["auth"] = auth
    if auth == "jwt":
        edge["jwt"] = {"issuer": "https://auth.example.com", "jwksUri": "https://auth.example.com/jwks.json",
                       "audiences": ["llm-serving"]}
    args = components.stack_args(EXISTING_EVERYTHING, edge=edge)
    assert args.edge.auth is EdgeAuth(auth)
    result = components.run(lambda: ServingStack("llm-serving", args))
    model = args.models[0].name
    assert API_KEY_ENV in _container(result, model)["env"]
    assert result.manifest("Secret", "vllm-api-key")["stringData"] == {"api-key": "[secret]"}
    policy = result.manifest("SecurityPolicy", "llm-serving-auth")["spec"]
    injected = [m for m in result.manifests if m["kind"] == "HTTPRouteFilter" and "credentialInjection" in m["spec"]]
    if auth == "jwt":
        assert "apiKeyAuth" not in policy and policy["jwt"]["providers"][0]["issuer"] == "https://auth.example.com"
    else:
        assert policy["apiKeyAuth"]["credentialRefs"] == [
            {"group": "", "kind": "Secret", "name": "llm-serving-client-keys"}]
        assert policy["apiKeyAuth"]["sanitize"] is (auth == "gateway-api-key")
        assert result.manifest("Secret", "llm-serving-client-keys")["stringData"] == {"llm-serving": "[secret]"}
    if auth == "vllm-api-key":
        assert injected == []  # the client's Bearer key is vLLM's own and passes through
    else:
        # The gateway swaps the client's credential for vLLM's key from a Secret next to the routes.
        assert [(f["metadata"]["namespace"], f["spec"]["credentialInjection"]["credential"]["valueRef"]["name"])
                for f in injected] == [("llm-serving", "vllm-api-key-header")]
        assert result.manifest("Secret", "vllm-api-key-header")["stringData"] == {"credential": "[secret]"}
        rule = result.manifest("HTTPRoute", model)["spec"]["rules"][0]
        assert rule["filters"][-1] == {"type": "ExtensionRef", "extensionRef": {
            "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": "vllm-api-key"}}


def test_prod_scaled_object_scales_on_queue_then_kv(rendered):
    scaled = rendered["prod"].manifest("ScaledObject", MODEL)
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": MODEL}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 4)
    queue, kv, ttft = spec["triggers"]
    assert queue["metricType"] == "AverageValue"
    # vLLM's waiting requests plus those the picker holds beyond admission (tests/components/routing/test_admission.py).
    assert queue["metadata"]["query"] == (
        '(sum(vllm:num_requests_waiting{namespace="llm-serving", model_name="llama-70b"}) or vector(0)) + '
        '(sum(llm_d_epp_flow_control_queue_size{namespace="llm-serving", inference_pool=~"(llm-serving/)?llama-70b"})'
        ' or vector(0))'
    )
    assert (queue["metadata"]["threshold"], queue["metadata"]["activationThreshold"]) == ("5", "1")
    assert kv["metricType"] == "Value"
    assert kv["metadata"]["query"] == (
        'avg(vllm:kv_cache_usage_perc{namespace="llm-serving", model_name="llama-70b"}) or vector(0)'
    )
    assert kv["metadata"]["threshold"] == "0.8"
    # p95 TTFT against 0.8 x the 2 s SLO, before the queue shows saturation.
    assert (ttft["name"], ttft["metricType"], ttft["metadata"]["threshold"]) == ("ttft_p95", "Value", "1.6")
    assert ttft["metadata"]["query"] == (
        '(histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{namespace="llm-serving", '
        'model_name="llama-70b"}[2m]))) >= 0) or vector(0)'
    )
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    config = load_stack_file(PROJECT_DIR / "Pulumi.prod.yaml")[1]
    plan = planning.model_plan(config, config.models[0])
    adding = planning.cold_starts(config, config.models[0], plan)[1]
    # Adding a replica: node 300 s + image pull 300 s (a new node: the pre-pull pod races the replica) +
    # the planned cold start (141 GB at EFS's 500 MiB/s + engine start, which fills the CPU KV tier, torch.compile
    # loaded from the shared cache) + 30 s minReadySeconds. A replica outlives a burst shorter than its arrival.
    assert (adding.node_seconds, adding.image_pull_seconds, adding.ready_seconds) == (300, 300, 30)
    assert (adding.weights_seconds, adding.engine_init_seconds, adding.compile_seconds) == (
        plan.weights_load_seconds, plan.engine_init_seconds, plan.compile_cached_seconds)
    assert behavior["scaleDown"] == {
        "stabilizationWindowSeconds": adding.total_seconds,
        "selectPolicy": "Min",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
    }
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    # A Prometheus outage holds the current count: no blind cold starts, no lost capacity.
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": 2, "behavior": "currentReplicas"}
    triggers = {t["type"] for t in spec["triggers"]}
    assert triggers == {"prometheus"}  # never cpu or memory
    wiring = rendered["prod"].wiring["kubernetes:apps/v1:Deployment::llama-70b-deployment"]
    assert wiring["ignoreChanges"] == ["spec.replicas"]


def _emitted_queries(result) -> list[str]:
    queries = []
    for m in result.manifests:
        if m["kind"] == "PrometheusRule":
            queries += [r["expr"] for g in m["spec"]["groups"] for r in g["rules"]]
        elif m["kind"] == "ScaledObject":
            queries += [t["metadata"]["query"] for t in m["spec"]["triggers"]]
        elif m["kind"] == "ConfigMap" and m["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
            from llm_serving.observability.dashboards import panel_queries

            for text in m["data"].values():
                queries += [promql.expand_grafana_macros(q) for q in panel_queries(json.loads(text))]
    return queries


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_promql_expression_parses_and_names_known_metrics(rendered, name):
    known = (
        reference.vllm_series_names()
        | {c.field for c in COUNTERS}
        | set(KUBE_STATE_METRICS)
        # The kubelet's cAdvisor working set, which a model with a CPU KV tier compares with its memory limit.
        | CONTAINER_METRICS
        | {"up"}
        # The endpoint picker's series (llm-d-router v0.10.0); histograms as Prometheus exposes them.
        | {f"{n}{suffix}" for n in PICKER_METRICS for suffix in ("", "_bucket", "_sum", "_count")}
        # kube-state-metrics' PDB and restart series the picker alerts read, and Envoy's HTTP statistics.
        | PICKER_KUBE_STATE_METRICS
        | set(ENVOY_METRIC_TYPES)
        # The API server's count of admission policy checks the Pod Identity guards' alert reads (k8s.io/apiserver
        # pkg/admission/plugin/policy/validating/metrics/metrics.go).
        | {ADMISSION_CHECKS_METRIC}
    )
    queries = _emitted_queries(rendered[name])
    assert len(queries) > 30
    for query in queries:
        assert promql.parse_errors(query) == [], query
        assert promql.unknown_metric_errors(query, known) == [], query


@pytest.mark.parametrize("mode", MODES)
def test_a_rollout_behind_an_ip_target_load_balancer_waits_for_target_health(prod_in_mode, mode):
    # The load balancer controller's readiness gate (namespace label) keeps an old pod until its replacement is
    # healthy in the target group: the Envoy proxies behind the NLB, or in ALB mode the vLLM pods themselves.
    result, config = prod_in_mode[mode]
    label = "elbv2.k8s.aws/pod-readiness-gate-inject"
    namespaces = {m["metadata"]["name"]: m["metadata"].get("labels", {}) for m in result.manifests
                  if m["kind"] == "Namespace"}
    gated = {name for name, labels in namespaces.items() if labels.get(label) == "enabled"}
    expected = {"gateway": {config.edge.namespace or "envoy-gateway-system"}, "alb": {config.serving.namespace},
                "ingress-nginx": set()}[mode]
    assert gated == expected
    if mode == "gateway":
        proxy = result.manifest("EnvoyProxy", "llm-serving-proxy")["spec"]["provider"]["kubernetes"]
        strategy = proxy["envoyDeployment"]["strategy"]
        # Surge first, one at a time: never both proxies out of the target group at once.
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        assert proxy["envoyDeployment"]["replicas"] > strategy["rollingUpdate"]["maxSurge"]
