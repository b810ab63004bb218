"""What the program will ask of the account and the cluster, read from the validated config and the
program's own builders (planners, add-on configuration, staging patterns), never retyped here.

Every check compares the real account with one of these facts; tests/stacks/preflight checks that
they agree with the offline render of each stack.

Length: one record per fact the checks compare (cluster, node group, add-ons, edge, weights, Hub sources, LoRA
adapters), each derived here from the config in one place; split, the derivations would repeat the config walk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llm_serving import cluster as created_cluster
from llm_serving import edge as edge_package
from llm_serving import gpu, scaling, serving, storage
from llm_serving.platform import versions
from llm_serving.stack import planning, revisions, timing
from stacks.config import (
    AutoscalingMode,
    CapacityType,
    ClusterMode,
    ControllerMode,
    EdgeMode,
    InstallMode,
    NodeAutoscalingMode,
    PrometheusMode,
    ServingStackArgs,
    StorageBackend,
)

POD_IDENTITY_AGENT = "eks-pod-identity-agent"
VPC_CNI = "vpc-cni"


@dataclass(frozen=True)
class AddonInstall:
    """An EKS add-on the program creates."""

    name: str
    configuration: dict[str, Any] | None  # the `configurationValues` it sends, as a document
    switch: str  # the config key that makes the program leave the add-on alone
    helm_twin: str  # the same software as a Helm chart: a conflicting install too
    # The version the program pins (a created cluster's add-ons); None: EKS's default, or the installed one.
    version: str | None = None


@dataclass(frozen=True)
class ChartInstall:
    """A Helm release the program creates (named after its chart)."""

    chart: str
    namespace: str
    switch: str  # what adopts or skips it, or why nothing does
    rivals: tuple[str, ...] = ()  # other charts doing the same job (Karpenter for Cluster Autoscaler)


@dataclass(frozen=True)
class ModelSource:
    """One Hub download of the staging Job: a repository at a revision, through its patterns."""

    model: str
    model_id: str
    revision: str
    allow: tuple[str, ...]
    ignore: tuple[str, ...]
    key: str  # config key of the revision
    needs_weights: bool  # the model's download (safetensors expected), not the tokenizer's


@dataclass(frozen=True)
class EvalSource:
    """One data file of a model's eval task (models[].eval.tasks[].files[]): a dataset repository at a commit, and the
    SHA-256 the staging Job will hold the file to."""

    model: str
    task: str
    dataset: str
    revision: str
    path: str
    sha256: str
    key: str  # config key of the task


@dataclass(frozen=True)
class AdapterSource:
    """One LoRA adapter of a model: a Hub repository at a commit, or an S3 prefix (`s3_uri`), whose
    adapter_config.json must name the model's `base_model_id` and a rank at most `max_lora_rank`."""

    model: str
    adapter: str
    base_model_id: str
    max_lora_rank: int
    key: str  # config key of the adapter
    repo_id: str | None = None
    revision: str | None = None
    s3_uri: str | None = None


@dataclass(frozen=True)
class ExistingGateway:
    """The cluster's Gateway the stack attaches its routes to (edge.gateway)."""

    namespace: str
    name: str
    listener: str  # the HTTPS listener the routes attach to
    replaces_policies: bool  # edge.gateway.replacesGatewayPolicies
    proxy_selector: dict[str, str]  # the labels the vLLM pods' NetworkPolicy admits the Gateway's proxies by


@dataclass(frozen=True)
class Reference:
    """An IAM role ARN or a security-group id the stack file names, which the program hands to AWS as is."""

    key: str  # its config key, e.g. weightsStorage.efs.stagingNodeSecurityGroupIds[0]
    value: str
    # A node's role: EC2 attaches a role of the instance's own account only (an instance profile holds a role of its
    # account), so a role of another account than the cluster's can never be the nodes'.
    node_role: bool = False


@dataclass(frozen=True)
class Intent:
    stack: str
    region: str
    cluster_name: str
    kubernetes_version: str
    subnets: tuple[tuple[str | None, str], ...]  # (subnet id, zone) as configured (no id: cluster mode create)
    tags: dict[str, str]
    addons: tuple[AddonInstall, ...]
    pod_identity_users: tuple[str, ...]  # what needs the Pod Identity agent, named for the reason
    charts: tuple[ChartInstall, ...]
    instance_type: str
    vcpus_per_node: int
    capacity_type: CapacityType
    capacity_reservation_id: str | None
    bound_nodes: int  # maxNodes with a node autoscaler, else desiredNodes
    desired_nodes: int
    peak_nodes: int
    peak_reason: str
    update_seconds: int  # the longest planned operation (a node-group update), for reservation ends
    prometheus_existing: bool
    prometheus_namespace: str
    alb_controller_existing: bool
    cert_manager_issuer: str | None
    tls_secret: str | None
    edge_namespace: str
    serving_namespace: str
    model_services: tuple[str, ...]
    sources: tuple[ModelSource, ...]
    hf_token_in_stack: bool
    adapters: tuple[AdapterSource, ...] = ()  # every model's LoRA adapters (models[].lora.adapters)
    eval_files: tuple[EvalSource, ...] = ()  # every model's eval task files (models[].eval.tasks[].files)
    creates_cluster: bool = False  # cluster.mode create: the program builds the VPC, its S3 endpoint, the agent
    s3_weights: bool = False  # weightsStorage.backend s3: every cold start streams from S3
    s3_bucket: str | None = None  # an existing bucket the stack stages into (None: the program creates one)
    s3_cold_start_gb: float = 0.0  # the largest checkpoint one cold start streams, in GB
    # The pods that stream from the bucket may reach only S3's prefix list on 443 (weightsStorage.s3.vpcEndpoint).
    s3_prefix_list_egress: bool = False
    # gpuNodeGroup.mode existing: the labels that choose the nodes (else the stack creates its group).
    gpu_node_selector: dict[str, str] | None = None
    gpus_per_pod: int = 1  # the most GPUs one serving pod asks for: a node must advertise as many
    device_plugin_existing: bool = False  # addons.nvidiaDevicePlugin.mode existing
    existing_gateway: ExistingGateway | None = None
    route_hosts: tuple[str, ...] = ()  # the hostnames the models' routes carry
    serving_namespace_labels: dict[str, str] | None = None  # what the stack labels its serving namespace with
    existing_autoscaler: AutoscalingMode | None = None  # autoscaling.controller existing: KEDA or the adapter
    adapter_metrics: tuple[str, ...] = ()  # the per-pod metrics each model's HPA reads (prometheus-adapter)
    # A created GPU group's pinned AMI release (gpuNodeGroup.amiReleaseVersion) and its AMI type; None: none pinned
    # (EKS takes the newest) or the cluster's own nodes.
    ami_release: str | None = None
    ami_type: str = gpu.AmiType.AL2023_X86_64_NVIDIA.value
    # The S3 staging Job's ephemeral-storage request (GiB); None: no such Job (weights not on S3).
    staging_ephemeral_gib: int | None = None
    created_cpu_root_gib: int | None = None  # cluster.mode create: the root volume the program gives its CPU nodes
    role_references: tuple[Reference, ...] = ()  # the IAM roles the stack file names and the program uses
    security_group_references: tuple[Reference, ...] = ()  # likewise, its security groups


def _addons(config: ServingStackArgs) -> tuple[AddonInstall, ...]:
    found: list[AddonInstall] = []
    if config.cluster.mode is ClusterMode.CREATE:
        # A created cluster's add-ons at their pins, vpc-cni with the configuration it is created with.
        found.extend(AddonInstall(spec.name, spec.configuration, "cluster.mode: existing", spec.name, spec.version)
                     for spec in created_cluster.addon_plan(config.cluster.kubernetes_version))
    repair = config.gpu_node_group.auto_repair
    if planning.creates_nodes(config) and repair.enabled and repair.install_monitoring_agent:
        found.append(AddonInstall(gpu.MONITORING_AGENT_ADDON, gpu.monitoring_agent_configuration(),
                                  "gpuNodeGroup.autoRepair.installMonitoringAgent: false",
                                  gpu.MONITORING_AGENT_ADDON))
    backend = config.weights_storage.backend
    if backend is StorageBackend.EFS and config.weights_storage.efs.install_csi_driver:
        found.append(AddonInstall(storage.CSI_ADDON, None, "weightsStorage.efs.installCsiDriver: false",
                                  storage.CSI_ADDON))
    if backend is StorageBackend.FSX_LUSTRE and config.weights_storage.fsx_lustre.install_csi_driver:
        found.append(AddonInstall(storage.FSX_CSI_ADDON, None, "weightsStorage.fsxLustre.installCsiDriver: false",
                                  storage.FSX_CSI_ADDON))
    return tuple(found)


def _pod_identity_users(config: ServingStackArgs) -> tuple[str, ...]:
    """Pod Identity associations the program creates: the EFS CSI add-on's, Cluster Autoscaler's, the load
    balancer controller's and, on S3, the staging Jobs' and serving pods' weights roles."""
    users = []
    if config.weights_storage.backend is StorageBackend.EFS and config.weights_storage.efs.install_csi_driver:
        users.append(f"the {storage.CSI_ADDON} add-on")
    if config.node_autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER:
        users.append("cluster-autoscaler")
    if planning.installs_load_balancer_controller(config):
        users.append("aws-load-balancer-controller")
    if config.weights_storage.backend is StorageBackend.S3:
        users.append("the S3 weights roles (staging Jobs, serving pods)")
    if any(a.s3 is not None for m in config.models if m.lora is not None for a in m.lora.adapters):
        users.append("the staging Jobs' LoRA adapter roles (S3)")
    return tuple(users)


def _role_references(config: ServingStackArgs) -> tuple[Reference, ...]:
    """The role ARNs the program uses as the stack file spells them (each only where its key is read)."""
    found = []
    efs = config.weights_storage.backend is StorageBackend.EFS
    staging = config.weights_storage.efs.staging_node_role_arn
    if efs and staging is not None:
        found.append(Reference("weightsStorage.efs.stagingNodeRoleArn", staging, node_role=True))
    existing = config.gpu_node_group.existing
    if efs and not planning.creates_nodes(config) and existing is not None and existing.node_role_arn is not None:
        found.append(Reference("gpuNodeGroup.existing.nodeRoleArn", existing.node_role_arn, node_role=True))
    if config.edge.alb_controller_role_arn is not None:
        found.append(Reference("edge.albControllerRoleArn", config.edge.alb_controller_role_arn))
    create = config.cluster.create
    if config.cluster.mode is ClusterMode.CREATE and create is not None:
        found.extend(Reference(f"cluster.create.adminRoleArns[{n}]", arn)
                     for n, arn in enumerate(create.admin_role_arns))
    return tuple(found)


def _security_group_references(config: ServingStackArgs) -> tuple[Reference, ...]:
    if config.weights_storage.backend is not StorageBackend.EFS:
        return ()
    found = [Reference(f"weightsStorage.efs.stagingNodeSecurityGroupIds[{n}]", group)
             for n, group in enumerate(config.weights_storage.efs.staging_node_security_group_ids)]
    existing = config.gpu_node_group.existing
    if not planning.creates_nodes(config) and existing is not None and existing.security_group_id is not None:
        found.append(Reference("gpuNodeGroup.existing.securityGroupId", existing.security_group_id))
    return tuple(found)


def _largest_checkpoint_gb(config: ServingStackArgs) -> float:
    sizes = [a.weight_bytes / 1e9 for a in map(planning.model_architecture, config.models) if a is not None]
    return max(sizes, default=0.0)


def _charts(config: ServingStackArgs) -> tuple[ChartInstall, ...]:
    # A second device plugin advertises the same GPUs twice, a second DCGM exporter doubles every GPU
    # series; the NVIDIA GPU Operator brings both.
    found = []
    if config.addons.nvidia_device_plugin.mode is InstallMode.INSTALL:
        found.append(ChartInstall(versions.NVIDIA_DEVICE_PLUGIN.chart, config.addons.nvidia_device_plugin.namespace,
                                  "addons.nvidiaDevicePlugin.mode: existing", rivals=("gpu-operator",)))
    if config.addons.dcgm_exporter.mode is InstallMode.INSTALL:
        found.append(ChartInstall(versions.DCGM_EXPORTER.chart, config.addons.dcgm_exporter.namespace,
                                  "addons.dcgmExporter.mode: existing", rivals=("gpu-operator",)))
    if planning.creates_nodes(config) and config.node_autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER:
        found.append(ChartInstall(versions.CLUSTER_AUTOSCALER.chart, gpu.CLUSTER_AUTOSCALER_NAMESPACE,
                                  "nodeAutoscaling.mode: existing", rivals=("karpenter",)))
    if config.autoscaling.controller is InstallMode.EXISTING:
        pass
    elif config.autoscaling.mode is AutoscalingMode.KEDA:
        found.append(ChartInstall(versions.KEDA.chart, config.autoscaling.namespace,
                                  "autoscaling.controller: existing (KEDA is one per cluster)"))
    else:
        found.append(ChartInstall(versions.PROMETHEUS_ADAPTER.chart, config.autoscaling.namespace,
                                  "autoscaling.controller: existing"))
    edge = config.edge
    if edge.controller is ControllerMode.INSTALL and edge.mode is EdgeMode.GATEWAY and edge.gateway is None:
        found.append(ChartInstall(versions.ENVOY_GATEWAY.chart, planning.edge_namespace(config),
                                  "edge.controller: existing"))
    if planning.installs_load_balancer_controller(config):
        found.append(ChartInstall(versions.AWS_LOAD_BALANCER_CONTROLLER.chart, edge_package.LOAD_BALANCER_NAMESPACE,
                                  "cluster.loadBalancerController: existing"))
    elif edge.controller is ControllerMode.INSTALL and edge.mode is EdgeMode.ALB:
        found.append(ChartInstall(versions.AWS_LOAD_BALANCER_CONTROLLER.chart, planning.edge_namespace(config),
                                  "edge.controller: existing"))
    prometheus = config.observability.prometheus
    if prometheus.mode is PrometheusMode.INSTALL:
        found.append(ChartInstall(versions.KUBE_PROMETHEUS_STACK.chart, prometheus.namespace,
                                  "observability.prometheus.mode: existing"))
    return tuple(found)


def _sources(config: ServingStackArgs) -> tuple[ModelSource, ...]:
    found = []
    for model in config.models:
        first = revisions.revision_model_of(model)
        # A second revision's revision is its own key in the stack file.
        key = (f"models[{model.name}]" if first is None
               else f"models[{first}].revisions[{model.name.removeprefix(first + '-')}]")
        found.append(ModelSource(model.name, model.model_id, model.revision, serving.ALLOW_PATTERNS,
                                 serving.IGNORE_PATTERNS, f"{key}.revision", True))
        if model.tokenizer_revision and model.tokenizer_revision != model.revision:
            found.append(ModelSource(model.name, model.model_id, model.tokenizer_revision,
                                     serving.TOKENIZER_PATTERNS, (), f"{key}.tokenizerRevision", False))
    return tuple(found)


def _eval_files(config: ServingStackArgs) -> tuple[EvalSource, ...]:
    return tuple(EvalSource(m.name, t.name, t.dataset, t.revision, f.path, f.sha256,
                            f"models[{m.name}].eval.tasks[{t.name}]")
                 for m in config.models if m.eval is not None and revisions.revision_model_of(m) is None
                 for t in m.eval.tasks for f in t.files)


def _adapters(config: ServingStackArgs) -> tuple[AdapterSource, ...]:
    found = []
    for model in config.models:
        if model.lora is None:
            continue
        for adapter in model.lora.adapters:
            key = f"models[{model.name}].lora.adapters[{adapter.name}]"
            found.append(AdapterSource(
                model.name, adapter.name, model.model_id, model.lora.max_lora_rank, key,
                repo_id=adapter.model_id if adapter.s3 is None else None,
                revision=adapter.revision if adapter.s3 is None else None,
                s3_uri=adapter.s3.uri if adapter.s3 is not None else None))
    return tuple(found)


def _peak_nodes(config: ServingStackArgs) -> tuple[int, str, int]:
    """GPU nodes at the worst moment: the group at its bound while a node-group update runs a second
    group beside it (serving.node_update), and that update's planned duration."""
    supply = planning.supply(config)
    if not planning.creates_nodes(config):
        key, _ = planning.supply_key(config)
        return supply.nodes, f"{supply.nodes} node(s) ({key}), launched by the cluster's own provisioner", 0
    footprints = [planning.footprint(config, m, planning.model_plan(config, m)) for m in config.models]
    update = serving.node_update(footprints, planning.rollout_strategies(config), supply,
                                 planning.node_counts(config).desired_nodes, planning.timing(config),
                                 drain_wait_seconds=timing.node_drain_wait_seconds(config))
    bound = "maxNodes" if supply.autoscaled else "desiredNodes"
    reason = (f"{supply.nodes} node(s) ({bound}) plus {update.extra_nodes_at_peak} in the new group a "
              "node-group update creates beside the old one")
    return supply.nodes + update.extra_nodes_at_peak, reason, update.seconds


def intent(stack: str, region: str, config: ServingStackArgs) -> Intent:
    # Each model's second revision as the model it runs as (llm_serving/stack/revisions.py): its weights revision is
    # checked on the Hub and its GPUs counted at the peak.
    config = revisions.expanded(config)
    group = config.gpu_node_group
    instance = planning.resolve_instance_type(config)
    assert instance is not None  # validated by checks.check
    peak, peak_reason, update_seconds = _peak_nodes(config)
    edge = config.edge
    prometheus = config.observability.prometheus
    return Intent(
        stack=stack,
        region=region,
        cluster_name=config.cluster.name,
        kubernetes_version=config.cluster.kubernetes_version,
        subnets=tuple((s.id, s.availability_zone) for s in group.subnets),
        tags=planning.resource_tags(config),
        addons=_addons(config),
        pod_identity_users=_pod_identity_users(config),
        charts=_charts(config),
        instance_type=instance.name,
        vcpus_per_node=instance.vcpus,
        capacity_type=group.capacity_type,
        capacity_reservation_id=group.capacity_reservation_id,
        bound_nodes=planning.supply(config).nodes,
        desired_nodes=planning.node_counts(config).desired_nodes,
        peak_nodes=peak,
        peak_reason=peak_reason,
        update_seconds=update_seconds,
        prometheus_existing=prometheus.mode is PrometheusMode.EXISTING,
        prometheus_namespace=prometheus.namespace,
        # The edge's load balancer comes from a controller the cluster must run: alb mode's own, or
        # (gateway mode) the one that turns the Envoy Service into an NLB; an existing Gateway's load balancer
        # is its owner's.
        alb_controller_existing=not planning.installs_load_balancer_controller(config) and (
            (edge.mode is EdgeMode.GATEWAY and edge.gateway is None)
            or (edge.mode is EdgeMode.ALB and edge.controller is ControllerMode.EXISTING)),
        cert_manager_issuer=edge.tls.cert_manager_issuer,
        tls_secret=edge.tls.secret_name,
        edge_namespace=planning.edge_namespace(config),
        serving_namespace=config.serving.namespace,
        model_services=tuple(m.name for m in config.models),
        sources=_sources(config),
        adapters=_adapters(config),
        eval_files=_eval_files(config),
        hf_token_in_stack=config.hf_token is not None,
        creates_cluster=config.cluster.mode is ClusterMode.CREATE,
        s3_weights=config.weights_storage.backend is StorageBackend.S3,
        s3_bucket=config.weights_storage.s3.bucket_name if config.weights_storage.backend is StorageBackend.S3
        else None,
        s3_cold_start_gb=_largest_checkpoint_gb(config),
        s3_prefix_list_egress=planning.s3_through_gateway_endpoint(config),
        gpu_node_selector=None if planning.creates_nodes(config) else planning.existing_node_selector(config),
        gpus_per_pod=max(planning.model_plan(config, m).tensor_parallel_size for m in config.models),
        device_plugin_existing=config.addons.nvidia_device_plugin.mode is InstallMode.EXISTING,
        existing_gateway=ExistingGateway(
            edge.gateway.namespace, edge.gateway.name, edge.gateway.listener, edge.gateway.replaces_gateway_policies,
            edge_package.envoy_proxy_selector(edge.gateway.name, edge.gateway.namespace))
        if edge.gateway is not None else None,
        route_hosts=tuple(sorted({planning.route_host(config, m) for m in config.models})),
        serving_namespace_labels=planning.serving_namespace_labels(),
        existing_autoscaler=config.autoscaling.mode if config.autoscaling.controller is InstallMode.EXISTING
        else None,
        adapter_metrics=scaling.ADAPTER_METRICS,
        ami_release=group.ami_release_version if planning.creates_nodes(config) else None,
        ami_type=group.ami_type.value,
        staging_ephemeral_gib=serving.S3_STAGE_EPHEMERAL_GIB
        if config.weights_storage.backend is StorageBackend.S3 else None,
        created_cpu_root_gib=planning.system_root_volume_gib(config)
        if config.cluster.mode is ClusterMode.CREATE else None,
        role_references=_role_references(config),
        security_group_references=_security_group_references(config),
    )


INSTANCE_FAMILY = re.compile(r"^(?P<letters>[a-z]+)\d")


def instance_family_letter(instance_type: str) -> str:
    """`p5.48xlarge` -> `p`: EC2's vCPU quotas are per family letter group (P, G and VT, ...)."""
    match = INSTANCE_FAMILY.match(instance_type)
    return match["letters"] if match else instance_type
