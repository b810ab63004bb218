"""Serving alert rules (PrometheusRule spec.groups) for vLLM models: queue, KV cache, latency, replicas.

Pure data, no Pulumi: one rule group per model from vLLM 0.33.0 metrics and kube-state-metrics,
each alert naming the model and linking to a runbook anchor, in the house style of the GPU alerts
(llm_serving/gpu/alerts.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llm_serving.platform import NAMESPACE_LABEL, POD_LABEL, alert_rule, check_dns_label, check_label_value

# kube-state-metrics series the rules read (kubernetes/kube-state-metrics docs/metrics/workload/
# deployment-metrics.md and pod-metrics.md, all STABLE). Their `namespace`, `deployment` and `pod`
# labels are the object's own: this assumes kube-state-metrics is scraped with honorLabels: true, as
# kube-prometheus-stack does; otherwise they arrive as exported_namespace / exported_pod.
KUBE_STATE_METRICS: frozenset[str] = frozenset(
    {
        "kube_deployment_spec_replicas",
        "kube_deployment_status_replicas_available",
        "kube_pod_container_status_restarts_total",
        "kube_pod_status_ready",
        "kube_pod_container_resource_limits",
    }
)
# The kubelet's cAdvisor series (Kubernetes docs, "Resource metrics pipeline": the working set is what the
# kubelet compares with the memory limit before an OOM kill).
CONTAINER_METRICS: frozenset[str] = frozenset({"container_memory_working_set_bytes"})

# Thresholds that are policy rather than per-model configuration.
KV_CACHE_FULL_FRACTION = 0.9  # above this vLLM starts preempting and recomputing running requests
QUEUE_FOR_MINUTES = 10  # longer than a scale-up decision, shorter than a user's patience
KV_FOR_MINUTES = 15
LATENCY_FOR_MINUTES = 10
LATENCY_RATE_WINDOW = "5m"
NO_REPLICA_FOR_MINUTES = 5
AT_MAX_FOR_MINUTES = 30
RESTART_WINDOW = "15m"
METRICS_MISSING_FOR_MINUTES = 10
# A CPU KV tier that serves almost none of the prefixes it is asked for, for this long, costs host memory for
# nothing; a pod this close to its memory limit is an OOM kill away from a cold start.
OFFLOAD_HIT_FLOOR = 0.01
OFFLOAD_FOR_MINUTES = 60
MEMORY_NEAR_LIMIT_FRACTION = 0.9
MEMORY_FOR_MINUTES = 10


# A Deployment's pods are named <deployment>-<pod-template-hash>-<5 random characters>, both drawn
# from Kubernetes' vowel-free alphabet (k8s.io/apimachinery pkg/util/rand: alphanums, used by
# SafeEncodeString for the hash and String(5) for generateName). Prometheus anchors regex matchers,
# so sibling workloads such as <deployment>-guard-<hash>-<suffix> or the <model>-stage-<digest> Job
# pods do not match.
_RAND = "[bcdfghjklmnpqrstvwxz2456789]"
_POD_SUFFIX = f"{_RAND}{{1,10}}-{_RAND}{{5}}"


@dataclass(frozen=True)
class ModelSlo:
    """One served model and the objectives its alerts check."""

    served_model_name: str  # `model_name` label on vLLM metrics
    deployment_name: str
    namespace: str
    max_replicas: int
    ttft_p95_seconds: float
    itl_p95_seconds: float
    queue_alert_threshold: float = 10  # waiting requests summed over all replicas
    # When known and equal to max_replicas the model does not autoscale, so "pinned at max" is its
    # normal state and that alert is left out.
    min_replicas: int | None = None
    # > 1: each replica is a LeaderWorkerSet group of this many pods (leader <name>-<g>, workers
    # <name>-<g>-<i>); the Deployment series do not exist, pod readiness stands in for them.
    group_size: int = 1
    group_ready_minutes: int = 60  # how long a group's pod may stay unready: its cold start budget
    # A model that scales to zero: its planned wake; a replica wanted but not yet available is normal that long.
    wake_seconds: int | None = None
    # A CPU tier of the KV cache (GiB per replica; 0: none): its hit rate and the pods' memory are watched.
    kv_offload_gib: int = 0
    # LoRA adapters vLLM loads at start-up (--lora-modules): the restart and no-replica alerts name them.
    lora_adapters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_label_value("served_model_name", self.served_model_name)
        check_dns_label("deployment_name", self.deployment_name)
        check_dns_label("namespace", self.namespace)
        if isinstance(self.max_replicas, bool) or not isinstance(self.max_replicas, int) or self.max_replicas < 1:
            raise ValueError(f"max_replicas={self.max_replicas!r}: expected an integer >= 1")
        if self.min_replicas is not None and (
            isinstance(self.min_replicas, bool)
            or not isinstance(self.min_replicas, int)
            or not 0 <= self.min_replicas <= self.max_replicas
        ):
            raise ValueError(f"min_replicas={self.min_replicas!r}: expected an integer from 0 to max_replicas")
        for field in ("ttft_p95_seconds", "itl_p95_seconds", "queue_alert_threshold"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
                raise ValueError(f"{field}={value!r}: expected a positive number")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _rule(*, model: str, **fields: Any) -> dict[str, Any]:
    # model_name on every alert, also the kube-state-metrics ones, so routing and grouping work per
    # model; on the vLLM ones it equals the series' own label.
    return alert_rule(labels={"model_name": model}, **fields)


def group_name(m: ModelSlo) -> str:
    return f"llm-serving-{m.namespace}-{m.deployment_name}"


def _model_rules(m: ModelSlo, runbook_base_url: str) -> list[dict[str, Any]]:
    model = m.served_model_name
    vllm = f'{NAMESPACE_LABEL}="{m.namespace}", model_name="{model}"'
    deploy = f'namespace="{m.namespace}", deployment="{m.deployment_name}"'
    pods = f'namespace="{m.namespace}", pod=~"{m.deployment_name}-{_POD_SUFFIX}"'
    by = f"{NAMESPACE_LABEL}, model_name"
    where = f"model {model} in namespace {m.namespace}"
    where_first = f"Model {model} in namespace {m.namespace}"  # at the start of a sentence
    # Waking from zero, the wanted replica is unavailable for the whole planned wake.
    no_replica_minutes = max(NO_REPLICA_FOR_MINUTES, math.ceil((m.wake_seconds or 0) / 60))

    def latency(series: str) -> str:
        return f"histogram_quantile(0.95, sum by ({by}, le) (rate({series}{{{vllm}}}[{LATENCY_RATE_WINDOW}])))"

    # vLLM 0.33.0 exports no adapter-load failure series (vllm:lora_requests_info alone, v1/metrics/loggers.py).
    # A static adapter that fails to load stops the start: init_static_loras raises (entrypoints/openai/models/
    # serving.py, called from launchers/api_server/app_state.py), the container exits and restarts, never Ready.
    # So the alerts on restarts and on no available replica are the adapter's, and say so.
    adapters = (
        f" This model loads LoRA adapters {', '.join(m.lora_adapters)} at start-up, and vLLM refuses to start "
        "when one fails to load: a restart right after the weights loaded, with no \"Loaded new LoRA adapter\" "
        "line for one of them in the previous log, is that adapter (its staged files, or a base model or rank "
        "it does not fit)." if m.lora_adapters else "")
    group = m.group_size > 1
    if group:
        pods = f'namespace="{m.namespace}", pod=~"{m.deployment_name}-[0-9]+(-[0-9]+)?"'
        leaders_ready = (f'sum by (namespace) (kube_pod_status_ready{{namespace="{m.namespace}", '
                         f'pod=~"{m.deployment_name}-[0-9]+", condition="true"}})')
    rules = [
        _rule(
            alert="VllmQueueDepthHigh",
            expr=f"sum by ({by}) (vllm:num_requests_waiting{{{vllm}}}) > {_number(m.queue_alert_threshold)}",
            for_minutes=QUEUE_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=f"Requests are queueing for {where} ({{{{ $value }}}} waiting)",
            description=(
                f"More than {_number(m.queue_alert_threshold)} requests have waited for a free batch slot for "
                f"{QUEUE_FOR_MINUTES} minutes, so time to first token grows with the queue. Check whether the "
                "autoscaler is adding replicas (or is at its maximum) and whether new pods are stuck pending GPUs."
            ),
            runbook_base_url=runbook_base_url,
        ),
        _rule(
            alert="VllmKvCacheNearlyFull",
            expr=(
                f"max by ({by}, {POD_LABEL}) (vllm:kv_cache_usage_perc{{{vllm}}}) > {_number(KV_CACHE_FULL_FRACTION)}"
            ),
            for_minutes=KV_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=f"KV cache of pod {{{{ $labels.pod }}}} ({where}) is above 90 % full",
            description=(
                f"One replica's KV cache has stayed above 90 % for {KV_FOR_MINUTES} minutes. vLLM then preempts "
                "running requests and recomputes them, which costs throughput and latency. Expect the autoscaler "
                "to add replicas; if it is at its maximum, lower --max-num-seqs or add capacity."
            ),
            runbook_base_url=runbook_base_url,
        ),
        _rule(
            alert="VllmTtftP95AboveSlo",
            expr=f"{latency('vllm:time_to_first_token_seconds_bucket')} > {_number(m.ttft_p95_seconds)}",
            for_minutes=LATENCY_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=(
                f"p95 time to first token of {where} is {{{{ $value | humanizeDuration }}}}, "
                f"above the {_number(m.ttft_p95_seconds)} s SLO"
            ),
            description=(
                f"Over {LATENCY_FOR_MINUTES} minutes the 95th percentile time to first token stayed above "
                f"{_number(m.ttft_p95_seconds)} s. Usual causes: a queue (see VllmQueueDepthHigh), long "
                "prompts filling the prefill budget, or a throttled GPU. The value is interpolated within "
                "histogram buckets."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # ITL is observed once per streamed output event; with speculative decoding one event can hold
        # several tokens (vllm-project/vllm PR #52853, open), so it then overstates per-token latency.
        _rule(
            alert="VllmItlP95AboveSlo",
            expr=f"{latency('vllm:inter_token_latency_seconds_bucket')} > {_number(m.itl_p95_seconds)}",
            for_minutes=LATENCY_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=(
                f"p95 inter-token latency of {where} is {{{{ $value | humanizeDuration }}}}, "
                f"above the {_number(m.itl_p95_seconds)} s SLO"
            ),
            description=(
                f"Over {LATENCY_FOR_MINUTES} minutes the 95th percentile gap between streamed tokens stayed "
                f"above {_number(m.itl_p95_seconds)} s: decode batches are too large or the GPUs are slow. "
                "Check running requests per replica, KV-cache preemptions and GPU throttling alerts."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # Guarded by spec replicas > 0 so a model scaled to zero on purpose does not page.
        _rule(
            alert="VllmNoReadyReplica",
            expr=(
                f"(kube_deployment_status_replicas_available{{{deploy}}} == 0)"
                f" and on (namespace, deployment) (kube_deployment_spec_replicas{{{deploy}}} > 0)"
            ),
            for_minutes=no_replica_minutes,
            severity="critical",
            model=model,
            summary=f"{where_first} has no available replica: every request to it fails",
            description=(
                f"Deployment {m.deployment_name} wants replicas but none has been available for "
                f"{no_replica_minutes} minutes. Check pod events (pending GPUs, image pull, weights "
                "volume) and the vLLM logs of the starting pods." + adapters
            ),
            runbook_base_url=runbook_base_url,
        ),
        _rule(
            alert="VllmReplicasAtMax",
            # spec, not status: status counts the surge pod of a rollout and would read "at max"
            # during every rollout at max - 1.
            expr=f"kube_deployment_spec_replicas{{{deploy}}} >= {m.max_replicas}",
            for_minutes=AT_MAX_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=(
                f"{where_first} has run at its maximum of {m.max_replicas} replicas for {AT_MAX_FOR_MINUTES} minutes"
            ),
            description=(
                "The autoscaler has no headroom left: more load will queue instead of adding replicas. "
                "Raise maxReplicas (and the GPU node group's maximum) or reduce load."
            ),
            runbook_base_url=runbook_base_url,
        ),
        _rule(
            alert="VllmPodRestarting",
            expr=f"increase(kube_pod_container_status_restarts_total{{{pods}}}[{RESTART_WINDOW}]) > 0",
            for_minutes=0,
            severity="warning",
            model=model,
            summary=f"Container {{{{ $labels.container }}}} of pod {{{{ $labels.pod }}}} ({where}) restarted",
            description=(
                f"A container restarted in the last {RESTART_WINDOW}. Each restart of a vLLM pod aborts its "
                "in-flight streams and costs a full cold start. Check the previous container's logs "
                "(kubectl logs --previous), OOM kills and Xid alerts on its node." + adapters
            ),
            runbook_base_url=runbook_base_url,
        ),
        # The autoscaler reads these series; if they vanish (PodMonitor not selected, scrape failing,
        # served name not matching model_name), `or vector(0)` makes it see an idle model and it
        # scales down to the minimum. kube-state-metrics tells us pods are up, so silence is a fault.
        _rule(
            alert="VllmMetricsMissing",
            expr=(
                f"(kube_deployment_status_replicas_available{{{deploy}}} > 0)"
                f" unless on () vllm:num_requests_waiting{{{vllm}}}"
            ),
            for_minutes=METRICS_MISSING_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=f"No vLLM metrics from {where} although replicas are available: autoscaling is blind",
            description=(
                f"Deployment {m.deployment_name} has available pods, but Prometheus has no "
                f'vllm:num_requests_waiting{{model_name="{model}"}} series. The autoscaler then sees an '
                "empty queue and scales to its minimum, and latency alerts cannot fire. Check that Prometheus "
                "selects the PodMonitor, that the scrape succeeds, and that --served-model-name matches."
            ),
            runbook_base_url=runbook_base_url,
        ),
    ]
    if m.kv_offload_gib:
        rules += _offload_rules(m, runbook_base_url, vllm=vllm, pods=pods, where_first=where_first)
    if m.min_replicas == m.max_replicas or group:
        # A LeaderWorkerSet's replica count is in no kube-state-metrics series: left out for groups.
        rules = [rule for rule in rules if rule["alert"] != "VllmReplicasAtMax"]
    if group:
        for rule in rules:
            if rule["alert"] == "VllmNoReadyReplica":
                rule["expr"] = f"{leaders_ready} == 0"
            elif rule["alert"] == "VllmMetricsMissing":
                rule["expr"] = f"({leaders_ready} > 0) unless on () vllm:num_requests_waiting{{{vllm}}}"
        rules.append(_rule(
            alert="VllmGroupIncomplete",
            expr=f'count(kube_pod_status_ready{{{pods}, condition="true"}} == 0) > 0',
            for_minutes=m.group_ready_minutes,
            severity="warning",
            model=model,
            summary=f"A pod of {where}'s LeaderWorkerSet groups has not been ready for a whole cold start",
            description=(
                f"Each replica of {model} is a group of {m.group_size} pods on as many nodes; the group serves only "
                "when every rank is up, and LeaderWorkerSet recreates the whole group when one pod restarts. A "
                "pod unready for longer than a cold start means a missing rank: a node that does not come, EFA "
                "or NCCL failing at start, or a crash loop. Check the group's pod events and the worker logs."
            ),
            runbook_base_url=runbook_base_url,
        ))
    return rules


def _offload_rules(m: ModelSlo, runbook_base_url: str, *, vllm: str, pods: str,
                   where_first: str) -> list[dict[str, Any]]:
    """The CPU tier: prefix hits it serves (vLLM's external prefix cache series count the connector's hits), and
    the pods' memory against their limit (the tier sits in /dev/shm, charged to the pod from the start)."""
    model = m.served_model_name
    window = f"{OFFLOAD_FOR_MINUTES // 2}m"
    queries = f"sum(rate(vllm:external_prefix_cache_queries_total{{{vllm}}}[{window}]))"
    hits = f"sum(rate(vllm:external_prefix_cache_hits_total{{{vllm}}}[{window}]))"
    container = f'{pods}, container="vllm"'
    return [
        _rule(
            alert="VllmKvOffloadNotHit",
            expr=f"({queries} > 0) and ({hits} / {queries} < {_number(OFFLOAD_HIT_FLOOR)})",
            for_minutes=OFFLOAD_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=(f"{where_first}'s CPU KV tier ({m.kv_offload_gib} GiB per replica) serves under "
                     f"{OFFLOAD_HIT_FLOOR:.0%} of the prefix tokens looked up in it"),
            description=("The tier holds host memory but the workload rarely comes back to a prefix the GPUs "
                         "evicted: shrink it (models[].kvOffload.sizeGib) or turn it off (0)."),
            runbook_base_url=runbook_base_url,
        ),
        _rule(
            alert="VllmPodMemoryNearLimit",
            expr=(f"max(container_memory_working_set_bytes{{{container}}} / on (namespace, pod) "
                  f'kube_pod_container_resource_limits{{{container}, resource="memory"}}) > '
                  f"{_number(MEMORY_NEAR_LIMIT_FRACTION)}"),
            for_minutes=MEMORY_FOR_MINUTES,
            severity="warning",
            model=model,
            summary=f"A pod of {model} uses over {MEMORY_NEAR_LIMIT_FRACTION:.0%} of its memory limit",
            description=("Its CPU KV tier, /dev/shm and the engine are close to the limit: an OOM kill restarts the "
                         "replica cold. Lower models[].kvOffload.sizeGib, or compare the engine's working set with "
                         "the planner's allowance (python -m stacks plan --stack <stack> --model <model>)."),
            runbook_base_url=runbook_base_url,
        ),
    ]


def serving_rule_groups(models: list[ModelSlo], *, runbook_base_url: str) -> list[dict[str, Any]]:
    """PrometheusRule `spec.groups`: one group of serving alerts per model."""
    if not runbook_base_url or "#" in runbook_base_url or any(c.isspace() for c in runbook_base_url):
        raise ValueError(f"runbook_base_url={runbook_base_url!r}: expected a URL without '#' or spaces")
    seen_deployments: set[tuple[str, str]] = set()
    seen_models: set[tuple[str, str]] = set()
    for m in models:
        if (m.namespace, m.deployment_name) in seen_deployments:
            raise ValueError(f"deployment {m.namespace}/{m.deployment_name} is listed twice")
        # Two Deployments serving one name in one namespace would share every vLLM series.
        if (m.namespace, m.served_model_name) in seen_models:
            raise ValueError(f"served model {m.served_model_name!r} is listed twice in namespace {m.namespace}")
        seen_deployments.add((m.namespace, m.deployment_name))
        seen_models.add((m.namespace, m.served_model_name))
    return [{"name": group_name(m), "rules": _model_rules(m, runbook_base_url)} for m in models]


def alert_names(groups: list[dict[str, Any]]) -> list[str]:
    """Alert names in rule order, for runbooks and tests."""
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]
