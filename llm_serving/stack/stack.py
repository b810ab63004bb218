"""ServingStack: one environment of LLM serving on EKS, built from the intent its args state.

It checks the args against the stack's rules, plans every model (tensor parallelism, KV room, cold start,
probes, drains, rollout, cost) and creates the GPU capacity, its add-ons, the weights storage, each model's
weights and workload, the edge, routing, autoscaling, observability and the deploy gate. It receives the
cluster's Kubernetes provider through `opts` and passes it on by parenting; it builds no provider.

Length: the composition root: the order and the dependencies between the domain packages (CRDs before
controllers, workloads before routes, routes before the verification gate) are read here in one place;
what each child is built from lives in parts.py and model_parts.py.
"""

import dataclasses
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from llm_serving import serving
from llm_serving.cluster import ClusterMode, NetworkPolicyEnforcement
from llm_serving.edge import (
    ENVOY_HTTPS_CONTAINER_PORT,
    POD_READINESS_GATE_LABEL,
    PROMETHEUS_POD_LABELS,
    Edge,
    EdgeMode,
    EdgeMonitoring,
    edge_pod_selector,
    network_policies,
    object_storage_egress,
)
from llm_serving.gpu import (
    DO_NOT_DISRUPT_ANNOTATION,
    SAFE_TO_EVICT_ANNOTATION,
    ClusterAutoscaler,
    DcgmExporter,
    EfaDevicePlugin,
    EfaDevicePluginArgs,
    GpuNodeGroup,
    ImagePrePull,
    NodeDrainBarrier,
    NodeDrainBarrierArgs,
    NvidiaDevicePlugin,
    drain_barrier_name,
    exported_metric_names,
    node_monitoring_agent,
)
from llm_serving.observability import PrometheusStack, ServingObservability, ServingObservabilityArgs
from llm_serving.platform import (
    RESTRICTED,
    cluster_version,
    credential_revision,
    lookup_cluster,
    manifest_resource,
    namespace,
    versions,
    vpc_cni_configuration,
)
from llm_serving.platform.args import Environment, InstallMode, validate
from llm_serving.platform.pod_identity import refusal_alert_groups
from llm_serving.platform.problems import Problem, from_validation_error, mask_problem
from llm_serving.routing import InferenceRouting, RoutedModel, RoutingSpec, picker_selector
from llm_serving.scaling import AutoscalingSpec, ModelAutoscaling
from llm_serving.serving import (
    PORT,
    WORKER_COMPONENT,
    LeaderWorkerSetController,
    LeaderWorkerSetControllerArgs,
    ModelArgs,
    ModelWeights,
    ModelWeightsArgs,
    VllmDeployment,
    VllmDeploymentArgs,
    container_security_context,
    pod_security_context,
    prepull_daemonset,
    prepull_network_policy,
    producer_network_policy,
    staging_claim_name,
    sync_configmap,
)
from llm_serving.stack import (
    adoption,
    chart_images,
    evaluation,
    model_parts,
    parts,
    planning,
    revisions,
    rules,
    site,
    timing,
    verification,
)
from llm_serving.stack.admission import routed_admission
from llm_serving.stack.args import SECRET_KEYS, ServingStackArgs
from llm_serving.stack.rules import platform as platform_rules
from llm_serving.storage import (
    AdapterSources,
    CompileCacheMount,
    ServingMount,
    StorageBackend,
    WeightsBucket,
    WeightsFileSystem,
    WeightsLustre,
    s3_prefix_list_name,
)
from llm_serving.verification import EVAL_SELECTOR as EVAL_POD_SELECTOR
from llm_serving.verification import SELECTOR as VERIFY_POD_SELECTOR
from llm_serving.verification import (
    EvalJob,
    EvalJobArgs,
    VerificationJob,
    VerificationJobArgs,
    VerificationMode,
    eval_network_policy,
)
from llm_serving.verification import network_policy as verification_network_policy

TYPE = "llmserving:stack:ServingStack"

# Labels every vLLM pod and every staging Job pod carries (NetworkPolicies and the PodMonitor).
VLLM_POD_SELECTOR = {"app.kubernetes.io/component": "vllm"}
STAGING_POD_SELECTOR = {"app.kubernetes.io/component": "stage-weights"}

API_KEY_SECRET = "vllm-api-key"
HF_TOKEN_SECRET = "hf-token"
# On the pod templates of the pods that read a credential: a keyed digest of it (never the value), so
# a rotated key or token changes the template and rolls the pods. vLLM reads VLLM_API_KEY once at
# start: without a roll, running pods would keep accepting a revoked key until they restart.
API_KEY_REVISION_ANNOTATION = "llm-serving.dev/api-key-revision"
HF_TOKEN_REVISION_ANNOTATION = "llm-serving.dev/hf-token-revision"


def checked(name: str, args: Any) -> ServingStackArgs:
    """`args` (an instance, or the mapping the package's provider hands over) validated, with every rule of
    the stack held; otherwise each problem is logged on its own line and nothing is created."""
    import pydantic

    secrets = frozenset(SECRET_KEYS)
    try:
        found = validate(ServingStackArgs, args)
    except pydantic.ValidationError as error:
        refuse(name, from_validation_error(error, ServingStackArgs, args if isinstance(args, dict) else {}, secrets),
               "are not valid")
    problems = rules.check(found)
    if found.cluster.mode is ClusterMode.CREATE and found.cluster_facts is None:
        # The cluster itself is this repository's program's to build (stacks/program.py), before the stack.
        problems.append(Problem("cluster.mode", "ServingStack does not create a cluster: build it first "
                                "(llm_serving.cluster.Cluster) and pass its clusterFacts, or look one up",
                                found.cluster.mode.value, "existing, or create with clusterFacts"))
    refuse(name, [mask_problem(p, secrets) for p in problems], "break the stack's rules")
    return found


def refuse(name: str, problems: list[Problem], what: str) -> None:
    if problems:
        for problem in problems:
            pulumi.log.error(problem.line())
        raise pulumi.RunError(f"the args of ServingStack {name} {what} ({len(problems)} problem(s)); nothing was "
                              "created")


class ModelPlan(TypedDict):
    """What the planner decided for one model, from its intent and the stack's GPUs and storage."""

    tensor_parallel_size: int
    """GPUs one replica shards the model over (`--tensor-parallel-size`)."""
    pipeline_parallel_size: int
    """Nodes one replica spans (`--pipeline-parallel-size`; 1: one node)."""
    kv_cache_tokens: int
    """Tokens of KV cache one replica holds."""
    max_concurrency: float
    """Requests at `maxModelLen` one replica's KV cache holds at once."""
    cold_start_seconds: int
    """Adding a replica on a node that has the image: weights, engine start and compile."""
    startup_budget_seconds: int
    """What the startup probe allows before it restarts a replica."""
    min_replicas: int
    """Fewest replicas."""
    max_replicas: int
    """Most replicas."""
    rollout: str
    """How a new revision rolls out: `RollingUpdate` (surge where the GPUs allow) or `Recreate` (dev only)."""
    usd_per_replica_hour: NotRequired[float]
    """On-Demand price of the GPUs one replica occupies; absent without a published price."""


def model_plan(args: ServingStackArgs, model: ModelArgs) -> ModelPlan:
    plan = planning.model_plan(args, model)
    low, high = planning.replica_bounds(model)
    found = ModelPlan(
        tensor_parallel_size=plan.tensor_parallel_size, pipeline_parallel_size=plan.pipeline_parallel_size,
        kv_cache_tokens=plan.kv_cache_tokens, max_concurrency=plan.max_concurrency,
        cold_start_seconds=plan.cold_start_seconds, startup_budget_seconds=plan.startup_budget_seconds,
        min_replicas=low, max_replicas=high, rollout=planning.rollout_strategies(args)[model.name].type)
    price = planning.usd_per_replica_hour(plan)
    if price is not None:
        found["usd_per_replica_hour"] = price
    return found


class ServingStack(pulumi.ComponentResource):
    """Everything one environment of LLM serving creates: GPU nodes and their add-ons, pre-staged weights, a
    planned vLLM workload per model, the streaming-safe edge, routing, autoscaling, alerts, dashboards and the
    deploy gate, each created or taken as the cluster's own as its args say."""

    gpu_node_selector: pulumi.Output[dict[str, str]]
    """The labels GPU workloads select the stack's GPU nodes by."""
    gpu_tolerations: pulumi.Output[list[dict[str, str]]]
    """The tolerations GPU workloads carry for the GPU nodes' taint."""
    gpus_per_node: pulumi.Output[int]
    """GPUs on one node of the instance type."""
    max_gpus: pulumi.Output[int]
    """GPUs at the node group's most nodes."""
    prometheus_url: pulumi.Output[str]
    """Where Prometheus answers queries (installed, or the existing one)."""
    endpoints: pulumi.Output[dict[str, str]]
    """Each model's in-cluster OpenAI base URL (its Service), by model name."""
    urls: pulumi.Output[dict[str, str]]
    """Each model's OpenAI base URL through the edge (`https://<host><pathPrefix>/v1`), by model name."""
    models: pulumi.Output[dict[str, ModelPlan]]
    """What the planner decided for each model, by model name."""

    def __init__(self, name: str, args: ServingStackArgs, opts: pulumi.ResourceOptions | None = None):
        # Each model's second revision a model of its own from here on (llm_serving/stack/revisions.py).
        args = revisions.expanded(checked(name, args))
        if args.adopt_retained_objects:
            # A component's transformations apply to every resource under it (adoption.adopt_retained).
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                transformations=[adoption.adopt_retained(args.serving.namespace)]))
        super().__init__(TYPE, name, None, opts)
        self._check_account(name, args)
        self._args = args
        for note in planning.rollout_crowded_out(args).values():
            # A model added beside this one can take its surge room: the preview says so, with the numbers.
            pulumi.log.warn(note, resource=self)
        for reference in chart_images.unused_digests(args):
            # Left behind by a chart bump, or mistyped: either way it pins nothing, and the image meant runs by tag.
            pulumi.log.warn(f"chartImageDigests[{reference}] names no image this stack's charts run at their pinned "
                            "versions, so it pins nothing; `python -m stacks pin-images <stack> --write` removes it",
                            resource=self)
        looked_up = (lookup_cluster(args.cluster.name, pulumi.InvokeOptions(parent=self))
                     if args.cluster_facts is None else None)
        self._site = site.resolve(args, looked_up, self)
        child = pulumi.ResourceOptions(parent=self)
        group = args.gpu_node_group

        instance = planning.resolve_instance_type(args)
        assert instance is not None  # the rules refuse an unknown instance type
        if planning.creates_nodes(args):
            node_group = GpuNodeGroup(parts.node_group_name(args), parts.node_group(args, self._site), child)
            self.gpu_nodes = site.created_gpu_nodes(node_group)
            if group.auto_repair.enabled and group.auto_repair.install_monitoring_agent:
                node_monitoring_agent(
                    "node-monitoring-agent", args.cluster.name, args.cluster.kubernetes_version,
                    planning.resource_tags(args), pulumi.ResourceOptions(parent=self, depends_on=[node_group]),
                )
        else:
            self.gpu_nodes = site.existing_gpu_nodes(args, instance.gpu_count)
        autoscaler = parts.cluster_autoscaler(args, self._site)
        if autoscaler is not None:
            ClusterAutoscaler("cluster-autoscaler", autoscaler, child)
        prometheus_args = parts.prometheus(args)
        prometheus = PrometheusStack("prometheus", prometheus_args, child) if prometheus_args is not None else None
        if args.addons.nvidia_device_plugin.mode is InstallMode.INSTALL:
            NvidiaDevicePlugin("nvidia-device-plugin", parts.device_plugin(args, self.gpu_nodes), child)
        self._group_prerequisites: list[pulumi.Resource] = []
        digests = dict(args.chart_image_digests)
        if group.efa_interfaces:
            self._group_prerequisites.append(EfaDevicePlugin(
                "efa-device-plugin", EfaDevicePluginArgs(versions.EFA_DEVICE_PLUGIN.version, digests), child))
        if any(planning.model_plan(args, m).pipeline_parallel_size > 1 for m in args.models):
            self._group_prerequisites.append(LeaderWorkerSetController(
                "leaderworkerset", LeaderWorkerSetControllerArgs(versions.LWS.version, digests), child))
        crds: list[pulumi.Resource] = [prometheus.release] if prometheus else []
        if args.addons.dcgm_exporter.mode is InstallMode.INSTALL:
            DcgmExporter("dcgm-exporter", parts.dcgm_exporter(args, self.gpu_nodes), child, crds_from=crds or None)
        edge_spec = parts.edge(args, self._site)
        # A map of Outputs, which Pulumi resolves; the annotation is the schema's type (a map of strings).
        self.endpoints = self._models(args, edge_spec, child)  # type: ignore[assignment]
        settings = args.observability.prometheus
        monitor_labels = dict(settings.monitor_selector_labels)
        ServingObservability(
            "serving-observability",
            ServingObservabilityArgs(
                serving_namespace=args.serving.namespace,
                prometheus_namespace=settings.namespace,
                pod_selector=VLLM_POD_SELECTOR,
                port_name="http",
                monitor_labels=monitor_labels,
                runbook_base_url=args.observability.runbook_base_url,
                models=tuple(model_parts.slo(args, m) for m in args.models),
                gpu_metric_names=exported_metric_names(),
                model_name_from_workload=any(revisions.revision_model_of(m) is not None for m in args.models),
            ),
            child,
            crds_from=crds,
        )
        # Refusals of the Pod Identity admission guards that go on (llm_serving/platform/pod_identity.py): one rule
        # for every guard of the cluster, whichever part of the stack made it.
        manifest_resource("pod-identity-alerts", {
            "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "pod-identity-alerts", "namespace": args.serving.namespace,
                         "labels": {"app.kubernetes.io/part-of": "llm-serving", **monitor_labels}},
            "spec": {"groups": refusal_alert_groups(args.observability.runbook_base_url)},
        }, pulumi.ResourceOptions(parent=self, depends_on=crds))
        ModelAutoscaling("autoscaling", AutoscalingSpec(
            mode=args.autoscaling.mode,
            namespace=args.autoscaling.namespace,
            keda_chart_version=args.autoscaling.keda_chart_version,
            prometheus_adapter_chart_version=args.autoscaling.prometheus_adapter_chart_version,
            prometheus_url=parts.prometheus_query_url(args),
            targets=tuple(model_parts.scaling_target(args, m) for m in args.models),
            install=args.autoscaling.controller is InstallMode.INSTALL,
            image_digests=dict(args.chart_image_digests),
        ), child, workloads=self._deployments)
        edge = Edge("edge", dataclasses.replace(edge_spec, monitoring=EdgeMonitoring(
            monitor_labels, args.observability.runbook_base_url)), child, crds_from=crds)
        routed = self._routed_models(args)
        routes: list[pulumi.Resource] = [edge]
        routing: InferenceRouting | None = None
        if routed:
            # After the edge: it installs the InferencePool CRD and the gateway extension that calls the pickers.
            routing = InferenceRouting(
                "inference-routing",
                RoutingSpec(
                    namespace=args.serving.namespace,
                    edge_namespace=edge_spec.settings.namespace,
                    prometheus_namespace=settings.namespace,
                    vllm_selector=VLLM_POD_SELECTOR,
                    vllm_port=PORT,
                    models=routed,
                    picker=parts.picker(args),
                    runbook_base_url=args.observability.runbook_base_url,
                    monitor_labels=monitor_labels,
                    objective_crds_file=versions.LLM_D_ROUTER_CRDS_FILE,
                    protect_crds=edge_spec.protect_crds,
                    edge_pod_selector=edge_pod_selector(edge_spec.mode, edge_spec.settings),
                    prometheus_pod_selector=dict(PROMETHEUS_POD_LABELS),
                    pool_routes=tuple(edge.pool_route_manifests),
                    edge=edge,
                    edge_name="edge",
                    edge_after=tuple(edge.controller),
                    workloads=dict(self._workloads),
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[*edge.inference_prerequisites, *crds]),
            )
            routes.append(routing)
        # A second revision's gate, then its model's weighted route; last, each model's own Job, which waits for its
        # workload and for every route to it (the edge's, and the routing's to its pool).
        self._gate_revisions(args, edge, routing)
        self._verify(args, routes)
        self.gpu_node_selector = self.gpu_nodes.node_selector
        self.gpu_tolerations = self.gpu_nodes.tolerations
        self.gpus_per_node = self.gpu_nodes.gpus_per_node
        self.max_gpus = self.gpu_nodes.max_gpus
        self.prometheus_url = prometheus.url if prometheus else pulumi.Output.from_input(settings.url or "")
        self.models = pulumi.Output.from_input({m.name: model_plan(args, m) for m in args.models})
        self.urls = pulumi.Output.from_input({m.name: verification.public_url(args, m) for m in args.models
                                              if revisions.revision_model_of(m) is None})
        self.register_outputs(
            {
                "gpu_node_selector": self.gpu_node_selector,
                "gpu_tolerations": self.gpu_tolerations,
                "gpus_per_node": self.gpus_per_node,
                "max_gpus": self.max_gpus,
                "prometheus_url": self.prometheus_url,
                "endpoints": self.endpoints,
                "urls": self.urls,
                "models": self.models,
            }
        )

    def _check_account(self, name: str, args: ServingStackArgs) -> None:
        """Before any child, what only the account knows: a looked-up cluster's Kubernetes minor and whether its
        VPC CNI enforces NetworkPolicies (a created cluster's are the program's own), and that an existing
        weights bucket is there, in the stack's region."""
        if args.cluster_facts is None:
            found = platform_rules.cluster_version_problem(args, cluster_version(args.cluster.name))
            refuse(name, [found] if found else [], "do not match the cluster's Kubernetes version")
            if args.cluster.network_policy_enforcement is NetworkPolicyEnforcement.VPC_CNI:
                enforcement = platform_rules.network_policy_enforcement_problem(
                    args, vpc_cni_configuration(args.cluster.name))
                refuse(name, [enforcement] if enforcement else [], "rely on NetworkPolicies nothing enforces")
        bucket = args.weights_storage.s3.bucket_name
        if args.weights_storage.backend is StorageBackend.S3 and bucket is not None:
            try:
                region: str | None = aws.s3.get_bucket(bucket=bucket).region
            except Exception:  # noqa: BLE001 - the provider reports a missing (or unreadable) bucket as a failed invoke
                region = None
            refuse(name, platform_rules.existing_bucket_problems(bucket, region, aws.get_region().region),
                   "name a weights bucket the stack cannot use")

    def _s3_prefix_list_cidrs(self) -> list[str]:
        """The CIDRs of S3's AWS-managed prefix list in the stack's region, read while the program runs (every
        preview and up; ec2:DescribePrefixLists, terraform-provider-aws internal/service/ec2/
        vpc_prefix_list_data_source.go), so the fences built from them are plain values a preview shows in full.
        AWS changes the list when S3 gains or drops ranges: the next preview then shows the NetworkPolicies
        updated in place."""
        invoke = pulumi.InvokeOptions(parent=self)
        region = aws.get_region(opts=invoke).region
        return list(aws.ec2.get_prefix_list(name=s3_prefix_list_name(region), opts=invoke).cidr_blocks)

    def _routed_models(self, args: ServingStackArgs) -> tuple[RoutedModel, ...]:
        """The models routed through an InferencePool, with their pickers' drains and admission."""
        ttft = {m.name: m.slo.ttft_p95_seconds for m in args.models}
        routed = []
        for model in args.models:
            drains = timing.model_drains(args, model)
            if drains.picker_drain_seconds is None:  # routed through its Service
                continue
            routed.append(RoutedModel(
                name=model.name,
                namespace=args.serving.namespace,
                # The Deployment's own pod selector: the pool picks exactly its replicas.
                pod_selector=self._pod_selectors[model.name],
                port=PORT,
                drain_seconds=drains.picker_drain_seconds,
                delete_timeout_seconds=drains.delete_timeout_seconds,
                priority=model.route.priority,
                admission=routed_admission(args, model),
                # The edge's TTFT alerts hold the model to its own objective.
                ttft_objective_seconds=ttft[model.name],
                wake_seconds=planning.wake(args, model).total_seconds if planning.scales_to_zero(model) else None,
                lora=model.lora is not None,
                aliases=tuple((alias.name, tuple((t.adapter, t.weight) for t in alias.targets))
                              for alias in model.lora.aliases) if model.lora is not None else (),
            ))
        return tuple(routed)

    def _models(self, args: ServingStackArgs, edge_spec: Any, child: pulumi.ResourceOptions) -> dict[str, Any]:
        """Serving namespace, its secrets and fences, and per model the weights and the workload."""
        serving_namespace = args.serving.namespace
        prometheus_namespace = args.observability.prometheus.namespace
        s3 = args.weights_storage.backend is StorageBackend.S3
        # Only our own pods run here, all under the restricted profile.
        # In ALB mode the ALB's ip targets are the vLLM pods themselves: the load balancer controller's readiness
        # gate keeps an old replica until the new one is healthy in the target group (objects.POD_READINESS_GATE_LABEL).
        alb = args.edge.mode is EdgeMode.ALB
        ns = namespace("serving-namespace", serving_namespace, parent=self, pod_security=RESTRICTED,
                       labels={POD_READINESS_GATE_LABEL: "enabled"} if alb else None)
        vllm_key = parts.vllm_api_key(args)
        # (mypy solves `Output.secret` of an Output[str] to Output[Never], through pulumi's Input union: the two
        # calls on vllm_key below ignore that.)
        api_key = k8s.core.v1.Secret(
            "vllm-api-key",
            metadata={"name": API_KEY_SECRET, "namespace": ns.metadata.name},
            type="Opaque",
            string_data={"api-key": pulumi.Output.secret(vllm_key)},  # type: ignore[arg-type]
            opts=child,
        )
        hf_token_secret = None
        hf_token_revision = None
        if args.hf_token is not None:
            k8s.core.v1.Secret(
                "hf-token",
                metadata={"name": HF_TOKEN_SECRET, "namespace": ns.metadata.name},
                type="Opaque",
                string_data={"token": pulumi.Output.secret(args.hf_token)},
                opts=child,
            )
            hf_token_secret = HF_TOKEN_SECRET
            # Secret outputs: the digests stay encrypted in state and masked in previews.
            hf_token_revision = pulumi.Output.secret(args.hf_token).apply(credential_revision)
        api_key_revision = pulumi.Output.secret(vllm_key).apply(credential_revision)  # type: ignore[arg-type]
        # The fences go up before anything runs in the namespace: the staging Job holds the HF token.
        after_namespace = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        generation = self.gpu_nodes.replaced_generation
        stage_image = f"{versions.STAGE_IMAGE}@{args.weights_storage.stage_image_digest}"
        if generation is not None:
            assert self.gpu_nodes.node_group is not None  # a replaced generation is a created group's
            # A node update replaces the group: the old generation's barrier is deleted before the old
            # group and holds it until the last replaced vLLM pod has drained (llm_serving/gpu/drain.py).
            NodeDrainBarrier(drain_barrier_name(generation), NodeDrainBarrierArgs(
                generation=generation, namespace=ns.metadata.name, wait_seconds=timing.node_drain_wait_seconds(args),
                image=stage_image, container_security=container_security_context(),
                node_group=self.gpu_nodes.node_group,
            ), after_namespace)
        routed = any(timing.model_drains(args, m).picker_drain_seconds is not None for m in args.models)
        gates = verification.verification_mode(args) is not VerificationMode.OFF
        evaluates = gates and bool(evaluation.plans(args))
        multinode = any(planning.model_plan(args, m).pipeline_parallel_size > 1 for m in args.models)
        s3_cidrs = self._s3_prefix_list_cidrs() if planning.s3_through_gateway_endpoint(args) else None
        fences = [
            manifest_resource(f"serving-netpol-{policy['metadata']['name']}", policy, after_namespace)
            for policy in network_policies(
                serving_namespace=serving_namespace,
                model_selector=VLLM_POD_SELECTOR,
                port=PORT,
                edge_namespace=edge_spec.settings.namespace,
                edge_pod_selector=edge_pod_selector(edge_spec.mode, edge_spec.settings),
                prometheus_namespace=prometheus_namespace,
                prometheus_pod_selector=dict(PROMETHEUS_POD_LABELS),
                staging_job_selector=STAGING_POD_SELECTOR,
                load_balancer_cidrs=edge_spec.load_balancer_cidrs,
                picker_selector=picker_selector() if routed else None,
                verification_selector=VERIFY_POD_SELECTOR if gates else None,
                eval_selector=EVAL_POD_SELECTOR if evaluates else None,
                weights_from_s3=s3,
                # The headless ranks of multi-node groups stream from the bucket as well.
                worker_selector={"app.kubernetes.io/component": WORKER_COMPONENT} if multinode else None,
                s3_prefix_list_cidrs=s3_cidrs,
            )
        ]
        if evaluates:
            fences.append(manifest_resource("serving-netpol-eval", eval_network_policy(
                namespace=serving_namespace, model_selector=VLLM_POD_SELECTOR, port=PORT), after_namespace))
        if gates:
            fences.append(manifest_resource("serving-netpol-verification", verification_network_policy(
                namespace=serving_namespace, edge_namespace=edge_spec.settings.namespace,
                model_selector=VLLM_POD_SELECTOR, port=PORT,
                edge_pod_ports=(ENVOY_HTTPS_CONTAINER_PORT,) if verification.edge_connect_to(args) else ()),
                after_namespace))
        self._fences = fences
        self._api_key_secret = api_key
        endpoints: dict[str, Any] = {}
        self._deployments: list[pulumi.Resource] = []
        self._pod_selectors: dict[str, dict[str, str]] = {}
        self._workloads: dict[str, pulumi.Resource] = {}
        storage_class: pulumi.Output[str] | None = None
        serving_claims: dict[str, pulumi.Output[str]] = {}
        cache_claims: dict[str, pulumi.Resource] = {}
        if args.weights_storage.backend is StorageBackend.EFS:
            # Claims name the class through its output, so they wait for the file system to be mountable.
            # The GPU nodes (the serving identity) read through access points of their own; NFS comes
            # from their own security group, never the cluster's.
            efs = parts.weights_file_system(args, self._site)
            assert self.gpu_nodes.node_role_arn is not None and self.gpu_nodes.security_group_id is not None
            efs = dataclasses.replace(
                efs,
                reader_role_arns=(self.gpu_nodes.node_role_arn,),
                nfs_client_security_groups=(("gpu-nodes", self.gpu_nodes.security_group_id),
                                            *efs.nfs_client_security_groups),
                serving_mounts=tuple(
                    ServingMount(key=m.name, namespace=serving_namespace,
                                 staging_claim_name=staging_claim_name(m.name), claim_name=f"{m.name}-weights-ro",
                                 volume_name=f"{serving_namespace}-{m.name}-weights-ro")
                    # A second revision reads the model's claim (its revision in a directory of its own).
                    for m in args.models if revisions.revision_model_of(m) is None),
                # Each model's compile cache on its own access point, volume and claim: a producer mounts only
                # its own model's, read-write, and the model's serving pods the same claim read-only.
                compile_cache_mounts=tuple(
                    CompileCacheMount(key=m.name, namespace=serving_namespace, claim_name=key.claim_name,
                                      volume_name=planning.compile_cache_volume_name(args, m),
                                      delete_timeout_seconds=timing.model_drains(args, m).delete_timeout_seconds)
                    for m in args.models
                    if (key := planning.compile_cache_wiring(args, m)) is not None and key.claim_name is not None),
                serving_namespace=ns.metadata.name,
            )
            file_system = WeightsFileSystem("weights-storage", efs, child)
            storage_class = file_system.storage_class_name
            serving_claims = file_system.serving_claim_names
            cache_claims = file_system.compile_cache_claims
        shared_claim: pulumi.Output[str] | None = None
        if args.weights_storage.backend is StorageBackend.FSX_LUSTRE:
            # The shared claim lives in the serving namespace, behind the same fences as the Jobs.
            shared_claim = WeightsLustre(
                "weights-storage", parts.weights_lustre(args, self._site),
                pulumi.ResourceOptions(parent=self, depends_on=[ns]),
            ).claim_name
        bucket: WeightsBucket | None = None
        if s3:
            bucket = WeightsBucket("weights-storage", parts.weights_bucket(args), child)
        # Through the node group's name, so a Deployment waits for its node group: after a node
        # update the pods roll only once the new generation's group exists.
        node_selector = self.gpu_nodes.node_selector if self.gpu_nodes.node_group_name is None else pulumi.Output.all(
            self.gpu_nodes.node_group_name, self.gpu_nodes.node_selector
        ).apply(lambda values: values[1])
        if args.gpu_node_group.image_pre_pull is ImagePrePull.DAEMON_SET:
            # On the GPU nodes the Deployments select (through the node group's name, so a new generation
            # of nodes pulls as soon as it exists), restricted like every pod in the namespace.
            images = sorted({model_parts.image(m) for m in args.models})
            prepull = prepull_daemonset(namespace=serving_namespace, images=images,
                                        node_selector=node_selector,  # type: ignore[arg-type]
                                        tolerations=self.gpu_nodes.tolerations)  # type: ignore[arg-type]
            k8s.apps.v1.DaemonSet("image-prepull", metadata=prepull["metadata"], spec=prepull["spec"],
                                  opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
            fence = prepull_network_policy(serving_namespace)
            k8s.networking.v1.NetworkPolicy("image-prepull-network-policy", metadata=fence["metadata"],
                                            spec=fence["spec"],
                                            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        producer_fence: list[pulumi.Resource] = []
        if any(planning.compile_cache_wiring(args, m) is not None for m in args.models):
            # The producer Jobs wait for it (their `after`): a producer pod never runs unfenced. On S3 the
            # producers stream the weights and upload the cache like the serving pods reach the bucket.
            fence = producer_network_policy(serving_namespace,
                                            object_storage_egress(s3_cidrs) if bucket is not None else None)
            producer_fence.append(k8s.networking.v1.NetworkPolicy(
                "compile-cache-network-policy", metadata=fence["metadata"], spec=fence["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns])))
            # The seed and the producer run cache_sync.py from it on every backend (the seed's manifest check);
            # the pods wait for it like the fence.
            sync = sync_configmap(serving_namespace)
            producer_fence.append(k8s.core.v1.ConfigMap(
                "compile-cache-sync", metadata=sync["metadata"], data=sync["data"], immutable=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns])))
        staged: dict[str, ModelWeights] = {}
        # Per model its weights (the claim the eval's task set is staged through) and the volume's zones.
        self._eval_site: dict[str, tuple[ModelWeights, tuple[str, ...]]] = {}
        self._evals: dict[str, tuple[pulumi.Resource, ...]] = {}  # per model, its second revision's eval Job
        self._hf_token_secret = hf_token_secret
        self._hf_token_annotations: dict[str, pulumi.Input[str]] | None = (
            {HF_TOKEN_REVISION_ANNOTATION: hf_token_revision} if hf_token_revision is not None else None)
        for model in args.models:
            plan = planning.model_plan(args, model)
            architecture = planning.model_architecture(model)
            # A model's second revision: a staging Job of its own, into the model's claim (ModelWeights stages each
            # revision into a directory named after it, with its own completion marker); on S3, its own prefix.
            first = revisions.revision_model_of(model)
            claim_of = first or model.name
            assert architecture is not None  # the rules refuse a model without one
            tokenizer = model_parts.tokenizer_revision(model)
            # A ReadWriteOnce (EBS) volume lives in one zone: the Job and the replica go to the node group's
            # first zone, where the volume is created.
            zone = (args.gpu_node_group.subnets[0].availability_zone
                    if model.storage.access_mode is serving.AccessMode.READ_WRITE_ONCE and args.gpu_node_group.subnets
                    else None)
            # EFS mount targets exist only in the GPU node group's zones (llm_serving/storage/efs.py).
            mount_zones = (tuple(sorted({s.availability_zone for s in args.gpu_node_group.subnets}))
                           if args.weights_storage.backend is StorageBackend.EFS else ())
            # LoRA adapters from S3: their staging Job reads them under a role of its own (on a volume backend; the
            # rules refuse adapters on the S3 backend), admitted only once Pod Identity injects its credentials.
            adapter_reader: list[pulumi.Resource] = []
            if (sources := parts.adapter_sources(args, model)) is not None:
                adapter_reader = AdapterSources(f"{model.name}-adapter-sources", sources, child).ready
            s3_prefix = serving.s3_model_prefix(model.model_id, model.revision) if s3 else None
            s3_tokenizer_prefix = serving.s3_tokenizer_prefix(model.model_id, tokenizer) if s3 and tokenizer else None
            weights = ModelWeights(
                f"{model.name}-weights",
                ModelWeightsArgs(
                    namespace=ns.metadata.name,
                    model_name=model.name,
                    model_id=model.model_id,
                    revision=model.revision,
                    tokenizer_revision=tokenizer,
                    stage_image=stage_image,
                    storage_class=storage_class if storage_class is not None else planning.weights_storage_class(args),
                    shared_claim=staged[first].claim_name if first is not None and not s3 and shared_claim is None
                    else shared_claim,
                    zone=zone,
                    stage_zones=mount_zones,
                    access_mode=model.storage.access_mode.value,
                    size_gib=planning.claim_size_gib(args, model, architecture.weight_bytes),
                    download_deadline_seconds=model_parts.download_deadline_seconds(model),
                    hf_token_secret=hf_token_secret,
                    pod_annotations=(
                        {HF_TOKEN_REVISION_ANNOTATION: hf_token_revision} if hf_token_revision is not None else {}
                    ),
                    node_selector=self._site.staging.node_selector
                    if args.weights_storage.backend is StorageBackend.EFS else None,
                    protect=args.environment is Environment.PROD,
                    after=tuple(fences) + (tuple(bucket.admission_guards[f"{model.name}-stage"]) if bucket else ())
                    + tuple(adapter_reader),
                    bucket=bucket.bucket_name if bucket else None,
                    s3_prefix=s3_prefix,
                    s3_tokenizer_prefix=s3_tokenizer_prefix,
                    service_account=planning.stage_service_account(model) if s3 or adapter_reader else None,
                    region=self._site.region if s3 or adapter_reader else None,
                    adapters=model_parts.staged_adapters(model),
                    max_lora_rank=model.lora.max_lora_rank if model.lora is not None else 0,
                    # The adapters' bucket may be in any region or account: S3 at any address, as the Job's HTTPS.
                    adapter_egress=tuple(object_storage_egress()) if adapter_reader else (),
                ),
                child,
            )
            staged[model.name] = weights
            self._eval_site[model.name] = (weights, mount_zones)
            # EFS: a second revision mounts the model's read-only claim.
            claims = ({**serving_claims, model.name: serving_claims[claim_of]} if claim_of in serving_claims
                      else serving_claims)
            deployment = self._workload(args, model, plan, ns, weights, bucket, api_key, node_selector,
                                        claims, cache_claims, producer_fence, api_key_revision,
                                        s3_tokenizer_prefix, zone,
                                        () if planning.creates_nodes(args) else mount_zones)
            self._deployments.append(deployment.deployment)
            self._workloads[model.name] = deployment.deployment
            self._pod_selectors[model.name] = deployment.pod_selector
            endpoints[model.name] = pulumi.Output.concat(
                "http://", deployment.service_name, ".", serving_namespace, ".svc:", str(PORT)
            )
        return endpoints

    def _workload(self, args: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan, ns: k8s.core.v1.Namespace,
                  weights: ModelWeights, bucket: WeightsBucket | None, api_key: pulumi.Resource,
                  node_selector: pulumi.Output[Any], serving_claims: dict[str, pulumi.Output[str]],
                  cache_claims: dict[str, pulumi.Resource], producer_fence: list[pulumi.Resource],
                  api_key_revision: pulumi.Output[str], s3_tokenizer_prefix: str | None,
                  zone: str | None, zones: tuple[str, ...]) -> VllmDeployment:
        """The model's vLLM Deployment (or LeaderWorkerSet), Service and PDB, with its service accounts on S3."""
        instance = planning.resolve_instance_type(args)
        assert instance is not None  # the rules refuse an unknown instance type
        settings = model_parts.engine_settings(args, model)
        compile_cache = planning.compile_cache_wiring(args, model)
        after_namespace = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        serving_after: tuple[pulumi.Resource, ...] = ()
        service_account = planning.serving_service_account(model) if bucket is not None else None
        compile_account = planning.compile_cache_service_account(model) if bucket is not None else None
        if bucket is not None and service_account is not None:
            # The pods read as their own account, which Pod Identity maps to the prefix's read-only role.
            serving_after = (*bucket.admission_guards[f"{model.name}-read"], k8s.core.v1.ServiceAccount(
                f"{model.name}-serving-account",
                metadata={"name": service_account, "namespace": ns.metadata.name,
                          "labels": {"app.kubernetes.io/name": model.name}},
                automount_service_account_token=False, opts=after_namespace))
            # The bucket's paths are Outputs, which EngineSettings types as the str they resolve to:
            # engine_args passes them through into the container's args.
            tokenizer_path = (pulumi.Output.concat("s3://", bucket.bucket_name, "/", s3_tokenizer_prefix)
                              if s3_tokenizer_prefix else None)
            settings = dataclasses.replace(settings, model_path=weights.model_path,  # type: ignore[arg-type]
                                           tokenizer_path=tokenizer_path)  # type: ignore[arg-type]
            if compile_cache is not None and compile_account:
                # The producer Job uploads as its own account, mapped to the role that writes only the
                # cache's prefix; the Job waits for its association's admission guard (the Deployment's `after`).
                serving_after += (*bucket.admission_guards[f"{model.name}-compile"], k8s.core.v1.ServiceAccount(
                    f"{model.name}-compile-cache-account",
                    metadata={"name": compile_account, "namespace": ns.metadata.name,
                              "labels": {"app.kubernetes.io/name": model.name}},
                    automount_service_account_token=False, opts=after_namespace))
        dynamics = planning.timing(args)
        return VllmDeployment(
            model.name,
            VllmDeploymentArgs(
                namespace=ns.metadata.name,
                model_name=model.name,
                image=model_parts.image(model),
                replicas=model.replicas,
                settings=settings,
                startup_budget_seconds=plan.startup_budget_seconds,
                resources=serving.pod_resources(instance.vcpus, instance.memory_gib, instance.gpu_count,
                                                plan.tensor_parallel_size),
                node_selector=node_selector,
                tolerations=self.gpu_nodes.tolerations,
                # S3: no volume (the streamer reads the bucket). EFS: the model's read-only claim
                # through its own access point; otherwise the claim the Job staged into, mounted read-only.
                claim_name=None if bucket is not None else serving_claims.get(model.name, weights.claim_name),
                service_account=service_account,
                api_key_secret=API_KEY_SECRET,
                extra_env=model_parts.extra_env(args, self._site.region),
                strategy=planning.rollout_strategies(args)[model.name].manifest(),
                rollout_timeout_seconds=timing.rollout_await_seconds(args, model),
                delete_timeout_seconds=timing.model_drains(args, model).delete_timeout_seconds,
                protect_workload=args.production_like and not model.allow_workload_replacement,
                pre_start_seconds=dynamics.node_ready_seconds + dynamics.image_pull_seconds,
                pod_annotations={SAFE_TO_EVICT_ANNOTATION: "false", API_KEY_REVISION_ANNOTATION: api_key_revision,
                                 **({} if planning.creates_nodes(args) else {DO_NOT_DISRUPT_ANNOTATION: "true"})},
                zone=zone,
                host_domains=planning.host_spread_domains(args, model),
                # Existing nodes may run in zones without the weights' mount targets.
                zones=zones,
                # A multi-node rank takes every EFA interface of its node (a stage is the whole node).
                efa_interfaces=args.gpu_node_group.efa_interfaces if plan.pipeline_parallel_size > 1 else 0,
                cache_gib=model.cache_volume_gib,
                tmp_gib=model.tmp_volume_gib,
                chat_template=model.chat_template,
                compile_cache=compile_cache,
                compile_timeouts=timing.producer_timeouts(args, model),
                compile_cache_bucket=bucket.bucket_name if bucket is not None else None,
                compile_cache_service_account=compile_account,
                # Serving starts only once its revision is fully staged (and a group once its
                # operator and the EFA device plugin run).
                after=(weights.job, api_key, *serving_after,
                       *(([cache_claims[model.name]] if model.name in cache_claims else []) + producer_fence
                         if compile_cache is not None else ()),
                       *(self._group_prerequisites if plan.pipeline_parallel_size > 1 else ())),
            ),
            pulumi.ResourceOptions(parent=self),
        )

    def _gate_revisions(self, args: ServingStackArgs, edge: Edge, routing: InferenceRouting | None) -> None:
        """Per second revision its deploy gate, then its model's weighted HTTPRoute after it: the revision takes its
        share of the route only once its gate passed, and a failed gate fails the `up` before the route changes.
        The gate waits for the revision's workload and for every object of the edge and the routing created so far,
        its header rules' route among them, never for a component (which would include the weighted route, created
        after it, and wait for itself). With `verification.mode: off` the weighted route goes up as any other."""
        mode = verification.verification_mode(args)
        for model in args.models:
            first = revisions.revision_model_of(model)
            if first is None:
                continue
            route = edge.gated_route_manifests[first]
            owner: Edge | InferenceRouting = routing if routing is not None and first in edge.pooled else edge

            def weighted(after: list[pulumi.Resource], route: dict[str, Any] = route,
                         owner: Edge | InferenceRouting = owner) -> pulumi.Resource:
                return owner.route(route, after)

            before = (self._workloads[model.name], *edge.objects, *(routing.objects if routing else ()))
            plan = next((p for p in evaluation.plans(args) if p.candidate is model), None)
            if mode is VerificationMode.OFF:
                weighted([])
            elif verification.serves_users(args, model):
                # A weight: the share moves only once the gate (and the accuracy gate after it) passed.
                gate = self._verification_job(args, model, mode, before).job
                weighted([gate, *([self._eval_job(args, plan, mode, (*before, gate)).job] if plan else [])])
            else:
                # Weight 0 (a new revision, or a rollback): the route first, so the revision has no share when its
                # full planned load runs, and a rollback never waits for a gate the broken revision would fail.
                moved = weighted([])
                gate = self._verification_job(args, model, mode, (*before, moved)).job
                if plan is not None:
                    # After the latency gate: the two never load the same pods at once (the gate's load is sized
                    # to the pods alone), and a revision that failed it is not scored for an hour.
                    self._eval_job(args, plan, mode, (*before, moved, gate))

    def _verification_job(self, args: ServingStackArgs, model: ModelArgs, mode: VerificationMode,
                          after: tuple[pulumi.Resource, ...]) -> VerificationJob:
        fingerprint = model_parts.gate_fingerprint(args, model)
        checks = dataclasses.replace(verification.settings(args, model), deployed=fingerprint)
        return VerificationJob(
            f"{model.name}-verify",
            VerificationJobArgs(
                namespace=args.serving.namespace,
                model_name=model.name,
                settings=checks,
                mode=mode,
                image=versions.VERIFY_IMAGE,
                api_key_secret=API_KEY_SECRET,
                deadline_seconds=verification.deadline_seconds(checks),
                # Image, revision, engine flags and replicas: a deploy that changes them is verified again; and a
                # revision's weight, so each step of a rollout is gated before its route moves.
                deployed=fingerprint,
                after=(*after, self._api_key_secret, *self._fences),
            ),
            pulumi.ResourceOptions(parent=self),
        )

    def _verify(self, args: ServingStackArgs, routes: list[pulumi.Resource]) -> None:
        """Each model's deploy gate (none with `verification.mode: off`); a second revision's is `_gate_revisions`'s.
        The first revision keeps the model's Job: its pods serve users at the first revision's weight, so its load
        is the in-place gate's, and its edge checks go through the weighted route as clients do."""
        mode = verification.verification_mode(args)
        if mode is VerificationMode.OFF:
            return
        # A model's own gate after its second revision's eval, which may load the same (first revision's) pods.
        gates = {model.name: self._verification_job(args, model, mode, (
                     self._workloads[model.name], *routes, *self._evals.get(model.name, ()))).job
                 for model in args.models if revisions.revision_model_of(model) is None}
        for plan in evaluation.plans(args):
            if plan.stable is None:  # a model with one revision: against its tasks' floors, after its latency gate
                self._eval_job(args, plan, mode, (self._workloads[plan.candidate.name], gates[plan.candidate.name]))

    def _eval_job(self, args: ServingStackArgs, plan: evaluation.EvalPlan, mode: VerificationMode,
                  after: tuple[pulumi.Resource, ...]) -> EvalJob:
        """The accuracy gate of `plan`'s model: after both revisions' workloads, its task set and harness staged
        through the model's own claim (a second revision mounts the same volume)."""
        weights, zones = self._eval_site[plan.owner.name]
        fingerprint = model_parts.eval_fingerprint(args, plan)
        checked = {**evaluation.settings(args, plan), "deployed": fingerprint}
        staged = evaluation.files(plan)
        efs = args.weights_storage.backend is StorageBackend.EFS
        job = EvalJob(
            f"{plan.candidate.name}-eval",
            EvalJobArgs(
                namespace=args.serving.namespace,
                model_name=plan.candidate.name,
                settings=checked,
                files=staged,
                task_dir=staged[0].target.rsplit("/", 2)[0],
                mode=mode,
                image=versions.VERIFY_IMAGE,
                stage_requirements=serving.STAGE_REQUIREMENTS,
                claim_name=weights.claim_name,
                api_key_secret=API_KEY_SECRET,
                deadline_seconds=evaluation.deadline_seconds(args, plan, checked),
                stage_deadline_seconds=timing.EVAL_STAGE_DEADLINE_SECONDS,
                deployed=fingerprint,
                pod_security=pod_security_context(),
                container_security=container_security_context(),
                node_selector=dict(self._site.staging.node_selector or {}) if efs else {},
                zones=zones,
                hf_token_secret=self._hf_token_secret,
                stage_pod_annotations=self._hf_token_annotations,
                after=(*after, *([self._workloads[plan.stable.name]] if plan.stable is not None else []),
                       self._api_key_secret, *self._fences),
                stage_after=(weights.job, *self._fences),
            ),
            pulumi.ResourceOptions(parent=self),
        )
        self._evals[plan.owner.name] = (job.job,)
        return job
