"""Per-model inference routing: an InferencePool and its endpoint picker (pure, no Pulumi import).

The gateway asks the picker (EPP) which replica serves each request; the picker scores replicas on
their queue, KV-cache usage and the prompt prefixes they already hold (llm-d/llm-d-router v0.10.0,
its chart's default-plugins.yaml). Envoy AI Gateway runs the picker as an external-processing filter
on the model's route, and at v1.1.0 that filter fails closed whatever the pool says
(envoyproxy/ai-gateway v1.1.0 internal/extensionserver/inferencepool.go, envoyproxy/ai-gateway#2502): a picker
outage is the model's outage. Hence the shape below: two or more active replicas (no leader
election, so every replica is Ready and a rollout never waits on a standby), a PodDisruptionBudget,
spread over nodes and zones, fast gRPC readiness, and a drain window as long as the longest stream,
because response bodies stream through the picker (FULL_DUPLEX_STREAMED).

Length: every object of a picker and its pool (RBAC, config, Deployment, Service, PDB, monitor, NetworkPolicy, and
the llm-d.ai objects it reads: objectives and model rewrites) is built here from one RoutedModel.

Every flag and port below is from llm-d/llm-d-router v0.10.0 (pkg/epp/server/options.go,
cmd/epp/runner/health.go); the scheduling configuration is the chart's default profile.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .admission import Admission, detector_plugin_lines, feature_gate_lines, flow_control_lines

Manifest = dict[str, Any]

POOL_API = "inference.networking.k8s.io/v1"
POOL_GROUP = "inference.networking.k8s.io"
MONITORING_API = "monitoring.coreos.com/v1"
# EndpointPickerConfig's group at llm-d-router v0.10.0 (the x-k8s.io one is accepted but deprecated).
PICKER_CONFIG_API = "llm-d.ai/v1alpha1"
PICKER_COMPONENT = "endpoint-picker"
GRPC_PORT = 9002  # ext_proc, TLS with the picker's self-signed certificate (`--secure-serving` default)
HEALTH_PORT = 9003  # gRPC health: services "readiness" and "liveness"
METRICS_PORT = 9090
CONFIG_FILE = "config.yaml"
# The picker reads its config file once, at startup: a changed ConfigMap alone would leave every picker
# on the old config. Its hash on the pod template rolls the pickers whenever the config changes.
CONFIG_HASH_ANNOTATION = "llm-serving/picker-config-sha256"
# Failure: Envoy AI Gateway's ext_proc filter streams both bodies by default; `buffered` would hold a
# whole response until it ends, so no token reaches the client before the last one. Say it explicitly
# so a changed default cannot buffer streams (internal/extensionserver/inferencepool.go @v1.1.0).
BODY_MODE_ANNOTATION = "aigateway.envoyproxy.io/processing-body-mode"
STREAMED_BODY_MODE = "duplex"
# Beyond the drain window the picker needs to stop its servers and the kubelet to see it exit.
TERMINATION_MARGIN_SECONDS = 30

# The scorers and their weights: llm-d-router v0.10.0's default profile (its chart's
# default-plugins.yaml): prefix affinity weighs most, queue and KV-cache usage
# keep a hot replica from taking every conversation.
SCORER_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("queue-scorer", 2),
    ("kv-cache-utilization-scorer", 2),
    ("prefix-cache-scorer", 3),
)
# For a model with LoRA adapters: prefer a replica that already runs the request's adapter (1.0), then one with a
# free adapter slot (0.8), then one where it waits (0.6) (llm-d-router v0.10.0
# pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go, type "lora-affinity-scorer"). It reads
# vLLM's vllm:lora_requests_info through core-metrics-extractor, already configured; weighted like the queue and
# KV scorers, below prefix affinity, so an adapter's conversations still stick to their cache.
LORA_SCORER = ("lora-affinity-scorer", 2)



@dataclass(frozen=True)
class PickerSettings:
    replicas: int
    cpu_request: str
    memory_request: str
    memory_limit: str
    image: str


@dataclass(frozen=True)
class RoutedModel:
    """One model behind an InferencePool."""

    name: str  # the model's Deployment, Service and pool name
    namespace: str
    pod_selector: dict[str, str]  # exactly the vLLM pods' selector labels
    port: int  # vLLM's container port
    drain_seconds: int  # the longest stream the edge allows for this model
    priority: int | None = None  # an InferenceObjective for every request of the model
    # Pulumi's delete timeout of the picker Deployment: a stopping picker drains for drain_seconds.
    delete_timeout_seconds: int | None = None
    admission: Admission | None = None  # overload shedding (None: the picker's defaults, no flow control)
    # The model's time-to-first-token objective (slo.ttftP95Seconds): 95 % of streamed requests get their
    # first token within it at the edge. None: no TTFT burn-rate alerts for the model.
    ttft_objective_seconds: float | None = None
    # A model that scales to zero: its planned wake, how long the picker may hold a request at zero replicas
    # before that is a fault. None: zero ready replicas is a fault at once.
    wake_seconds: int | None = None
    lora: bool = False  # the model serves LoRA adapters: the picker scores adapter affinity
    # Aliases the picker rewrites to adapters: (alias, ((adapter, weight or None), ...)), one InferenceModelRewrite.
    aliases: tuple[tuple[str, tuple[tuple[str, int | None], ...]], ...] = ()


def picker_name(model: str) -> str:
    return f"{model}-epp"


def picker_labels(model: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": picker_name(model), "app.kubernetes.io/component": PICKER_COMPONENT}


def picker_selector() -> dict[str, str]:
    """Every picker pod of the stack (NetworkPolicies)."""
    return {"app.kubernetes.io/component": PICKER_COMPONENT}


def _meta(name: str, namespace: str, labels: dict[str, str] | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {"app.kubernetes.io/part-of": "llm-serving", **(labels or {})}}
    if annotations:
        meta["annotations"] = annotations
    return meta


def picker_config(admission: Admission | None = None, lora: bool = False) -> str:
    """The EndpointPickerConfig: scrape each replica's vLLM /metrics, score, pick the best; with
    `admission`, hold and shed what the pool cannot take (llm_serving/routing/admission.py); with `lora`, score
    adapter affinity too (LORA_SCORER)."""
    scorers = SCORER_WEIGHTS + ((LORA_SCORER,) if lora else ())
    lines = [
        f"apiVersion: {PICKER_CONFIG_API}",
        "kind: EndpointPickerConfig",
        *feature_gate_lines(admission),
        "plugins:",
        *[f"- type: {scorer}" for scorer, _ in scorers],
        # vLLM serves /metrics over plain HTTP on its API port, without the API key.
        "- type: metrics-data-source",
        "  parameters:",
        "    scheme: http",
        "    path: /metrics",
        "- type: core-metrics-extractor",
        *detector_plugin_lines(admission),
        "schedulingProfiles:",
        "- name: default",
        "  plugins:",
        *[line for scorer, weight in scorers for line in (f"  - pluginRef: {scorer}", f"    weight: {weight}")],
        *flow_control_lines(admission),
    ]
    return "\n".join(lines) + "\n"


def config_hash(data: dict[str, str]) -> str:
    """SHA-256 of a ConfigMap's data, key by key in order, so any change to any key changes it."""
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(f"{key}\0{data[key]}\0".encode())
    return digest.hexdigest()


def picker_args(model: RoutedModel) -> list[str]:
    return [
        "--pool-name", model.name,
        "--pool-namespace", model.namespace,
        "--pool-group", POOL_GROUP,
        "--config-file", f"/config/{CONFIG_FILE}",
        "--grpc-port", str(GRPC_PORT),
        "--grpc-health-port", str(HEALTH_PORT),
        "--metrics-port", str(METRICS_PORT),
        # On SIGTERM the picker turns NotServing, so it leaves the headless Service's DNS and new
        # requests go to the other pickers within seconds, and keeps serving for this fixed window
        # before it stops its gRPC server (cmd/epp/runner/runner.go @v0.10.0): a response streams
        # through it, so a shorter window would cut every generation still running through it.
        f"--drain-timeout={model.drain_seconds}s",
        # Prometheus scrapes without a token; the NetworkPolicy admits only its namespace.
        "--metrics-endpoint-auth=false",
        # pprof would otherwise serve heap and goroutine dumps on the metrics port.
        "--enable-pprof=false",
        "--tracing=false",
        "--zap-encoder", "json",
    ]


def picker_objects(model: RoutedModel, settings: PickerSettings,
                   monitor_labels: dict[str, str] | None = None) -> list[Manifest]:
    """ServiceAccount, Role and binding, config, Deployment, Service, PDB and PodMonitor of one picker."""
    name, ns = picker_name(model.name), model.namespace
    labels = picker_labels(model.name)
    read = ["get", "list", "watch"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, ns, labels),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": read},
            {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"], "verbs": read},
            # Read if installed, ignored if not (the picker checks at startup: pkg/epp/server/controller_config.go).
            {"apiGroups": ["llm-d.ai", "inference.networking.x-k8s.io"],
             "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": read},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, ns, labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }
    config: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, ns, labels),
                              "data": {CONFIG_FILE: picker_config(model.admission, model.lora)}}
    container = {
        "name": "epp",
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "args": picker_args(model),
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        # Readiness every 2 s: a picker that stops serving (draining, or not yet synced) leaves the
        # headless Service's DNS within seconds, and the gateway sends new requests to the others.
        "readinessProbe": {"grpc": {"port": HEALTH_PORT, "service": "readiness"}, "periodSeconds": 2,
                           "failureThreshold": 2},
        # Without leader election `liveness` also waits for the pool to sync: give a slow first sync
        # a minute before restarting the picker.
        "livenessProbe": {"grpc": {"port": HEALTH_PORT, "service": "liveness"}, "initialDelaySeconds": 10,
                          "periodSeconds": 10, "failureThreshold": 6},
        "resources": {"requests": {"cpu": settings.cpu_request, "memory": settings.memory_request},
                      "limits": {"memory": settings.memory_limit}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    # Pickers on different nodes (one node lost, one picker lost), across zones where possible. Tainted
    # nodes the picker cannot use (the GPU nodes) must not count as empty domains: nodeTaintsPolicy Honor
    # (on by default since Kubernetes 1.26). Per host a preference, not a rule: with DoNotSchedule a
    # cluster with one usable CPU node left the second picker Pending, the Deployment's await failed
    # after 10 minutes and the pool's HTTPRoute was never created, so the model had no route at all.
    # The cost: on such a cluster both pickers share the node and go down with it (docs/decisions.md).
    spread = [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "nodeTaintsPolicy": "Honor",
         "labelSelector": {"matchLabels": labels}}
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, ns, labels),
        "spec": {
            "replicas": settings.replicas,
            "selector": {"matchLabels": labels},
            # One new picker Ready before an old one stops: every replica is active, so capacity never dips.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {**labels, "app.kubernetes.io/part-of": "llm-serving"},
                             "annotations": {CONFIG_HASH_ANNOTATION: config_hash(config["data"])}},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": model.drain_seconds + TERMINATION_MARGIN_SECONDS,
                    # The image runs as 65532 on distroless/static:nonroot (llm-d-router Dockerfile.epp).
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "topologySpreadConstraints": spread,
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": name}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": _meta(name, ns, labels),
        "spec": {
            # Headless: Envoy AI Gateway resolves the picker as a STRICT_DNS cluster with LEAST_REQUEST
            # (internal/extensionserver/inferencepool.go @v1.1.0). With a ClusterIP it would see one
            # address and keep its HTTP/2 connections on a draining picker; with the pod addresses it
            # balances requests over the pickers and drops one from DNS as soon as it stops serving,
            # while the streams it holds run on through --drain-timeout.
            "clusterIP": "None",
            "selector": labels,
            "ports": [
                {"name": "grpc-ext-proc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                 "appProtocol": "kubernetes.io/h2c"},
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }
    pdb = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(name, ns, labels),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }
    monitor = {
        "apiVersion": MONITORING_API, "kind": "PodMonitor",
        "metadata": _meta(name, ns, {**labels, **(monitor_labels or {})}),
        "spec": {"selector": {"matchLabels": labels},
                 "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}]},
    }
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, ns, labels)}
    return [service_account, role, binding, config, deployment, service, pdb, monitor]


def inference_pool(model: RoutedModel) -> Manifest:
    """The pool: the model's vLLM pods on their API port, picked by the model's EPP."""
    return {
        "apiVersion": POOL_API,
        "kind": "InferencePool",
        "metadata": _meta(model.name, model.namespace, annotations={BODY_MODE_ANNOTATION: STREAMED_BODY_MODE}),
        "spec": {
            "selector": {"matchLabels": dict(model.pod_selector)},
            "targetPorts": [{"number": model.port}],
            "endpointPickerRef": {
                "group": "", "kind": "Service", "name": picker_name(model.name), "port": {"number": GRPC_PORT},
                # What the pool asks for: route to any replica while the picker is down. Envoy AI
                # Gateway v1.1.0 ignores it and fails closed (envoyproxy/ai-gateway#2502, fix #2517
                # unreleased), so the picker's availability is the model's; the setting takes effect
                # once the gateway honours it.
                "failureMode": "FailOpen",
            },
        },
    }


def pool_problems(pool: Manifest, deployment: Manifest) -> list[str]:
    """Why `pool` would not reach the pods of `deployment`: a selector that matches no pod of it, or a
    target port no container of it listens on. Empty when the wiring holds."""
    problems: list[str] = []
    name = pool["metadata"]["name"]
    selector = pool["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    missing = {k: v for k, v in selector.items() if pod_labels.get(k) != v}
    if missing:
        problems.append(f"InferencePool {name}: selector {missing} matches no pod of Deployment "
                        f"{deployment['metadata']['name']} (its pods carry {pod_labels})")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["containerPort"] for c in containers for p in c.get("ports", [])}
    for target in pool["spec"]["targetPorts"]:
        if target["number"] not in ports:
            problems.append(f"InferencePool {name}: target port {target['number']} is not a container port of "
                            f"Deployment {deployment['metadata']['name']} (it listens on {sorted(ports)})")
    return problems


def network_policy(namespace: str, edge_namespace: str, prometheus_namespace: str,
                   vllm_selector: dict[str, str], vllm_port: int, *, edge_pod_selector: dict[str, str] | None = None,
                   prometheus_pod_selector: dict[str, str] | None = None) -> Manifest:
    """Picker pods: ext_proc in from the gateway's proxies, metrics in from Prometheus (by pod labels
    when given: not every pod of those namespaces); out to DNS, the vLLM pods' metrics and the
    Kubernetes API (pods and pools are watched)."""
    def ns(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}
        if labels:
            peer["podSelector"] = {"matchLabels": dict(labels)}
        return peer

    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("endpoint-pickers", namespace),
        "spec": {
            "podSelector": {"matchLabels": picker_selector()},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [ns(edge_namespace, edge_pod_selector)], "ports": [{"protocol": "TCP", "port": GRPC_PORT}]},
                {"from": [ns(prometheus_namespace, prometheus_pod_selector)],
                 "ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
            ],
            "egress": [
                {"to": [{**ns("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"podSelector": {"matchLabels": dict(vllm_selector)}}],
                 "ports": [{"protocol": "TCP", "port": vllm_port}]},
                # The EKS API endpoint's addresses are the control plane's, outside any pod selector.
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                 "ports": [{"protocol": "TCP", "port": 443}]},
            ],
        },
    }


# The header that names a request's InferenceObjective (llm-d-router v0.10.0 pkg/epp/metadata/consts.go;
# the GIE spelling x-gateway-inference-objective is its deprecated alias).
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
OBJECTIVE_API = "llm-d.ai/v1alpha2"


def inference_objective(model: RoutedModel) -> Manifest | None:
    """The model's objective, named after the model: the route sets OBJECTIVE_HEADER to that name, and
    the picker sheds requests whose priority is negative while the pool is saturated (HTTP 429;
    pkg/epp/requestcontrol/admission.go @v0.10.0)."""
    if model.priority is None:
        return None
    return {
        "apiVersion": OBJECTIVE_API,
        "kind": "InferenceObjective",
        "metadata": _meta(model.name, model.namespace),
        "spec": {"poolRef": {"group": POOL_GROUP, "kind": "InferencePool", "name": model.name},
                 "priority": model.priority},
    }


def inference_model_rewrite(model: RoutedModel) -> Manifest | None:
    """The model's aliases as one InferenceModelRewrite (llm-d.ai/v1alpha2, vendored in platform/crds/): each
    alias an Exact match whose requests the picker rewrites to one adapter, chosen by weight, in the body's
    `model` before it scores (llm-d-router v0.10.0 apix/v1alpha2/inferencemodelrewrite_types.go;
    pkg/epp/requestcontrol/director.go), so the LoRA scorer and vLLM see the adapter's name. None: no alias."""
    if not model.aliases:
        return None
    rules = [{"matches": [{"model": {"type": "Exact", "value": alias}}],
              "targets": [{"modelRewrite": adapter, **({"weight": weight} if weight is not None else {})}
                          for adapter, weight in targets]}
             for alias, targets in model.aliases]
    return {
        "apiVersion": OBJECTIVE_API,
        "kind": "InferenceModelRewrite",
        "metadata": _meta(f"{model.name}-aliases", model.namespace),
        "spec": {"poolRef": {"group": POOL_GROUP, "kind": "InferencePool", "name": model.name}, "rules": rules},
    }
