"""ServingStack: composes the GPU capacity, its add-ons and observability into one component.

The only component `__main__.py` creates. It receives the stack's Kubernetes provider through
`opts` and passes it on by parenting; it builds no provider of its own.

Length: the composition root: the order and the dependencies between the domain packages (CRDs
before controllers, workloads before routes, routes before the verification gate) are read here
in one place; the builders themselves live in the packages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.edge import Edge, EdgeSpec, edge_pod_selector, network_policies, object_storage_egress
from llm_serving.gpu import (
    SAFE_TO_EVICT_ANNOTATION,
    ClusterAutoscaler,
    ClusterAutoscalerArgs,
    DcgmExporter,
    DcgmExporterArgs,
    EfaDevicePlugin,
    EfaDevicePluginArgs,
    GpuNodeGroup,
    NodeDrainBarrier,
    NodeDrainBarrierArgs,
    NodeGroupSpec,
    NvidiaDevicePlugin,
    NvidiaDevicePluginArgs,
    drain_barrier_name,
    exported_metric_names,
    node_monitoring_agent,
)
from llm_serving.observability import (
    ModelSlo,
    PrometheusStack,
    PrometheusStackArgs,
    ServingObservability,
    ServingObservabilityArgs,
)
from llm_serving.platform import RESTRICTED, credential_revision, manifest_resource, namespace, versions
from llm_serving.routing import (
    Admission,
    InferenceRouting,
    PickerSettings,
    RoutedModel,
    RoutingSpec,
    picker_selector,
)
from llm_serving.scaling import AutoscalingSpec, ModelAutoscaling, ScalingTarget
from llm_serving.serving import (
    PORT,
    WORKER_COMPONENT,
    CompileCacheKey,
    EngineSettings,
    LeaderWorkerSetController,
    LeaderWorkerSetControllerArgs,
    ModelWeights,
    ModelWeightsArgs,
    ProducerTimeouts,
    VllmDeployment,
    VllmDeploymentArgs,
    container_security_context,
    prepull_daemonset,
    prepull_network_policy,
    producer_network_policy,
    producer_timeouts,
    staging_claim_name,
    sync_configmap,
)
from llm_serving.storage import (
    ServingMount,
    WeightsBucket,
    WeightsBucketArgs,
    WeightsFileSystem,
    WeightsFileSystemArgs,
    WeightsLustre,
    WeightsLustreArgs,
    compile_cache_claim,
)
from llm_serving.verification import SELECTOR as VERIFY_POD_SELECTOR
from llm_serving.verification import Settings, VerificationJob, VerificationJobArgs
from llm_serving.verification import network_policy as verification_network_policy

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


@dataclass(frozen=True)
class ServedModel:
    """One model, as plain values; the stack adds namespace, selectors and secrets."""

    name: str
    model_id: str
    revision: str
    tokenizer_revision: str | None
    image: str
    replicas: int
    settings: EngineSettings
    startup_budget_seconds: int
    resources: dict
    chat_template: str | None
    storage_class: str
    access_mode: str
    size_gib: int
    zone: str | None  # ReadWriteOnce: the zone the volume, the Job and the replica share
    download_deadline_seconds: int
    scaling: ScalingTarget
    slo: ModelSlo
    cache_gib: int
    tmp_gib: int
    strategy: dict  # the Deployment strategy the rollout planner chose
    rollout_timeout_seconds: int
    delete_timeout_seconds: int  # the pods drain for the stream bound before a delete completes
    pre_start_seconds: int  # a new node plus an image pull, before a surge pod's container starts
    extra_env: tuple[dict, ...] = ()
    efa_interfaces: int = 0  # multi-node groups: each rank requests its node's EFA interfaces
    # Zones where the weights file system has a mount target (EFS): the staging Job, which may land on
    # any CPU node, must land in one of them or its mount waits out the Job's deadline. () : anywhere.
    stage_zones: tuple[str, ...] = ()
    # S3 backend: the revision's (and the tokenizer's) prefix in the bucket, and the service accounts
    # Pod Identity maps to the staging Job's write role and the pods' read-only role (storage.BucketAccess).
    s3_prefix: str | None = None
    s3_tokenizer_prefix: str | None = None
    stage_service_account: str | None = None
    serving_service_account: str | None = None
    region: pulumi.Input[str] | None = None  # S3: the bucket's region, for the Job's and the streamer's clients
    # The shared compile cache's key (llm_serving/serving/compile_cache.py); None: every pod compiles.
    compile_cache: CompileCacheKey | None = None
    # The producer Job's deadline, lock and await (llm_serving/serving/timing.py producer_timeouts).
    compile_timeouts: ProducerTimeouts = producer_timeouts(0, 3600)
    # S3: the producer's service account, which Pod Identity maps to the role writing the cache's prefix.
    compile_cache_service_account: str | None = None


@dataclass(frozen=True)
class ModelVerification:
    """One model's deploy gate: what its Job checks, and whether a failure fails the up."""

    model_name: str
    settings: Settings
    mode: str  # "gate" | "report"
    deadline_seconds: int


@dataclass(frozen=True)
class StackSpec:
    node_group_name: str
    node_group: NodeGroupSpec
    # How long a replaced node group's deletion waits for its last pods' drain: the longest vLLM
    # terminationGracePeriodSeconds (llm_serving/stack/timing.py, node_drain_wait_seconds).
    node_drain_wait_seconds: int
    cluster_autoscaler: ClusterAutoscalerArgs | None  # None: an existing autoscaler, or none
    install_node_monitoring_agent: bool  # the auto-repair agent add-on (False: the cluster has it, or no repair)
    weights_storage: WeightsFileSystemArgs | None  # EFS; None: FSx or an existing StorageClass
    weights_lustre: WeightsLustreArgs | None  # FSx for Lustre: one claim every model shares
    weights_bucket: WeightsBucketArgs | None  # S3: the bucket, its roles and Pod Identity associations
    device_plugin: NvidiaDevicePluginArgs
    dcgm_exporter: DcgmExporterArgs
    prometheus: PrometheusStackArgs | None  # None: use the cluster's existing Prometheus Operator
    prometheus_url: str | None
    serving_namespace: str
    models: tuple[ServedModel, ...]
    api_key: pulumi.Input[str]  # vLLM's own key, checked in every auth mode
    hf_token: pulumi.Input[str] | None
    protect_weights: bool
    edge: EdgeSpec
    autoscaling: AutoscalingSpec
    prometheus_namespace: str
    monitor_labels: dict[str, str]
    # The labels of the Prometheus pods that scrape vLLM (the only pods besides the edge's proxies and
    # the pickers that the NetworkPolicy admits); the Prometheus Operator's own by default.
    prometheus_pod_selector: dict[str, str]
    runbook_base_url: str
    # Models routed through an InferencePool, with their pickers' settings; None: every route uses its Service.
    # (model name, picker drain seconds, picker delete timeout seconds, priority, overload admission)
    routed_models: tuple[tuple[str, int, int, int | None, Admission], ...] = ()
    picker: PickerSettings | None = None
    # Multi-node models: the LeaderWorkerSet chart version (None: no model spans nodes).
    lws_chart_version: str | None = None
    # GPU nodes with EFA interfaces: the EFA device plugin chart version (None: no EFA).
    efa_device_plugin_chart_version: str | None = None
    # The staging Job's image, by digest (versions.STAGE_IMAGE@weightsStorage.stageImageDigest).
    stage_image: str = f"{versions.STAGE_IMAGE}@{versions.STAGE_IMAGE_DIGEST}"
    # The nodes the staging Jobs must run on (the only role the weights' file-system policy lets write).
    staging_node_selector: dict[str, str] | None = None
    # Per model, the verification Job run after it is Ready and routed (empty: verification off).
    verifications: tuple[ModelVerification, ...] = ()
    verify_image: str = ""
    # Pull these vLLM images on every GPU node before a replica needs them (prepull.py); (): no pre-pull.
    prepull_images: tuple[str, ...] = ()


class ServingStack(pulumi.ComponentResource):
    """Everything one environment of llm-serving creates."""

    gpu_node_group: GpuNodeGroup
    prometheus_url: pulumi.Output[str]

    def __init__(self, name: str, args: StackSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:stack:ServingStack", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.gpu_node_group = GpuNodeGroup(args.node_group_name, args.node_group, child)
        if args.cluster_autoscaler is not None:
            ClusterAutoscaler("cluster-autoscaler", args.cluster_autoscaler, child)
        if args.install_node_monitoring_agent:
            node_monitoring_agent(
                "node-monitoring-agent", args.node_group.cluster_name, args.node_group.kubernetes_version,
                args.node_group.tags,
                pulumi.ResourceOptions(parent=self, depends_on=[self.gpu_node_group]),
            )
        prometheus = None
        if args.prometheus is not None:
            prometheus = PrometheusStack("prometheus", args.prometheus, child)
        NvidiaDevicePlugin("nvidia-device-plugin", args.device_plugin, child)
        self._group_prerequisites: list[pulumi.Resource] = []
        if args.efa_device_plugin_chart_version is not None:
            self._group_prerequisites.append(EfaDevicePlugin(
                "efa-device-plugin", EfaDevicePluginArgs(args.efa_device_plugin_chart_version), child))
        if args.lws_chart_version is not None:
            self._group_prerequisites.append(LeaderWorkerSetController(
                "leaderworkerset", LeaderWorkerSetControllerArgs(args.lws_chart_version), child))
        DcgmExporter(
            "dcgm-exporter",
            args.dcgm_exporter,
            child,
            crds_from=[prometheus.release] if prometheus else None,
        )
        self.endpoints = self._models(args, child)
        crds = [prometheus.release] if prometheus else []
        ServingObservability(
            "serving-observability",
            ServingObservabilityArgs(
                serving_namespace=args.serving_namespace,
                prometheus_namespace=args.prometheus_namespace,
                pod_selector=VLLM_POD_SELECTOR,
                port_name="http",
                monitor_labels=args.monitor_labels,
                runbook_base_url=args.runbook_base_url,
                models=tuple(m.slo for m in args.models),
                gpu_metric_names=exported_metric_names(),
            ),
            child,
            crds_from=crds,
        )
        ModelAutoscaling("autoscaling", args.autoscaling, child, workloads=self._deployments)
        edge = Edge("edge", args.edge, child)
        edge.add_monitoring(dict(args.monitor_labels), args.runbook_base_url, crds)
        if args.routed_models and args.picker is not None:
            ttft_objectives = {m.slo.deployment_name: m.slo.ttft_p95_seconds for m in args.models}
            # After the edge: it installs the InferencePool CRD and the gateway extension that calls the pickers.
            routing = InferenceRouting(
                "inference-routing",
                RoutingSpec(
                    namespace=args.serving_namespace,
                    edge_namespace=args.edge.settings.namespace,
                    prometheus_namespace=args.prometheus_namespace,
                    vllm_selector=VLLM_POD_SELECTOR,
                    vllm_port=PORT,
                    models=tuple(
                        RoutedModel(
                            name=name,
                            namespace=args.serving_namespace,
                            # The Deployment's own pod selector: the pool picks exactly its replicas.
                            pod_selector=self._pod_selectors[name],
                            port=PORT,
                            drain_seconds=drain,
                            delete_timeout_seconds=delete,
                            priority=priority,
                            admission=admission,
                            # The edge's TTFT alerts hold the model to its own objective.
                            ttft_objective_seconds=ttft_objectives[name],
                        )
                        for name, drain, delete, priority, admission in args.routed_models
                    ),
                    picker=args.picker,
                    runbook_base_url=args.runbook_base_url,
                    monitor_labels=dict(args.monitor_labels),
                    objective_crds_file=versions.LLM_D_ROUTER_CRDS_FILE,
                    protect_crds=args.edge.protect_crds,
                    edge_pod_selector=edge_pod_selector(args.edge.mode, args.edge.settings),
                    prometheus_pod_selector=args.prometheus_pod_selector,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[*edge.inference_prerequisites, *crds]),
            )
            edge.publish_pool_routes([routing])
        # Last: each model's Job waits for its workload and for the edge with every route it publishes.
        self._verify(args, [edge])
        self.prometheus_url = (
            prometheus.url if prometheus else pulumi.Output.from_input(args.prometheus_url or "")
        )
        self.register_outputs(
            {
                "gpu_node_selector": self.gpu_node_group.node_selector,
                "gpu_tolerations": self.gpu_node_group.tolerations,
                "gpus_per_node": self.gpu_node_group.gpus_per_node,
                "max_gpus": self.gpu_node_group.max_gpus,
                "prometheus_url": self.prometheus_url,
                "endpoints": self.endpoints,
            }
        )

    def _models(self, args: StackSpec, child: pulumi.ResourceOptions) -> dict[str, pulumi.Output[str]]:
        """Serving namespace, its secrets, and per model the weights and the deployment."""
        # Only our own pods run here, all under the restricted profile.
        ns = namespace("serving-namespace", args.serving_namespace, parent=self, pod_security=RESTRICTED)
        api_key = k8s.core.v1.Secret(
            "vllm-api-key",
            metadata={"name": API_KEY_SECRET, "namespace": ns.metadata.name},
            type="Opaque",
            string_data={"api-key": pulumi.Output.secret(args.api_key)},
            opts=child,
        )
        hf_token_secret = None
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
        api_key_revision = pulumi.Output.secret(args.api_key).apply(credential_revision)
        hf_token_revision = (
            pulumi.Output.secret(args.hf_token).apply(credential_revision) if args.hf_token is not None else None
        )
        # The fences go up before anything runs in the namespace: the staging Job holds the HF token.
        after_namespace = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        generation = self.gpu_node_group.replaced_generation
        if generation is not None:
            # A node update replaces the group: the old generation's barrier is deleted before the old
            # group and holds it until the last replaced vLLM pod has drained (llm_serving/gpu/drain.py).
            NodeDrainBarrier(drain_barrier_name(generation), NodeDrainBarrierArgs(
                generation=generation, namespace=ns.metadata.name, wait_seconds=args.node_drain_wait_seconds,
                image=args.stage_image, container_security=container_security_context(),
                node_group=self.gpu_node_group.node_group,
            ), after_namespace)
        fences = [
            manifest_resource(f"serving-netpol-{policy['metadata']['name']}", policy, after_namespace)
            for policy in network_policies(
                serving_namespace=args.serving_namespace,
                model_selector=VLLM_POD_SELECTOR,
                port=PORT,
                edge_namespace=args.edge.settings.namespace,
                edge_pod_selector=edge_pod_selector(args.edge.mode, args.edge.settings),
                prometheus_namespace=args.prometheus_namespace,
                prometheus_pod_selector=args.prometheus_pod_selector,
                staging_job_selector=STAGING_POD_SELECTOR,
                load_balancer_cidrs=args.edge.load_balancer_cidrs,
                picker_selector=picker_selector() if args.routed_models else None,
                verification_selector=VERIFY_POD_SELECTOR if args.verifications else None,
                weights_from_s3=args.weights_bucket is not None,
                # The headless ranks of multi-node groups stream from the bucket as well.
                worker_selector={"app.kubernetes.io/component": WORKER_COMPONENT}
                if any(m.settings.pipeline_parallel_size > 1 for m in args.models) else None,
            )
        ]
        if args.verifications:
            fences.append(manifest_resource("serving-netpol-verification", verification_network_policy(
                namespace=args.serving_namespace, edge_namespace=args.edge.settings.namespace,
                model_selector=VLLM_POD_SELECTOR, port=PORT), after_namespace))
        self._fences = fences
        self._api_key_secret = api_key
        endpoints: dict[str, pulumi.Output[str]] = {}
        self._deployments: list[pulumi.Resource] = []
        self._pod_selectors: dict[str, dict[str, str]] = {}
        self._workloads: dict[str, pulumi.Resource] = {}
        storage_class: pulumi.Output[str] | None = None
        serving_claims: dict[str, pulumi.Output[str]] = {}
        cache_claim: list[pulumi.Resource] = []
        if args.weights_storage is not None:
            # Claims name the class through its output, so they wait for the file system to be mountable.
            # The GPU nodes (the serving identity) read through access points of their own; NFS comes
            # from their own security group, never the cluster's.
            efs = dataclasses.replace(
                args.weights_storage,
                reader_role_arns=(self.gpu_node_group.node_role_arn,),
                nfs_client_security_groups=(("gpu-nodes", self.gpu_node_group.security_group_id),
                                            *args.weights_storage.nfs_client_security_groups),
                serving_mounts=tuple(
                    ServingMount(key=m.name, namespace=args.serving_namespace,
                                 staging_claim_name=staging_claim_name(m.name), claim_name=f"{m.name}-weights-ro",
                                 volume_name=f"{args.serving_namespace}-{m.name}-weights-ro")
                    for m in args.models),
                serving_namespace=ns.metadata.name,
            )
            file_system = WeightsFileSystem("weights-storage", efs, child)
            storage_class = file_system.storage_class_name
            serving_claims = file_system.serving_claim_names
            if file_system.compile_cache_volume_name is not None:
                claim = file_system.compile_cache_volume_name.apply(
                    lambda volume: compile_cache_claim(args.serving_namespace, volume))
                cache_claim.append(k8s.core.v1.PersistentVolumeClaim(
                    "compile-cache-claim", metadata=claim["metadata"], spec=claim["spec"],
                    # Retained like the weights: a compile is minutes of GPU time per key.
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[ns], retain_on_delete=True)))
        shared_claim: pulumi.Output[str] | None = None
        if args.weights_lustre is not None:
            # The shared claim lives in the serving namespace, behind the same fences as the Jobs.
            shared_claim = WeightsLustre(
                "weights-storage", args.weights_lustre, pulumi.ResourceOptions(parent=self, depends_on=[ns])
            ).claim_name
        bucket: WeightsBucket | None = None
        if args.weights_bucket is not None:
            bucket = WeightsBucket("weights-storage", args.weights_bucket, child)
        # Through the node group's name, so a Deployment waits for its node group: after a node
        # update the pods roll only once the new generation's group exists.
        node_selector = pulumi.Output.all(
            self.gpu_node_group.node_group_name, self.gpu_node_group.node_selector
        ).apply(lambda values: values[1])
        if args.prepull_images:
            # On the GPU nodes the Deployments select (through the node group's name, so a new generation
            # of nodes pulls as soon as it exists), restricted like every pod in the namespace.
            prepull = prepull_daemonset(namespace=args.serving_namespace, images=list(args.prepull_images),
                                        node_selector=node_selector,  # type: ignore[arg-type]
                                        tolerations=self.gpu_node_group.tolerations)  # type: ignore[arg-type]
            k8s.apps.v1.DaemonSet("image-prepull", metadata=prepull["metadata"], spec=prepull["spec"],
                                  opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
            fence = prepull_network_policy(args.serving_namespace)
            k8s.networking.v1.NetworkPolicy("image-prepull-network-policy", metadata=fence["metadata"],
                                            spec=fence["spec"],
                                            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        producer_fence: list[pulumi.Resource] = []
        if any(model.compile_cache is not None for model in args.models):
            # The producer Jobs wait for it (their `after`): a producer pod never runs unfenced. On S3 the
            # producers stream the weights and upload the cache like the serving pods reach the bucket.
            fence = producer_network_policy(args.serving_namespace,
                                            object_storage_egress() if bucket is not None else None)
            producer_fence.append(k8s.networking.v1.NetworkPolicy(
                "compile-cache-network-policy", metadata=fence["metadata"], spec=fence["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns])))
            if bucket is not None:
                # The seed and the producer run cache_sync.py from it; the pods wait for it like the fence.
                sync = sync_configmap(args.serving_namespace)
                producer_fence.append(k8s.core.v1.ConfigMap(
                    "compile-cache-sync", metadata=sync["metadata"], data=sync["data"], immutable=True,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[ns])))
        for model in args.models:
            weights = ModelWeights(
                f"{model.name}-weights",
                ModelWeightsArgs(
                    namespace=ns.metadata.name,
                    model_name=model.name,
                    model_id=model.model_id,
                    revision=model.revision,
                    tokenizer_revision=model.tokenizer_revision,
                    stage_image=args.stage_image,
                    storage_class=storage_class if storage_class is not None else model.storage_class,
                    shared_claim=shared_claim,
                    zone=model.zone,
                    stage_zones=model.stage_zones,
                    access_mode=model.access_mode,
                    size_gib=model.size_gib,
                    download_deadline_seconds=model.download_deadline_seconds,
                    hf_token_secret=hf_token_secret,
                    pod_annotations=(
                        {HF_TOKEN_REVISION_ANNOTATION: hf_token_revision} if hf_token_revision is not None else {}
                    ),
                    node_selector=args.staging_node_selector,
                    protect=args.protect_weights,
                    after=tuple(fences) + ((bucket.associations[f"{model.name}-stage"],) if bucket else ()),
                    bucket=bucket.bucket_name if bucket else None,
                    s3_prefix=model.s3_prefix,
                    s3_tokenizer_prefix=model.s3_tokenizer_prefix,
                    service_account=model.stage_service_account,
                    region=model.region,
                ),
                child,
            )
            settings = model.settings
            serving_after: tuple[pulumi.Resource, ...] = ()
            if bucket is not None and model.serving_service_account:
                # The pods read as their own account, which Pod Identity maps to the prefix's read-only role.
                serving_after = (bucket.associations[f"{model.name}-read"], k8s.core.v1.ServiceAccount(
                    f"{model.name}-serving-account",
                    metadata={"name": model.serving_service_account, "namespace": ns.metadata.name,
                              "labels": {"app.kubernetes.io/name": model.name}},
                    automount_service_account_token=False, opts=after_namespace))
                settings = dataclasses.replace(settings, model_path=weights.model_path, tokenizer_path=(
                    pulumi.Output.concat("s3://", bucket.bucket_name, "/", model.s3_tokenizer_prefix)
                    if model.s3_tokenizer_prefix else None))
                if model.compile_cache is not None and model.compile_cache_service_account:
                    # The producer Job uploads as its own account, mapped to the role that writes only the
                    # cache's prefix; the Job waits for the association (the Deployment's `after`).
                    serving_after += (bucket.associations[f"{model.name}-compile"], k8s.core.v1.ServiceAccount(
                        f"{model.name}-compile-cache-account",
                        metadata={"name": model.compile_cache_service_account, "namespace": ns.metadata.name,
                                  "labels": {"app.kubernetes.io/name": model.name}},
                        automount_service_account_token=False, opts=after_namespace))
            deployment = VllmDeployment(
                model.name,
                VllmDeploymentArgs(
                    namespace=ns.metadata.name,
                    model_name=model.name,
                    image=model.image,
                    replicas=model.replicas,
                    settings=settings,
                    startup_budget_seconds=model.startup_budget_seconds,
                    resources=model.resources,
                    node_selector=node_selector,
                    tolerations=self.gpu_node_group.tolerations,
                    # S3: no volume (the streamer reads the bucket). EFS: the model's read-only claim
                    # through its own access point; otherwise the claim the Job staged into, mounted read-only.
                    claim_name=None if bucket is not None else serving_claims.get(model.name, weights.claim_name),
                    service_account=model.serving_service_account if bucket is not None else None,
                    api_key_secret=API_KEY_SECRET,
                    extra_env=model.extra_env,
                    strategy=model.strategy,
                    rollout_timeout_seconds=model.rollout_timeout_seconds,
                    delete_timeout_seconds=model.delete_timeout_seconds,
                    pre_start_seconds=model.pre_start_seconds,
                    pod_annotations={SAFE_TO_EVICT_ANNOTATION: "false", API_KEY_REVISION_ANNOTATION: api_key_revision},
                    zone=model.zone,
                    efa_interfaces=model.efa_interfaces,
                    cache_gib=model.cache_gib,
                    tmp_gib=model.tmp_gib,
                    chat_template=model.chat_template,
                    compile_cache=model.compile_cache,
                    compile_timeouts=model.compile_timeouts,
                    compile_cache_bucket=bucket.bucket_name if bucket is not None else None,
                    compile_cache_service_account=model.compile_cache_service_account if bucket is not None else None,
                    # Serving starts only once its revision is fully staged (and a group once its
                    # operator and the EFA device plugin run).
                    after=(weights.job, api_key, *serving_after,
                           *((*cache_claim, *producer_fence) if model.compile_cache is not None else ()),
                           *(self._group_prerequisites if model.settings.pipeline_parallel_size > 1 else ())),
                ),
                child,
            )
            self._deployments.append(deployment.deployment)
            self._workloads[model.name] = deployment.deployment
            self._pod_selectors[model.name] = deployment.pod_selector
            endpoints[model.name] = pulumi.Output.concat(
                "http://", deployment.service_name, ".", args.serving_namespace, ".svc:", str(PORT)
            )
        return endpoints

    def _verify(self, args: StackSpec, routes: list[pulumi.Resource]) -> None:
        models = {m.name: m for m in args.models}
        for check in args.verifications:
            model = models[check.model_name]
            VerificationJob(
                f"{check.model_name}-verify",
                VerificationJobArgs(
                    namespace=args.serving_namespace,
                    model_name=check.model_name,
                    settings=check.settings,
                    mode=check.mode,
                    image=args.verify_image,
                    api_key_secret=API_KEY_SECRET,
                    deadline_seconds=check.deadline_seconds,
                    # Image, revision, engine flags and replicas: a deploy that changes them is verified again.
                    deployed=repr((model.image, model.revision, model.tokenizer_revision, model.settings,
                                   model.replicas, model.chat_template)),
                    after=(self._workloads[check.model_name], *routes, self._api_key_secret, *self._fences),
                ),
                pulumi.ResourceOptions(parent=self),
            )
