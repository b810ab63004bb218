"""The Pulumi program: read this stack's config from the engine, validate, build the stack.

`__main__.py` calls `run()`. Invalid config is logged one line per problem and stops the program
with a `RunError` (no traceback) before any resource is registered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from components import prometheus_stack
from components.dcgm_exporter import DcgmExporterArgs
from components.gpu_node_group import GpuNodeGroupArgs
from components.kubernetes_provider import EksCluster, kubernetes_provider, lookup_cluster
from components.nvidia_device_plugin import NvidiaDevicePluginArgs
from components.serving_stack import ServingStack, ServingStackArgs
from stacks import checks, loader
from stacks.config import SECRET_KEYS, ContainerStorage, PlacementStrategy, PrometheusMode, StackConfig
from stacks.problems import ConfigError

# Where base stack files (`extends`) are read from: the project directory in a real run; the
# offline renderer points it at the directory of the stack file it renders.
stack_dir: Path = loader.PROJECT_DIR


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
        if namespace != loader.PROJECT:
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


def load_config() -> StackConfig:
    values, secrets = engine_config()
    try:
        _, config = loader.load_from_values(pulumi.get_stack(), values, secrets, stack_dir)
    except ConfigError as error:
        for problem in error.problems:
            pulumi.log.error(problem.line())
        raise pulumi.RunError(
            f"{len(error.problems)} configuration problem(s) in stack {pulumi.get_stack()}; "
            "nothing was created"
        ) from None
    return config


def serving_stack_args(config: StackConfig, cluster: EksCluster) -> ServingStackArgs:
    """Map validated config onto component args (components never see the config models)."""
    group = config.gpu_node_group
    instance = checks.resolve_instance_type(config)
    assert instance is not None  # guaranteed by checks.check
    tags = {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": config.environment.value}
    prometheus = config.observability.prometheus
    installs_prometheus = prometheus.mode is PrometheusMode.INSTALL
    alerts = config.observability.gpu_alerts
    node_group_name = f"gpu-{instance.name.replace('.', '-')}"
    return ServingStackArgs(
        node_group_name=node_group_name,
        node_group=GpuNodeGroupArgs(
            cluster_name=config.cluster.name,
            cluster_security_group_id=cluster.cluster_security_group_id,
            kubernetes_version=config.cluster.kubernetes_version,
            instance=instance,
            subnet_ids=[s.id for s in group.subnets],
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
        ),
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
        ),
        prometheus=prometheus_stack.PrometheusStackArgs(
            namespace=prometheus.namespace,
            chart_version=prometheus.chart_version,
            grafana_admin_password=pulumi.Output.secret(
                config.grafana_admin_password.get_secret_value()  # type: ignore[union-attr]
            ),
        )
        if installs_prometheus
        else None,
        prometheus_url=prometheus.url,
    )


def run() -> None:
    config = load_config()
    cluster = lookup_cluster(config.cluster.name)
    provider = kubernetes_provider("kubernetes", cluster)
    stack = ServingStack(
        "llm-serving",
        serving_stack_args(config, cluster),
        pulumi.ResourceOptions(providers={"kubernetes": provider}),
    )
    pulumi.export("environment", config.environment.value)
    pulumi.export("gpuNodeSelector", stack.gpu_node_group.node_selector)
    pulumi.export("gpuTolerations", stack.gpu_node_group.tolerations)
    pulumi.export("gpusPerNode", stack.gpu_node_group.gpus_per_node)
    pulumi.export("maxGpus", stack.gpu_node_group.max_gpus)
    pulumi.export("prometheusUrl", stack.prometheus_url)
