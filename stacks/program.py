"""The repository's Pulumi program: one consumer of the llm_serving library.

`__main__.py` calls `run()`: read this stack's config from the engine (`Pulumi.<stack>.yaml`, with
`extends`), validate it as `ServingStackArgs`, create the cluster first when the stack says
`cluster.mode: create`, and hand everything to `ServingStack`, which plans and builds the rest. Invalid
config is logged one line per problem and stops the program with a `RunError` (no traceback) before any
resource is registered.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.runtime import config as runtime_config

from llm_serving import cluster as created_cluster
from llm_serving.platform import EksCluster, kubernetes_provider, lookup_cluster, manifest_resource
from llm_serving.stack import ClusterFacts, ServingStack, ServingStackArgs, planning
from llm_serving.stack.rules import cluster as cluster_checks
from stacks import environment, reader
from stacks.config import SECRET_KEYS, ClusterMode, Environment
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



def refuse(problems: list, what: str) -> None:
    if problems:
        for problem in problems:
            pulumi.log.error(problem.line())
        raise pulumi.RunError(f"stack {pulumi.get_stack()} {what}; nothing was created")


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
                nodes.instance_type, nodes.min_nodes, nodes.max_nodes, nodes.desired_nodes,
                planning.system_root_volume_gib(config),
            ),
            public_access_cidrs=tuple(create.public_access_cidrs),
            log_types=tuple(t.value for t in create.log_types),
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


def record_secret_namespaces(created: dict[str, pulumi.Resource], named: set[str]) -> pulumi.ResourceTransformation:
    """Collects, as the serving stack registers them, the namespaces it creates (by name, with the resource a
    binding inside waits for) and the plain namespace names its Secrets and Helm releases name (a namespace
    given as an output is one the stack creates)."""

    def field(value: Any, key: str) -> Any:
        return value.get(key) if isinstance(value, dict) else getattr(value, key, None)

    def transformation(args: pulumi.ResourceTransformationArgs) -> None:
        if args.type_ == "kubernetes:core/v1:Namespace":
            name = field(args.props.get("metadata"), "name")
            if isinstance(name, str):
                created[name] = args.resource
        elif args.type_ in ("kubernetes:core/v1:Secret", "kubernetes:helm.sh/v3:Release"):
            ns = (field(args.props.get("metadata"), "namespace") if args.type_.endswith("Secret")
                  else args.props.get("namespace"))
            if isinstance(ns, str):
                named.add(ns)

    return transformation


def preview_reader(created: dict[str, pulumi.Resource], named: set[str], opts: pulumi.ResourceOptions) -> None:
    """The read-only RBAC of the preview and drift roles (stacks/reader.py). Each Secrets binding waits for
    its namespace when the stack creates it (kube-system exists); nothing else waits."""
    for manifest in (reader.cluster_role(), reader.cluster_role_binding(), reader.secret_role()):
        manifest_resource(f"preview-reader-{manifest['kind'].lower()}-{manifest['metadata']['name']}",
                          manifest, opts)
    for namespace in reader.secret_namespaces(created, named):
        after = [created[namespace]] if namespace in created else []
        manifest_resource(f"preview-reader-secrets-{namespace}", reader.secret_role_binding(namespace),
                          pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)))


def created_facts(config: ServingStackArgs, created: created_cluster.Cluster) -> ClusterFacts:
    """What ServingStack cannot look up about a cluster this up creates: its network and its CPU nodes, which
    stand in for the staging nodes where the stack file is silent."""
    return ClusterFacts(
        vpc_id=created.eks.vpc_id,
        cluster_security_group_id=created.eks.cluster_security_group_id,
        region=created.eks.region,
        gpu_subnet_ids={s.availability_zone: created.private_subnet_ids[s.availability_zone]
                        for s in config.gpu_node_group.subnets},
        staging_node_role_arn=created.system_node_role_arn,
        staging_node_security_group_id=created.system_node_security_group_id,
        staging_node_selector={created_cluster.SYSTEM_NODE_LABEL: "system"},
    )


def run() -> None:
    config = load_config()
    opts: pulumi.ResourceOptions
    cluster: EksCluster
    if config.cluster.mode is ClusterMode.CREATE:
        created = create_cluster(config, planning.resource_tags(config))
        cluster = created.eks
        provider = kubernetes_provider("kubernetes", cluster, pulumi.ResourceOptions(depends_on=created.ready))
        opts = pulumi.ResourceOptions(providers={"kubernetes": provider}, transformations=[after(created.ready)])
        config = dataclasses.replace(config, cluster_facts=created_facts(config, created))
        pulumi.export("clusterName", config.cluster.name)
        pulumi.export("vpcId", cluster.vpc_id)
    else:
        cluster = lookup_cluster(config.cluster.name)
        provider = kubernetes_provider("kubernetes", cluster)
        opts = pulumi.ResourceOptions(providers={"kubernetes": provider})
    created_namespaces: dict[str, pulumi.Resource] = {}
    named_namespaces: set[str] = set()
    stack = ServingStack("llm-serving", config, pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
        transformations=[record_secret_namespaces(created_namespaces, named_namespaces)])))
    preview_reader(created_namespaces, named_namespaces, opts)
    pulumi.export("environment", config.environment.value)
    pulumi.export("gpuNodeSelector", stack.gpu_node_selector)
    pulumi.export("gpuTolerations", stack.gpu_tolerations)
    pulumi.export("gpusPerNode", stack.gpus_per_node)
    pulumi.export("maxGpus", stack.max_gpus)
    pulumi.export("prometheusUrl", stack.prometheus_url)
    pulumi.export("modelEndpoints", stack.endpoints)
    pulumi.export("modelUrls", stack.urls)
