"""The Pulumi program: read this stack's config from the engine, validate, build the stack.

`__main__.py` calls `run()`. Invalid config is logged one line per problem and stops the program
with a `RunError` (no traceback) before any resource is registered.

Length: the one place where validated config becomes every package's component args (GPU, storage,
serving, edge, scaling, observability); splitting it would scatter that mapping over several files.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.runtime import config as runtime_config

from llm_serving import cluster as created_cluster
from llm_serving import observability, serving, storage
from llm_serving.edge import (
    PROMETHEUS_POD_LABELS,
    EdgeSettings,
    EdgeSpec,
    LoadBalancerControllerArgs,
    Route,
    gateway_injects_upstream_key,
)
from llm_serving.gpu import (
    ClusterAutoscalerArgs,
    DcgmExporterArgs,
    InstanceType,
    NodeGroupSpec,
    NvidiaDevicePluginArgs,
    image_tag_for,
)
from llm_serving.observability import ModelSlo
from llm_serving.platform import (
    EksCluster,
    cluster_version,
    derived_upstream_key,
    kubernetes_provider,
    lookup_cluster,
    subnet_cidr,
    versions,
    vpc_cni_configuration,
)
from llm_serving.routing import OBJECTIVE_HEADER, PickerSettings
from llm_serving.scaling import AutoscalingSpec, ScalingTarget
from llm_serving.serving_stack import (
    ModelVerification,
    ServedModel,
    ServingStack,
    StackSpec,
)
from llm_serving.stack import planning, timing, verification
from llm_serving.stack.admission import model_admission, routed_admission
from llm_serving.stack.rules import cluster as cluster_checks
from llm_serving.stack.rules import platform as platform_checks
from stacks import environment
from stacks.config import (
    SECRET_KEYS,
    AccessMode,
    ClusterMode,
    ContainerStorage,
    ControllerMode,
    EdgeAuth,
    EdgeMode,
    Environment,
    ImagePrePull,
    ModelArgs,
    NetworkPolicyEnforcement,
    NodeAutoscalingMode,
    PlacementStrategy,
    PrometheusMode,
    RoutingMode,
    ServingStackArgs,
    StorageBackend,
    VerificationMode,
)
from stacks.config import files as stack_files
from stacks.config.problems import ConfigError

# Where base stack files (`extends`) are read from: the project directory in a real run; the
# offline renderer points it at the directory of the stack file it renders.
stack_dir: Path = stack_files.PROJECT_DIR


def engine_config() -> tuple[dict[str, Any], set[str]]:
    """This stack's own `llm-serving:` values and secret keys, as the Pulumi engine passed them."""
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_keys = set(runtime_config.get_config_secret_keys_env()) | set(
        runtime_config._SECRET_KEYS.get()  # noqa: SLF001 - the mock runtime sets secrets only here
    )
    values: dict[str, Any] = {}
    secrets: set[str] = set()
    for key, value in raw.items():
        namespace, _, name = key.rpartition(":")
        if namespace != stack_files.PROJECT:
            continue
        # Structured config arrives JSON-encoded (`require_object` decodes it the same way);
        # a secret is always a plain string, whatever it starts with.
        if isinstance(value, str) and value[:1] in ("{", "[") and name not in SECRET_KEYS:
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass  # left as text: the model reports it with its key path
        values[name] = value
        if key in secret_keys:
            secrets.add(name)
    return values, secrets


def load_config() -> ServingStackArgs:
    values, secrets = engine_config()
    try:
        _, config = environment.load_from_values(pulumi.get_stack(), values, secrets, stack_dir)
    except ConfigError as error:
        for problem in error.problems:
            pulumi.log.error(problem.line())
        raise pulumi.RunError(
            f"{len(error.problems)} configuration problem(s) in stack {pulumi.get_stack()}; "
            "nothing was created"
        ) from None
    return config


# A conservative sustained download rate from the Hugging Face Hub; the staging Job's deadline is
# twice the time the weights take at this rate, and never under 30 minutes.
HUB_DOWNLOAD_MIB_PER_SECOND = 50


# The GPU node group's subnets as (id, zone): the configured ids, or the created private subnets.
Subnets = list[tuple[pulumi.Input[str], str]]


def configured_subnets(config: ServingStackArgs) -> Subnets:
    return [(s.id, s.availability_zone) for s in config.gpu_node_group.subnets if s.id is not None]


def served_model(config: ServingStackArgs, model: ModelArgs, instance: InstanceType,
                 region: pulumi.Input[str] | None = None) -> ServedModel:
    """A model's plain values, with TP, the startup budget and the rollout from the planners."""
    plan = planning.model_plan(config, model)
    strategy = planning.rollout_strategies(config)[model.name]
    dynamics = planning.timing(config)
    drains = timing.model_drains(config, model)
    architecture = planning.model_architecture(model)
    assert architecture is not None  # guaranteed by checks.check
    tp = plan.tensor_parallel_size
    tokenizer_revision = model.tokenizer_revision if model.tokenizer_revision != model.revision else None
    image = f"{model.image.repository}:{model.image.tag}"
    if model.image.digest:
        image += f"@{model.image.digest}"
    download_seconds = architecture.weight_bytes / (HUB_DOWNLOAD_MIB_PER_SECOND * 1024**2)
    low, high = planning.replica_bounds(model)
    scaling = model.autoscaling
    namespace = config.serving.namespace
    extra_env: tuple[dict, ...] = ()
    if config.edge.mode is EdgeMode.ALB:
        # An ALB reuses idle backend connections for up to its idle timeout; uvicorn's 5 s keep-alive
        # would close them first and the ALB answers 502 (ELB guide: backend keep-alive must exceed
        # the idle timeout).
        extra_env = ({"name": "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "value": str(alb_idle_timeout(config) + 5)},)
    s3 = config.weights_storage.s3 if config.weights_storage.backend is StorageBackend.S3 else None
    if s3 is not None and region is not None:
        # The streamer's S3 client resolves the bucket's endpoint from the region; Pod Identity gives
        # credentials only (AWS_CONTAINER_CREDENTIALS_FULL_URI), not a region.
        extra_env += ({"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region})
    return ServedModel(
        name=model.name,
        model_id=model.model_id,
        revision=model.revision,
        tokenizer_revision=tokenizer_revision,
        image=image,
        replicas=model.replicas,
        settings=serving.EngineSettings(
            model_path=serving.staged_model_path(model.model_id, model.revision),
            served_model_name=model.name,
            max_model_len=model.max_model_len,
            gpu_memory_utilization=model.gpu_memory_utilization,
            tensor_parallel_size=tp,
            pipeline_parallel_size=plan.pipeline_parallel_size,
            kv_cache_dtype=model.kv_cache_dtype.value,
            max_num_seqs=model.max_num_seqs,
            max_num_batched_tokens=model.max_num_batched_tokens,
            enable_prefix_caching=model.enable_prefix_caching,
            shutdown_timeout_seconds=drains.vllm_shutdown_seconds,
            quantization=model.quantization,
            tokenizer_path=serving.staged_tokenizer_path(model.model_id, tokenizer_revision)
            if tokenizer_revision
            else None,
            chat_template_path=serving.CHAT_TEMPLATE_PATH if model.chat_template is not None else None,
            extra_args=tuple(model.extra_args),
            load_format=serving.RUNAI_STREAMER if s3 is not None else None,
            # A pod of several ranks reads the checkpoint once, split over its ranks, instead of once per
            # rank (engine.streamer_extra_config).
            model_loader_extra_config=serving.streamer_extra_config(
                s3.streamer_concurrency, s3.streamer_memory_limit_gib,
                distributed=plan.tensor_parallel_size > 1) if s3 is not None else None,
        ),
        startup_budget_seconds=plan.startup_budget_seconds,
        resources=serving.pod_resources(instance.vcpus, instance.memory_gib, instance.gpu_count, tp),
        chat_template=model.chat_template,
        storage_class=planning.weights_storage_class(config),
        access_mode=model.storage.access_mode.value,
        size_gib=planning.claim_size_gib(config, model, architecture.weight_bytes),
        # A ReadWriteOnce (EBS) volume lives in one zone: the Job and the replica go to the node
        # group's first zone, where the volume is created.
        zone=config.gpu_node_group.subnets[0].availability_zone
        if model.storage.access_mode is AccessMode.READ_WRITE_ONCE
        else None,
        # EFS mount targets exist only in the GPU node group's zones (llm_serving/storage/efs.py).
        stage_zones=tuple(sorted({s.availability_zone for s in config.gpu_node_group.subnets}))
        if config.weights_storage.backend is StorageBackend.EFS
        else (),
        download_deadline_seconds=max(1800, math.ceil(2 * download_seconds)),
        s3_prefix=serving.s3_model_prefix(model.model_id, model.revision) if s3 is not None else None,
        s3_tokenizer_prefix=serving.s3_tokenizer_prefix(model.model_id, tokenizer_revision)
        if s3 is not None and tokenizer_revision else None,
        stage_service_account=planning.stage_service_account(model) if s3 is not None else None,
        serving_service_account=planning.serving_service_account(model) if s3 is not None else None,
        region=region if s3 is not None else None,
        scaling=ScalingTarget(
            deployment_name=model.name,
            namespace=namespace,
            served_model_name=model.name,
            min_replicas=low,
            max_replicas=high,
            waiting_per_replica_target=scaling.waiting_per_replica_target,
            waiting_activation=scaling.waiting_activation,
            kv_usage_target=scaling.kv_usage_target,
            kv_usage_activation=scaling.kv_usage_activation,
            scale_down_window_seconds=planning.scale_down_window(config, model, plan),
            scale_up_window_seconds=scaling.scale_up_window_seconds,
            # Only consulted when scaling to zero, which this stack does not do.
            cooldown_seconds=max(300, 2 * plan.cold_start_seconds),
            ttft_target_seconds=round(model.slo.ttft_p95_seconds * scaling.ttft_target_fraction, 3),
            workload_kind="LeaderWorkerSet" if plan.pipeline_parallel_size > 1 else "Deployment",
        ),
        slo=ModelSlo(
            served_model_name=model.name,
            deployment_name=model.name,
            namespace=namespace,
            max_replicas=high,
            min_replicas=low,
            ttft_p95_seconds=model.slo.ttft_p95_seconds,
            itl_p95_seconds=model.slo.itl_p95_seconds,
            group_size=plan.pipeline_parallel_size,
            group_ready_minutes=math.ceil(plan.startup_budget_seconds / 60),
        ),
        extra_env=extra_env,
        cache_gib=model.cache_volume_gib,
        tmp_gib=model.tmp_volume_gib,
        strategy=strategy.manifest(),
        rollout_timeout_seconds=timing.rollout_await_seconds(config, model),
        delete_timeout_seconds=drains.delete_timeout_seconds,
        pre_start_seconds=dynamics.node_ready_seconds + dynamics.image_pull_seconds,
        # A multi-node rank takes every EFA interface of its node (a stage is the whole node).
        efa_interfaces=config.gpu_node_group.efa_interfaces if plan.pipeline_parallel_size > 1 else 0,
        compile_cache=planning.compile_cache_wiring(config, model),
        compile_timeouts=timing.producer_timeouts(config, model),
        compile_cache_service_account=planning.compile_cache_service_account(model) if s3 is not None else None,
    )


def weights_bucket_args(config: ServingStackArgs, tags: dict[str, str]) -> storage.WeightsBucketArgs:
    """The weights bucket and, per model, the staging Job's write role and the pods' read-only role, each
    scoped to the model's revision (and tokenizer revision) prefix; with a shared compile cache the pods
    also read its prefix, and its producer gets a role that writes only there."""
    namespace = config.serving.namespace
    access: list[storage.BucketAccess] = []
    for model in config.models:
        prefixes = [serving.s3_model_prefix(model.model_id, model.revision)]
        if model.tokenizer_revision and model.tokenizer_revision != model.revision:
            prefixes.append(serving.s3_tokenizer_prefix(model.model_id, model.tokenizer_revision))
        key = planning.compile_cache_wiring(config, model)
        caches = (key.object_prefix(),) if key is not None else ()
        access += [
            storage.BucketAccess(f"{model.name}-stage", namespace, planning.stage_service_account(model),
                                 tuple(prefixes), writer=True),
            storage.BucketAccess(f"{model.name}-read", namespace, planning.serving_service_account(model),
                                 tuple(prefixes), cache_prefixes=caches),
        ]
        if key is not None:
            access.append(storage.BucketAccess(
                f"{model.name}-compile", namespace, planning.compile_cache_service_account(model), tuple(prefixes),
                cache_prefixes=caches, cache_writer=True))
    return storage.WeightsBucketArgs(
        cluster_name=config.cluster.name, bucket_name=config.weights_storage.s3.bucket_name,
        protect=config.environment is Environment.PROD, tags=tags, access=tuple(access))


def alb_idle_timeout(config: ServingStackArgs) -> int:
    """Long enough for the longest non-streamed generation (the ALB sees no byte until the end), and so
    for the longest stream the edge admits."""
    longest = max(max(planning.edge_timeout_floor(config, m), timing.stream_seconds(m)) for m in config.models)
    return min(planning.ALB_MAX_IDLE_TIMEOUT_SECONDS, max(longest, config.edge.stream_idle_timeout_seconds))


# Bytes of request body per token of context: JSON, chat-message framing and multi-byte text,
# generously; a prompt that fills max-model-len must never meet a 413 at the edge (the usual 1 MB
# default rejects long prompts). Never below 8 MiB.
BODY_BYTES_PER_TOKEN = 64
MIN_BODY_LIMIT_BYTES = 8 * 1024**2


GATEWAY_KEYS_SECRET = "llm-serving-client-keys"


def vllm_api_key(config: ServingStackArgs) -> pulumi.Output[str]:
    """vLLM's own key, checked in every auth mode. With gateway-api-key the clients' key never reaches
    vLLM (the gateway strips it and injects this one), so vLLM gets a key derived from it that no
    client holds: reading the serving namespace's Secret does not yield a key the public edge accepts."""
    key = config.api_key
    if config.edge.auth is EdgeAuth.GATEWAY_API_KEY:
        key = derived_upstream_key(key)
    return pulumi.Output.secret(key)


def edge_args(config: ServingStackArgs, cluster: EksCluster) -> EdgeSpec:
    edge = config.edge
    settings = EdgeSettings(
        namespace=planning.edge_namespace(config),
        gateway_name="llm-serving",
        # A self-signed certificate lands in a Secret the edge creates under the name cert-manager would use.
        tls_secret_name="llm-serving-tls" if edge.tls.self_signed else edge.tls.secret_name,
        cert_manager_issuer=edge.tls.cert_manager_issuer,
        load_balancer_scheme=edge.scheme.value,
        auth=edge.auth.value,
        # The keys the gateway accepts (gateway mode, API-key auth): vLLM's own key in vllm-api-key
        # mode (checked at the gateway, before any picker, and again by vLLM), the clients' key in
        # gateway-api-key mode.
        api_key_secret=GATEWAY_KEYS_SECRET
        if edge.mode is EdgeMode.GATEWAY and edge.auth is not EdgeAuth.JWT
        else None,
        jwt_issuer=edge.jwt.issuer if edge.jwt else None,
        jwt_jwks_uri=edge.jwt.jwks_uri if edge.jwt else None,
        acm_certificate_arn=edge.tls.acm_certificate_arn,
        alb_idle_timeout_seconds=alb_idle_timeout(config),
    )
    routes = tuple(
        Route(
            model_name=m.name,
            namespace=config.serving.namespace,
            port=serving.PORT,
            host=planning.route_host(config, m),
            path_prefix=m.route.path_prefix,
            request_timeout_seconds=timing.model_drains(config, m).route_timeout_seconds,
            stream_idle_timeout_seconds=edge.stream_idle_timeout_seconds,
            request_body_limit_bytes=max(MIN_BODY_LIMIT_BYTES, m.max_model_len * BODY_BYTES_PER_TOKEN),
            # Envoy's drain and the load balancer's deregistration delay hold the longest stream.
            drain_seconds=timing.edge_drains(config).stream_seconds,
            inference_pool=pooled,
            objective_header=(OBJECTIVE_HEADER, m.name) if m.route.priority is not None else None,
            # Only a picker answers 429 here; vLLM's own answers pass through untouched.
            retry_after_seconds=model_admission(config, m).retry_after_seconds if pooled else None,
        )
        for m in config.models
        for pooled in [planning.routing_mode(config, m) is RoutingMode.INFERENCE_POOL]
    )
    alb = edge.mode is EdgeMode.ALB
    return EdgeSpec(
        load_balancer_controller=load_balancer_controller_args(config, cluster),
        mode=edge.mode.value,
        install_controller=edge.controller is ControllerMode.INSTALL,
        settings=settings,
        routes=routes,
        envoy_gateway_chart_version=edge.envoy_gateway_chart_version,
        alb_controller_chart_version=edge.alb_controller_chart_version,
        alb_controller_values={
            "clusterName": config.cluster.name,
            "region": cluster.region,
            "vpcId": cluster.vpc_id,
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": edge.alb_controller_role_arn or ""}},
        },
        load_balancer_subnet_ids=tuple(edge.load_balancer_subnet_ids) if alb else (),
        load_balancer_cidrs=tuple(subnet_cidr(subnet) for subnet in edge.load_balancer_subnet_ids) if alb else (),
        client_api_key=pulumi.Output.secret(config.api_key)
        if settings.api_key_secret
        else None,
        upstream_api_key=vllm_api_key(config) if gateway_injects_upstream_key(settings) else None,
        inference_extension=any(route.inference_pool for route in routes),
        ai_gateway_chart_version=edge.inference_routing.ai_gateway_chart_version,
        ai_gateway_crds_chart_version=edge.inference_routing.ai_gateway_crds_chart_version,
        inference_pool_crds_file=versions.INFERENCE_POOL_CRDS_FILE,
        self_signed_host=edge.host if edge.tls.self_signed else None,
        protect_crds=config.environment is Environment.PROD,
    )


def load_balancer_controller_args(config: ServingStackArgs, cluster: EksCluster) -> LoadBalancerControllerArgs | None:
    """The AWS Load Balancer Controller the stack installs (a created cluster's, or asked for), else None."""
    if not planning.installs_load_balancer_controller(config):
        return None
    return LoadBalancerControllerArgs(
        cluster_name=config.cluster.name,
        region=cluster.region,
        vpc_id=cluster.vpc_id,
        chart_version=config.edge.alb_controller_chart_version,
        # A created cluster's CPU nodes; elsewhere the nodes are the operator's (GPU nodes are tainted).
        node_selector={created_cluster.SYSTEM_NODE_LABEL: "system"}
        if config.cluster.mode is ClusterMode.CREATE
        else {},
        tags=planning.resource_tags(config),
    )


def picker_settings(config: ServingStackArgs) -> PickerSettings:
    routing = config.edge.inference_routing
    return PickerSettings(
        replicas=routing.picker_replicas,
        cpu_request=routing.picker_cpu_request,
        memory_request=f"{routing.picker_memory_request_mib}Mi",
        memory_limit=f"{routing.picker_memory_limit_mib}Mi",
        image=f"{versions.ENDPOINT_PICKER_IMAGE}@{routing.picker_image_digest}",
    )


@dataclasses.dataclass(frozen=True)
class StagingNodes:
    """The CPU nodes the staging Jobs run on, as the weights storage admits and authorises them."""

    role_arn: pulumi.Input[str] | None  # the only writer in the file-system policy; None: no policy (dev)
    security_groups: tuple[tuple[str, pulumi.Input[str]], ...]  # (label, id) NFS is admitted from
    node_selector: dict[str, str]


def staging_nodes(config: ServingStackArgs, cluster: EksCluster,
                  created: created_cluster.Cluster | None = None) -> StagingNodes:
    """The stack file's staging nodes; with a created cluster, its CPU nodes where the file is silent
    (the only untainted nodes there: the Jobs land on them anyway)."""
    efs = config.weights_storage.efs
    groups: tuple[tuple[str, pulumi.Input[str]], ...] = tuple(
        (f"staging-nodes-{sg}", sg) for sg in efs.staging_node_security_group_ids)
    role: pulumi.Input[str] | None = efs.staging_node_role_arn
    selector = dict(efs.staging_node_selector)
    if created is not None:
        role = role if role is not None else created.system_node_role_arn
        groups = groups or (("staging-nodes", created.system_node_security_group_id),)
        selector = selector or {created_cluster.SYSTEM_NODE_LABEL: "system"}
    if not groups:
        # Dev only (checks refuse it elsewhere): the staging nodes are known by no group of their own.
        if config.weights_storage.backend is StorageBackend.EFS:
            pulumi.log.warn("weightsStorage.efs.stagingNodeSecurityGroupIds is empty: the mount targets admit NFS from "
                            "the cluster security group, i.e. from every node")
        groups = (("cluster-security-group", cluster.cluster_security_group_id),)
    return StagingNodes(role, groups, selector)


def serving_stack_args(
    config: ServingStackArgs, cluster: EksCluster, subnets: Subnets | None = None, subnet_keys: tuple[str, ...] = (),
    staging: StagingNodes | None = None,
) -> StackSpec:
    """Map validated config onto component args (components never see the config models)."""
    staging = staging_nodes(config, cluster) if staging is None else staging
    group = config.gpu_node_group
    subnets = configured_subnets(config) if subnets is None else subnets
    instance = planning.resolve_instance_type(config)
    assert instance is not None  # guaranteed by checks.check
    tags = planning.resource_tags(config)
    prometheus = config.observability.prometheus
    installs_prometheus = prometheus.mode is PrometheusMode.INSTALL
    alerts = config.observability.gpu_alerts
    node_group_name = f"gpu-{instance.name.replace('.', '-')}"
    models = tuple(served_model(config, m, instance, cluster.region) for m in config.models)
    return StackSpec(
        node_group_name=node_group_name,
        node_drain_wait_seconds=timing.node_drain_wait_seconds(config),
        node_group=NodeGroupSpec(
            cluster_name=config.cluster.name,
            cluster_security_group_id=cluster.cluster_security_group_id,
            vpc_id=cluster.vpc_id,
            kubernetes_version=config.cluster.kubernetes_version,
            instance=instance,
            subnet_ids=[subnet_id for subnet_id, _ in subnets],
            min_nodes=group.scaling.min_nodes,
            max_nodes=group.scaling.max_nodes,
            desired_nodes=group.scaling.desired_nodes,
            ami_type=group.ami_type.value,
            ami_release_version=group.ami_release_version,
            capacity_type=group.capacity_type.value,
            capacity_reservation_id=group.capacity_reservation_id,
            root_volume_gib=group.root_volume_gib,
            nvme_container_storage=group.container_storage is ContainerStorage.INSTANCE_NVME,
            efa_interfaces=group.efa_interfaces,
            cluster_placement_group=group.placement is PlacementStrategy.CLUSTER,
            extra_labels=dict(group.labels),
            tags=tags,
            autoscaled=config.node_autoscaling.mode is not NodeAutoscalingMode.NONE,
            auto_repair=group.auto_repair.enabled,
            subnet_keys=subnet_keys,
            ssm_access=group.ssm_access,
        ),
        install_node_monitoring_agent=group.auto_repair.enabled and group.auto_repair.install_monitoring_agent,
        weights_storage=storage.WeightsFileSystemArgs(
            cluster_name=config.cluster.name,
            vpc_id=cluster.vpc_id,
            # The GPU nodes' own group is added by ServingStack, which creates it.
            nfs_client_security_groups=staging.security_groups,
            subnets=tuple(subnets),
            storage_class_name=planning.weights_storage_class(config),
            owner_uid=serving.RUN_AS_UID,
            owner_gid=serving.RUN_AS_GID,
            protect=config.environment is Environment.PROD,
            install_csi_driver=config.weights_storage.efs.install_csi_driver,
            kubernetes_version=config.cluster.kubernetes_version,
            tags=tags,
            writer_role_arn=staging.role_arn,
            compile_cache=any(planning.compile_cache_state(config, m)[0] for m in config.models),
        )
        if config.weights_storage.backend is StorageBackend.EFS
        else None,
        weights_bucket=weights_bucket_args(config, tags) if config.weights_storage.backend is StorageBackend.S3
        else None,
        weights_lustre=storage.WeightsLustreArgs(
            cluster_name=config.cluster.name,
            vpc_id=cluster.vpc_id,
            node_security_group_id=cluster.cluster_security_group_id,
            subnet_id=subnets[0][0],
            capacity_gib=config.weights_storage.fsx_lustre.storage_capacity_gib,
            per_unit_throughput=config.weights_storage.fsx_lustre.per_unit_storage_throughput,
            namespace=config.serving.namespace,
            volume_name=f"{config.serving.namespace}-weights-fsx",
            claim_name="weights-fsx",
            protect=config.environment is Environment.PROD,
            install_csi_driver=config.weights_storage.fsx_lustre.install_csi_driver,
            kubernetes_version=config.cluster.kubernetes_version,
            tags=tags,
        )
        if config.weights_storage.backend is StorageBackend.FSX_LUSTRE
        else None,
        cluster_autoscaler=ClusterAutoscalerArgs(
            cluster_name=config.cluster.name,
            region=cluster.region,
            chart_version=config.node_autoscaling.chart_version,
            image_tag=image_tag_for(config.cluster.kubernetes_version, versions.CLUSTER_AUTOSCALER_IMAGE_TAGS),
            node_group_name=node_group_name,
            tags=tags,
        )
        if config.node_autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER
        else None,
        device_plugin=NvidiaDevicePluginArgs(
            namespace=config.addons.nvidia_device_plugin.namespace,
            chart_version=config.addons.nvidia_device_plugin.chart_version,
        ),
        dcgm_exporter=DcgmExporterArgs(
            namespace=config.addons.dcgm_exporter.namespace,
            chart_version=config.addons.dcgm_exporter.chart_version,
            runbook_base_url=config.observability.runbook_base_url,
            temperature_celsius=alerts.temperature_celsius,
            throttle_minutes=alerts.throttle_minutes,
            exporter_absent_minutes=alerts.exporter_absent_minutes,
            monitor_labels=dict(prometheus.monitor_selector_labels),
            auto_repair=group.auto_repair.enabled,
        ),
        prometheus=observability.PrometheusStackArgs(
            protect_crds=config.environment is Environment.PROD,
            namespace=prometheus.namespace,
            chart_version=prometheus.chart_version,
            grafana_admin_password=pulumi.Output.secret(
                config.grafana_admin_password
            ),
        )
        if installs_prometheus
        else None,
        prometheus_url=prometheus.url,
        serving_namespace=config.serving.namespace,
        models=models,
        api_key=vllm_api_key(config),
        hf_token=pulumi.Output.secret(config.hf_token) if config.hf_token else None,
        protect_weights=config.environment is Environment.PROD,
        edge=edge_args(config, cluster),
        autoscaling=AutoscalingSpec(
            mode=config.autoscaling.mode.value,
            namespace=config.autoscaling.namespace,
            keda_chart_version=config.autoscaling.keda_chart_version,
            prometheus_adapter_chart_version=config.autoscaling.prometheus_adapter_chart_version,
            prometheus_url=prometheus.url or observability.query_url(prometheus.namespace),
            targets=tuple(m.scaling for m in models),
        ),
        prometheus_namespace=prometheus.namespace,
        monitor_labels=dict(prometheus.monitor_selector_labels),
        # PodMonitors need the Prometheus Operator, so an existing Prometheus is an operator-run one too.
        prometheus_pod_selector=dict(PROMETHEUS_POD_LABELS),
        runbook_base_url=config.observability.runbook_base_url,
        routed_models=tuple(
            (m.name, drains.picker_drain_seconds, drains.delete_timeout_seconds, m.route.priority,
             routed_admission(config, m))
            for m in config.models
            for drains in [timing.model_drains(config, m)]
            if drains.picker_drain_seconds is not None  # routed through an InferencePool
        ),
        picker=picker_settings(config),
        lws_chart_version=versions.LWS.version if any(m.settings.pipeline_parallel_size > 1 for m in models) else None,
        efa_device_plugin_chart_version=versions.EFA_DEVICE_PLUGIN.version if group.efa_interfaces else None,
        stage_image=f"{versions.STAGE_IMAGE}@{config.weights_storage.stage_image_digest}",
        staging_node_selector=staging.node_selector
        if config.weights_storage.backend is StorageBackend.EFS
        else None,
        verifications=model_verifications(config),
        verify_image=versions.VERIFY_IMAGE,
        prepull_images=tuple(sorted({m.image for m in models}))
        if group.image_pre_pull is ImagePrePull.DAEMON_SET else (),
    )


def model_verifications(config: ServingStackArgs) -> tuple[ModelVerification, ...]:
    """Each model's deploy gate (none with `verification.mode: off`)."""
    mode = verification.verification_mode(config)
    if mode is VerificationMode.OFF:
        return ()
    found = []
    for model in config.models:
        checked = verification.settings(config, model)
        found.append(ModelVerification(model.name, checked, mode.value, verification.deadline_seconds(checked)))
    return tuple(found)


def check_cluster_version(config: ServingStackArgs) -> None:
    """Stop before any resource when the cluster runs another minor than the stack file says."""
    problem = platform_checks.cluster_version_problem(config, cluster_version(config.cluster.name))
    if problem is not None:
        pulumi.log.error(problem.line())
        raise pulumi.RunError(f"stack {pulumi.get_stack()} does not match its cluster's version; nothing was created")


def refuse(problems: list, what: str) -> None:
    if problems:
        for problem in problems:
            pulumi.log.error(problem.line())
        raise pulumi.RunError(f"stack {pulumi.get_stack()} {what}; nothing was created")


def check_existing_bucket(config: ServingStackArgs) -> None:
    """Before any resource: an existing weights bucket (weightsStorage.s3.bucketName) exists and lives in
    the stack's region (s3:ListBucket / GetBucketLocation through the data source)."""
    name = config.weights_storage.s3.bucket_name
    if config.weights_storage.backend is not StorageBackend.S3 or name is None:
        return
    try:
        found: str | None = aws.s3.get_bucket(bucket=name).region
    except Exception:  # the provider reports a missing (or unreadable) bucket as a failed invoke
        found = None
    refuse(platform_checks.existing_bucket_problems(name, found, aws.get_region().region), "cannot use its bucket")


def check_cluster_to_create(config: ServingStackArgs, stack_id: str) -> None:
    """Before any resource: the zones exist in this region, and a cluster of the name is ours and at
    most one minor behind (the preview then lists the upgrade's order)."""
    found = None
    if config.cluster.name in aws.eks.get_clusters().names:
        existing = aws.eks.get_cluster(name=config.cluster.name)
        found = cluster_checks.FoundCluster(existing.version, (existing.tags or {}).get(cluster_checks.OWNER_TAG))
    problems = cluster_checks.existing_cluster_problems(config, found, stack_id)
    problems += cluster_checks.zone_problems(
        config, aws.get_region().region, aws.get_availability_zones(state="available").names
    )
    refuse(problems, "cannot create its cluster")
    if found is not None:
        for step, line in enumerate(cluster_checks.upgrade_steps(found.version, config.cluster.kubernetes_version), 1):
            pulumi.log.info(f"cluster upgrade step {step}: {line}")


def create_cluster(config: ServingStackArgs, tags: dict[str, str]) -> created_cluster.Cluster:
    create = config.cluster.create
    assert create is not None  # guaranteed by checks.check
    stack_id = f"{pulumi.get_project()}/{pulumi.get_stack()}"
    check_cluster_to_create(config, stack_id)
    # The access entry names the IAM role behind the session, not the assumed-role session ARN.
    deployer = aws.iam.get_session_context(arn=aws.get_caller_identity().arn).issuer_arn
    nodes = create.system_nodes
    return created_cluster.Cluster(
        "cluster",
        created_cluster.ClusterSpec(
            cluster_name=config.cluster.name,
            kubernetes_version=config.cluster.kubernetes_version,
            network=cluster_checks.network_plan(config),
            service_cidr=create.service_cidr,
            deployer_arn=deployer,
            # An admin role that is also the deployer already has its entry (a second one fails).
            admin_role_arns=tuple(arn for arn in create.admin_role_arns if arn != deployer),
            system_nodes=created_cluster.SystemNodes(
                nodes.instance_type, nodes.min_nodes, nodes.max_nodes, nodes.desired_nodes
            ),
            public_access_cidrs=tuple(create.public_access_cidrs),
            log_types=tuple(create.log_types),
            log_retention_days=create.log_retention_days,
            key_deletion_window_days=30 if config.environment is Environment.PROD else 7,
            tags={**tags, cluster_checks.OWNER_TAG: stack_id},
        ),
    )


def after(resources: list[pulumi.Resource]) -> pulumi.ResourceTransformation:
    """Every resource of the serving stack waits for these (the created cluster's access, add-ons and
    CPU nodes): a GPU node cannot turn Ready before vpc-cni, nor a Deployment schedule before nodes."""

    def transformation(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
        return pulumi.ResourceTransformationResult(
            args.props, pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(depends_on=resources))
        )

    return transformation


def check_network_policy_enforcement(config: ServingStackArgs) -> None:
    """Stop before any resource when nothing would enforce the NetworkPolicies that fence the models."""
    if config.cluster.network_policy_enforcement is NetworkPolicyEnforcement.OTHER:
        return
    problem = platform_checks.network_policy_enforcement_problem(config, vpc_cni_configuration(config.cluster.name))
    if problem is not None:
        pulumi.log.error(problem.line())
        raise pulumi.RunError(
            f"stack {pulumi.get_stack()} relies on NetworkPolicies nothing enforces; nothing was created")


def run() -> None:
    config = load_config()
    created: created_cluster.Cluster | None = None
    if config.cluster.mode is ClusterMode.CREATE:
        created = create_cluster(config, planning.resource_tags(config))
        cluster = created.eks
        subnets: Subnets = [(created.private_subnet_ids[s.availability_zone], s.availability_zone)
                            for s in config.gpu_node_group.subnets]
        provider = kubernetes_provider("kubernetes", cluster, pulumi.ResourceOptions(depends_on=created.ready))
        opts = pulumi.ResourceOptions(providers={"kubernetes": provider}, transformations=[after(created.ready)])
        planned = {p.zone: p.cidr for p in cluster_checks.network_plan(config).private}
        subnet_keys = tuple(f"{zone}={planned[zone]}" for _, zone in subnets)
        pulumi.export("clusterName", config.cluster.name)
        pulumi.export("vpcId", cluster.vpc_id)
    else:
        check_cluster_version(config)
        # A created cluster's vpc-cni is created with enforcement on (llm_serving/cluster).
        check_network_policy_enforcement(config)
        cluster = lookup_cluster(config.cluster.name)
        subnets = configured_subnets(config)
        subnet_keys = ()
        provider = kubernetes_provider("kubernetes", cluster)
        opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    check_existing_bucket(config)
    staging = staging_nodes(config, cluster, created)
    stack = ServingStack("llm-serving", serving_stack_args(config, cluster, subnets, subnet_keys, staging), opts)
    pulumi.export("environment", config.environment.value)
    pulumi.export("gpuNodeSelector", stack.gpu_node_group.node_selector)
    pulumi.export("gpuTolerations", stack.gpu_node_group.tolerations)
    pulumi.export("gpusPerNode", stack.gpu_node_group.gpus_per_node)
    pulumi.export("maxGpus", stack.gpu_node_group.max_gpus)
    pulumi.export("prometheusUrl", stack.prometheus_url)
    pulumi.export("modelEndpoints", stack.endpoints)
