"""InferenceRouting: per routed model, its InferencePool and endpoint picker, their fence and alerts, and the
edge's routes that name the pools, once the pickers answer (a gated route, later, through `route`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from llm_serving.platform import crd_manifests, manifest_resource

from .alerts import picker_alert_groups
from .objects import (
    PickerSettings,
    RoutedModel,
    inference_model_rewrite,
    inference_objective,
    inference_pool,
    network_policy,
    picker_objects,
)


@dataclass(frozen=True)
class RoutingSpec:
    namespace: str  # the serving namespace: pools select pods in their own namespace
    edge_namespace: str  # where the gateway's Envoy proxies run (they call the pickers)
    prometheus_namespace: str
    vllm_selector: dict[str, str]  # every vLLM pod (the pickers scrape their /metrics)
    vllm_port: int
    models: tuple[RoutedModel, ...]
    picker: PickerSettings
    runbook_base_url: str
    monitor_labels: dict[str, str]
    objective_crds_file: str  # the llm-d.ai CRDs (InferenceObjective) the pickers read, a file of platform/crds/
    protect_crds: bool = False  # prod: the CRDs are protected as well as retained (`crd_options`)
    # The gateway's proxy pods and the Prometheus pods, by label (None: the whole namespace).
    edge_pod_selector: dict[str, str] | None = None
    prometheus_pod_selector: dict[str, str] | None = None
    # The edge's routes (HTTPRoute and its BackendTrafficPolicy) that name a pool: created after the pickers,
    # since the gateway fails closed; `edge` is the Edge they were children of (their aliases), and `edge_after`
    # what the edge's own objects wait for (its controller, CRDs and namespace).
    pool_routes: tuple[dict, ...] = ()
    edge: pulumi.Resource | None = None
    edge_name: str = "edge"
    edge_after: tuple[pulumi.Resource, ...] = ()
    # Each model's workload by name: its alias rewrite waits for it, so new weights reach the picker only once the
    # replicas serve the adapters they name.
    workloads: Mapping[str, pulumi.Resource] = dataclasses.field(default_factory=dict)


class InferenceRouting(pulumi.ComponentResource):
    """Prefix-cache- and load-aware routing for the models behind InferencePools."""

    def __init__(self, name: str, args: RoutingSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:routing:InferenceRouting", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self._args = args
        self.objects: list[pulumi.Resource] = []  # everything created here, for what waits for the routing's routes
        self.objects.append(manifest_resource(
            f"{name}-netpol",
            network_policy(args.namespace, args.edge_namespace, args.prometheus_namespace, args.vllm_selector,
                           args.vllm_port, edge_pod_selector=args.edge_pod_selector,
                           prometheus_pod_selector=args.prometheus_pod_selector),
            child,
        ))
        # Before the pickers: a picker looks for these CRDs once, at startup.
        objective_crds = crd_manifests(f"{name}-objective-crds", args.objective_crds_file, parent=self,
                                       protect=args.protect_crds)
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[objective_crds])
        # What a route to a pool waits for: every picker's objects and the pools themselves.
        pickers: list[pulumi.Resource] = []
        for model in args.models:
            for obj in picker_objects(model, args.picker, args.monitor_labels):
                opts = after_crds
                if obj["kind"] == "Deployment" and model.delete_timeout_seconds is not None:
                    # A deleted picker drains its streams for drain_seconds; the 10-minute default
                    # delete timeout would fail a routing switch or a destroy first.
                    opts = pulumi.ResourceOptions.merge(after_crds, pulumi.ResourceOptions(
                        custom_timeouts=pulumi.CustomTimeouts(delete=f"{model.delete_timeout_seconds}s")))
                pickers.append(manifest_resource(f"{model.name}-epp-{obj['kind'].lower()}", obj, opts))
            pickers.append(manifest_resource(f"{model.name}-inferencepool", inference_pool(model), child))
            objective = inference_objective(model)
            if objective is not None:
                pickers.append(manifest_resource(f"{model.name}-inferenceobjective", objective, after_crds))
            rewrite = inference_model_rewrite(model)
            if rewrite is not None:
                # Before the routes: an alias request reaching the picker without its rewrite would go to vLLM
                # under the alias, which vLLM does not serve (404). After the model's rollout: a weight on a new
                # adapter applied while the replicas still run the old adapter set would send that share of the
                # alias's requests to replicas that answer 404, and the picker's LoRA affinity scores a free slot
                # whether or not the replica serves the adapter (llm-d-router v0.10.0 lora_affinity.go Score).
                workload = args.workloads.get(model.name)
                pickers.append(manifest_resource(f"{model.name}-inferencemodelrewrite", rewrite,
                                                 pulumi.ResourceOptions.merge(after_crds, pulumi.ResourceOptions(
                                                     depends_on=[workload] if workload is not None else []))))
        manifest_resource(
            f"{name}-alerts",
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": {"name": "endpoint-picker-alerts", "namespace": args.namespace,
                             "labels": {"app.kubernetes.io/part-of": "llm-serving", **args.monitor_labels}},
                "spec": {"groups": picker_alert_groups(args.models, args.picker.replicas, args.runbook_base_url)},
            },
            child,
        )
        self._pickers = pickers
        self.objects += [objective_crds, *pickers]
        self.objects += [self.route(obj) for obj in args.pool_routes]
        self.register_outputs({"pools": [m.name for m in args.models]})

    def route(self, obj: dict, after: list[pulumi.Resource] | None = None) -> pulumi.Resource:
        """One of the edge's routes that names a pool, after every picker and `after` (a gated route: the revision's
        gate). Named and aliased as the Edge's children they were: the same objects, not new ones."""
        args = self._args
        return manifest_resource(f"{args.edge_name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj,
                                 pulumi.ResourceOptions(
                                     parent=self, depends_on=[*args.edge_after, *self._pickers, *(after or [])],
                                     aliases=[pulumi.Alias(parent=args.edge)] if args.edge is not None else None))
