"""What each platform part of a stack is built from: the GPU node group, its autoscaler and add-ons, the
weights storage, Prometheus, the edge and the pickers, read from the stack's args, its plan and its site.

Pure apart from the Inputs of the site (outputs of the cluster look-up or of a created cluster): ServingStack
hands each result to one child component.
"""

import pulumi

from llm_serving import gpu, observability, serving, storage
from llm_serving.cluster import SYSTEM_NODE_LABEL, ClusterMode
from llm_serving.edge import (
    OWN_GATEWAY_NAME,
    ControllerMode,
    EdgeAuth,
    EdgeMode,
    EdgeRouting,
    EdgeSettings,
    EdgeSpec,
    LoadBalancerControllerArgs,
    Route,
    RouteRevision,
    gateway_injects_upstream_key,
)
from llm_serving.gpu import ContainerStorage, NodeAutoscalingMode, PlacementStrategy
from llm_serving.observability import PrometheusMode
from llm_serving.platform import derived_upstream_key, subnet_cidr, versions
from llm_serving.platform.args import Environment
from llm_serving.routing import OBJECTIVE_HEADER, PickerSettings
from llm_serving.serving import RoutingMode
from llm_serving.stack import planning, revisions, timing
from llm_serving.stack.admission import model_admission
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.site import GpuNodes, Site

# Bytes of request body per token of context: JSON, chat-message framing and multi-byte text,
# generously; a prompt that fills max-model-len must never meet a 413 at the edge (the usual 1 MB
# default rejects long prompts). Never below 8 MiB.
BODY_BYTES_PER_TOKEN = 64
MIN_BODY_LIMIT_BYTES = 8 * 1024**2

GATEWAY_KEYS_SECRET = "llm-serving-client-keys"


def node_group_name(args: ServingStackArgs) -> str:
    instance = planning.resolve_instance_type(args)
    assert instance is not None  # the rules refuse an unknown instance type
    return f"gpu-{instance.name.replace('.', '-')}"


def node_group(args: ServingStackArgs, site: Site) -> gpu.NodeGroupSpec:
    group = args.gpu_node_group
    instance = planning.resolve_instance_type(args)
    assert instance is not None  # the rules refuse an unknown instance type
    assert group.scaling is not None  # the rules require it with mode create
    return gpu.NodeGroupSpec(
        cluster_name=args.cluster.name,
        cluster_security_group_id=site.cluster_security_group_id,
        vpc_id=site.vpc_id,
        kubernetes_version=args.cluster.kubernetes_version,
        instance=instance,
        subnet_ids=[subnet_id for subnet_id, _ in site.subnets],
        min_nodes=group.scaling.min_nodes,
        max_nodes=group.scaling.max_nodes,
        desired_nodes=group.scaling.desired_nodes,
        ami_type=group.ami_type,
        ami_release_version=group.ami_release_version,
        capacity_type=group.capacity_type,
        capacity_reservation_id=group.capacity_reservation_id,
        root_volume_gib=group.root_volume_gib,
        nvme_container_storage=group.container_storage is ContainerStorage.INSTANCE_NVME,
        efa_interfaces=group.efa_interfaces,
        cluster_placement_group=group.placement is PlacementStrategy.CLUSTER,
        extra_labels=dict(group.labels),
        tags=planning.resource_tags(args),
        autoscaled=args.node_autoscaling.mode is not NodeAutoscalingMode.NONE,
        auto_repair=group.auto_repair.enabled,
        subnet_keys=site.subnet_keys,
        ssm_access=group.ssm_access,
    )


def cluster_autoscaler(args: ServingStackArgs, site: Site) -> gpu.ClusterAutoscalerArgs | None:
    """Cluster Autoscaler for this stack's group, unless the cluster runs one or capacity is fixed."""
    if args.node_autoscaling.mode is not NodeAutoscalingMode.CLUSTER_AUTOSCALER:
        return None
    return gpu.ClusterAutoscalerArgs(
        cluster_name=args.cluster.name,
        region=site.region,
        chart_version=args.node_autoscaling.chart_version,
        image_tag=gpu.image_tag_for(args.cluster.kubernetes_version, versions.CLUSTER_AUTOSCALER_IMAGE_TAGS),
        node_group_name=node_group_name(args),
        tags=planning.resource_tags(args),
        image_digests=dict(args.chart_image_digests),
    )


def device_plugin(args: ServingStackArgs, nodes: GpuNodes) -> gpu.NvidiaDevicePluginArgs:
    return gpu.NvidiaDevicePluginArgs(namespace=args.addons.nvidia_device_plugin.namespace,
                                      chart_version=args.addons.nvidia_device_plugin.chart_version,
                                      node_selector=nodes.addon_node_selector, tolerations=nodes.addon_tolerations,
                                      image_digests=dict(args.chart_image_digests))


def dcgm_exporter(args: ServingStackArgs, nodes: GpuNodes) -> gpu.DcgmExporterArgs:
    alerts = args.observability.gpu_alerts
    return gpu.DcgmExporterArgs(
        namespace=args.addons.dcgm_exporter.namespace,
        chart_version=args.addons.dcgm_exporter.chart_version,
        runbook_base_url=args.observability.runbook_base_url,
        temperature_celsius=alerts.temperature_celsius,
        throttle_minutes=alerts.throttle_minutes,
        exporter_absent_minutes=alerts.exporter_absent_minutes,
        monitor_labels=dict(args.observability.prometheus.monitor_selector_labels),
        auto_repair=planning.creates_nodes(args) and args.gpu_node_group.auto_repair.enabled,
        node_selector=nodes.addon_node_selector,
        tolerations=nodes.addon_tolerations,
        image_digests=dict(args.chart_image_digests),
    )


def prometheus(args: ServingStackArgs) -> observability.PrometheusStackArgs | None:
    """kube-prometheus-stack, when the stack installs its own Prometheus."""
    settings = args.observability.prometheus
    if settings.mode is not PrometheusMode.INSTALL:
        return None
    assert args.grafana_admin_password is not None  # the rules require it with mode install
    return observability.PrometheusStackArgs(
        protect_crds=args.environment is Environment.PROD,
        namespace=settings.namespace,
        chart_version=settings.chart_version,
        grafana_admin_password=pulumi.Output.secret(args.grafana_admin_password),
        image_digests=dict(args.chart_image_digests),
    )


def prometheus_query_url(args: ServingStackArgs) -> str:
    settings = args.observability.prometheus
    return settings.url or observability.query_url(settings.namespace)


def weights_file_system(args: ServingStackArgs, site: Site) -> storage.WeightsFileSystemArgs:
    """EFS: the GPU nodes' own group and role, and each model's serving and compile-cache mounts (in the serving
    namespace), are added by ServingStack, which creates them."""
    return storage.WeightsFileSystemArgs(
        cluster_name=args.cluster.name,
        vpc_id=site.vpc_id,
        nfs_client_security_groups=site.staging.security_groups,
        subnets=tuple(site.subnets),
        storage_class_name=planning.weights_storage_class(args),
        owner_uid=serving.RUN_AS_UID,
        owner_gid=serving.RUN_AS_GID,
        protect=args.environment is Environment.PROD,
        install_csi_driver=args.weights_storage.efs.install_csi_driver,
        kubernetes_version=args.cluster.kubernetes_version,
        tags=planning.resource_tags(args),
        writer_role_arn=site.staging.role_arn,
    )


def weights_lustre(args: ServingStackArgs, site: Site) -> storage.WeightsLustreArgs:
    fsx = args.weights_storage.fsx_lustre
    namespace = args.serving.namespace
    return storage.WeightsLustreArgs(
        cluster_name=args.cluster.name,
        vpc_id=site.vpc_id,
        node_security_group_id=site.cluster_security_group_id,
        subnet_id=site.subnets[0][0],
        capacity_gib=fsx.storage_capacity_gib,
        per_unit_throughput=fsx.per_unit_storage_throughput,
        namespace=namespace,
        volume_name=f"{namespace}-weights-fsx",
        claim_name="weights-fsx",
        protect=args.environment is Environment.PROD,
        install_csi_driver=fsx.install_csi_driver,
        kubernetes_version=args.cluster.kubernetes_version,
        tags=planning.resource_tags(args),
    )


def adapter_sources(args: ServingStackArgs, model: serving.ModelArgs) -> storage.AdapterSourcesArgs | None:
    """The role that reads the model's LoRA adapters from S3, for its staging Job; None when none comes from S3."""
    if model.lora is None:
        return None
    # (bucket, prefix) of each adapter on S3, once each: what the role may read and list.
    sources = tuple(sorted({(a.s3.bucket, a.s3.prefix) for a in model.lora.adapters if a.s3 is not None}))
    if not sources:
        return None
    return storage.AdapterSourcesArgs(cluster_name=args.cluster.name, namespace=args.serving.namespace,
                                      service_account=planning.stage_service_account(model), sources=sources,
                                      tags=planning.resource_tags(args))


def weights_bucket(args: ServingStackArgs) -> storage.WeightsBucketArgs:
    """The weights bucket and, per model, the staging Job's write role and the pods' read-only role, each
    scoped to the model's revision (and tokenizer revision) prefix; with a shared compile cache the pods
    also read its prefix, and its producer gets a role that writes only there."""
    namespace = args.serving.namespace
    access: list[storage.BucketAccess] = []
    for model in args.models:
        prefixes = [serving.s3_model_prefix(model.model_id, model.revision)]
        if model.tokenizer_revision and model.tokenizer_revision != model.revision:
            prefixes.append(serving.s3_tokenizer_prefix(model.model_id, model.tokenizer_revision))
        key = planning.compile_cache_wiring(args, model)
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
        cluster_name=args.cluster.name, bucket_name=args.weights_storage.s3.bucket_name,
        protect=args.environment is Environment.PROD, tags=planning.resource_tags(args), access=tuple(access))


def alb_idle_timeout(args: ServingStackArgs) -> int:
    """Long enough for the longest non-streamed generation (the ALB sees no byte until the end), and so
    for the longest stream the edge admits."""
    longest = max(max(planning.edge_timeout_floor(args, m), timing.stream_seconds(m)) for m in args.models)
    return min(planning.ALB_MAX_IDLE_TIMEOUT_SECONDS, max(longest, args.edge.stream_idle_timeout_seconds))


def vllm_api_key(args: ServingStackArgs) -> pulumi.Output[str]:
    """vLLM's own key, checked in every auth mode. With gateway-api-key the clients' key never reaches
    vLLM (the gateway strips it and injects this one), so vLLM gets a key derived from it that no
    client holds: reading the serving namespace's Secret does not yield a key the public edge accepts."""
    key = pulumi.Output.from_input(args.api_key)
    if args.edge.auth is EdgeAuth.GATEWAY_API_KEY:
        key = key.apply(derived_upstream_key)
    return pulumi.Output.secret(key)


def edge(args: ServingStackArgs, site: Site) -> EdgeSpec:
    edge_args = args.edge
    existing = edge_args.gateway
    settings = EdgeSettings(
        namespace=planning.edge_namespace(args),
        gateway_name=existing.name if existing else OWN_GATEWAY_NAME,
        existing_gateway=existing is not None,
        gateway_namespace=existing.namespace if existing else None,
        listener=existing.listener if existing else None,
        # A self-signed certificate lands in a Secret the edge creates under the name cert-manager would use.
        tls_secret_name="llm-serving-tls" if edge_args.tls.self_signed else edge_args.tls.secret_name,
        cert_manager_issuer=edge_args.tls.cert_manager_issuer,
        load_balancer_scheme=edge_args.scheme,
        auth=edge_args.auth,
        # The keys the gateway accepts (gateway mode, API-key auth): vLLM's own key in vllm-api-key
        # mode (checked at the gateway, before any picker, and again by vLLM), the clients' key in
        # gateway-api-key mode.
        api_key_secret=GATEWAY_KEYS_SECRET
        if edge_args.mode is EdgeMode.GATEWAY and edge_args.auth is not EdgeAuth.JWT
        else None,
        jwt_issuer=edge_args.jwt.issuer if edge_args.jwt else None,
        jwt_jwks_uri=edge_args.jwt.jwks_uri if edge_args.jwt else None,
        jwt_audiences=tuple(edge_args.jwt.audiences) if edge_args.jwt else (),
        acm_certificate_arn=edge_args.tls.acm_certificate_arn,
        alb_idle_timeout_seconds=alb_idle_timeout(args),
        nlb_idle_timeout_seconds=edge_args.load_balancer_idle_timeout_seconds,
        by_model=edge_args.routing is EdgeRouting.BY_MODEL,
    )
    routes = tuple(
        Route(
            model_name=m.name,
            namespace=args.serving.namespace,
            port=serving.PORT,
            host=planning.route_host(args, m),
            path_prefix=m.route.path_prefix,
            request_timeout_seconds=timing.model_drains(args, m).route_timeout_seconds,
            stream_idle_timeout_seconds=edge_args.stream_idle_timeout_seconds,
            request_body_limit_bytes=max(MIN_BODY_LIMIT_BYTES, m.max_model_len * BODY_BYTES_PER_TOKEN),
            # Envoy's drain and the load balancer's deregistration delay hold the longest stream.
            drain_seconds=timing.edge_drains(args).stream_seconds,
            inference_pool=pooled,
            objective_header=(OBJECTIVE_HEADER, m.name) if m.route.priority is not None else None,
            # Only a picker answers 429 here; vLLM's own answers pass through untouched.
            retry_after_seconds=model_admission(args, m).retry_after_seconds if pooled else None,
            # byModel: the other names a request's `model` may carry to reach this pool, the model's LoRA adapters and
            # their aliases, each an Exact match on its rule and an entry of GET /v1/models (edge/by_model.py
            # model_names); the picker then rewrites an alias to one of its adapters (InferenceModelRewrite).
            extra_model_names=tuple(m.served_names()[1:]),
            # Two revisions: one route, split by weight, with a header that reaches each (revisions.py).
            revisions=tuple(RouteRevision(r.name, revisions.object_name(m, i), r.weight)
                            for i, r in enumerate(m.revisions)),
        )
        for m in args.models if revisions.revision_model_of(m) is None
        for pooled in [planning.routing_mode(args, m) is RoutingMode.INFERENCE_POOL]
    )
    alb = edge_args.mode is EdgeMode.ALB
    return EdgeSpec(
        load_balancer_controller=load_balancer_controller(args, site),
        mode=edge_args.mode,
        install_controller=edge_args.controller is ControllerMode.INSTALL,
        settings=settings,
        routes=routes,
        envoy_gateway_chart_version=edge_args.envoy_gateway_chart_version,
        alb_controller_chart_version=edge_args.alb_controller_chart_version,
        alb_controller_values={
            "clusterName": args.cluster.name,
            "region": site.region,
            "vpcId": site.vpc_id,
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": edge_args.alb_controller_role_arn or ""}},
        },
        load_balancer_subnet_ids=tuple(edge_args.load_balancer_subnet_ids) if alb else (),
        load_balancer_cidrs=tuple(subnet_cidr(subnet) for subnet in edge_args.load_balancer_subnet_ids) if alb else (),
        client_api_key=pulumi.Output.secret(args.api_key) if settings.api_key_secret else None,
        upstream_api_key=vllm_api_key(args) if gateway_injects_upstream_key(settings) else None,
        inference_extension=any(route.inference_pool for route in routes),
        ai_gateway_chart_version=edge_args.inference_routing.ai_gateway_chart_version,
        ai_gateway_crds_chart_version=edge_args.inference_routing.ai_gateway_crds_chart_version,
        inference_pool_crds_file=versions.INFERENCE_POOL_CRDS_FILE,
        # A stack that names a cert-manager issuer runs cert-manager: it renews the AI Gateway webhook's certificate.
        ai_gateway_webhook_cert_manager=edge_args.tls.cert_manager_issuer is not None,
        self_signed_host=edge_args.host if edge_args.tls.self_signed else None,
        protect_crds=args.environment is Environment.PROD,
        image_digests=dict(args.chart_image_digests),
    )


def load_balancer_controller(args: ServingStackArgs, site: Site) -> LoadBalancerControllerArgs | None:
    """The AWS Load Balancer Controller the stack installs (a created cluster's, or asked for), else None."""
    if not planning.installs_load_balancer_controller(args):
        return None
    return LoadBalancerControllerArgs(
        cluster_name=args.cluster.name,
        region=site.region,
        vpc_id=site.vpc_id,
        chart_version=args.edge.alb_controller_chart_version,
        # A created cluster's CPU nodes; elsewhere the nodes are the operator's (GPU nodes are tainted).
        node_selector={SYSTEM_NODE_LABEL: "system"} if args.cluster.mode is ClusterMode.CREATE else {},
        tags=planning.resource_tags(args),
        image_digests=dict(args.chart_image_digests),
    )


def picker(args: ServingStackArgs) -> PickerSettings:
    routing = args.edge.inference_routing
    return PickerSettings(
        replicas=routing.picker_replicas,
        cpu_request=routing.picker_cpu_request,
        memory_request=f"{routing.picker_memory_request_mib}Mi",
        memory_limit=f"{routing.picker_memory_limit_mib}Mi",
        image=f"{versions.ENDPOINT_PICKER_IMAGE}@{routing.picker_image_digest}",
    )
