"""The one Kubernetes provider of a stack: its EKS cluster (looked up or created), authenticated per call.

Built once at stack level and handed to every Kubernetes component through `opts`, so no component
can talk to a different cluster by accident. No token is stored: `aws eks get-token` runs per call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class EksCluster:
    """What the stack needs to know about the existing cluster, looked up by name."""

    name: str
    endpoint: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    region: pulumi.Output[str]
    vpc_id: pulumi.Output[str]
    vpc_cidr: pulumi.Output[str]


def lookup_cluster(name: str, opts: pulumi.InvokeOptions | None = None) -> EksCluster:
    """Read the cluster's endpoint, CA and security group; the cluster itself is not managed here."""
    cluster = aws.eks.get_cluster_output(name=name, opts=opts)
    region = aws.get_region_output(opts=opts)
    vpc_id = cluster.vpc_config.apply(lambda v: v.vpc_id)
    return EksCluster(
        name=name,
        endpoint=cluster.endpoint,
        certificate_authority=cluster.certificate_authorities.apply(lambda cas: cas[0].data),
        cluster_security_group_id=cluster.vpc_config.apply(lambda v: v.cluster_security_group_id),
        region=region.region,
        vpc_id=vpc_id,
        vpc_cidr=aws.ec2.get_vpc_output(id=vpc_id, opts=opts).cidr_block,
    )


@dataclass(frozen=True)
class PodIdentityRole:
    """A role only this cluster's Pod Identity assumes, its inline policy, the admission guard that keeps the
    service account's pods out until its association is in effect (`pod_identity_guard`), and the association that
    hands the role to that account. What runs under the role depends on `ready`: the guard, then the association."""

    role: aws.iam.Role
    policy: aws.iam.RolePolicy
    association: aws.eks.PodIdentityAssociation
    guard: list[pulumi.Resource]

    @property
    def ready(self) -> list[pulumi.Resource]:
        return [*self.guard, self.association]


def pod_identity_guard(prefix: str, *, namespace: str, service_account: str, parent: pulumi.Resource,
                       after: list[pulumi.Resource] | None = None) -> list[pulumi.Resource]:
    """`<prefix>-admission-policy` and `<prefix>-admission-binding` (pod_identity.admission_guard), children of
    `parent` on its Kubernetes provider, created after `after`: pods of `namespace`/`service_account` are denied
    until EKS Pod Identity injects their credentials, and their controller retries them (the module docstring of
    pod_identity.py says why this, not a delay).

    Create it before what runs under the association, which depends on it. An API server starts enforcing a new
    binding at its next policy refresh, a second at most after its informer sees it (kubernetes staging/src/k8s.io/
    apiserver/pkg/admission/plugin/policy/generic/policy_source.go, policyRefreshIntervalDefault): a pod created
    within that second whose association is not in effect yet is still admitted without credentials, the one
    window this order leaves (docs/components.md, "Pod Identity admission guards"). Pulumi deletes in the reverse
    order: the guard goes once no workload under it is left to create a pod, before what `after` names."""
    from .manifests import manifest_resource
    from .pod_identity import admission_guard

    policy, binding = admission_guard(namespace, service_account)
    created = manifest_resource(f"{prefix}-admission-policy", policy,
                                pulumi.ResourceOptions(parent=parent, depends_on=after or []))
    # A binding whose policy is missing is skipped (policy_source.go, calculatePolicyData): the policy first.
    return [created, manifest_resource(f"{prefix}-admission-binding", binding,
                                       pulumi.ResourceOptions(parent=parent, depends_on=[created]))]


def pod_identity_role(prefix: str, *, cluster_name: str, namespace: str, service_account: str,
                      policy: pulumi.Input[str], description: str, tags: dict[str, str], parent: pulumi.Resource,
                      association_after: list[pulumi.Resource] | None = None) -> PodIdentityRole:
    """`<prefix>-role`, `<prefix>-policy`, the admission guard (`pod_identity_guard`), then
    `<prefix>-pod-identity`, children of `parent`. Needs the eks-pod-identity-agent add-on (a checked
    prerequisite). What runs under the role depends on `ready` and so comes last: a pod created before the
    association is in effect is refused and retried, never admitted without credentials.

    The guard comes before the association: an API server enforces a new binding only at its next policy refresh,
    up to a second after it is created (k8s.io/apiserver pkg/admission/plugin/policy/generic/policy_source.go,
    policyRefreshInterval), while an association can take effect later than its create returns (seconds:
    CreatePodIdentityAssociation, aws/eks-pod-identity-agent#52). Created after the association, a guard could
    start refusing only after the first pods, admitted without credentials in that gap, and a Deployment's pod
    would then never get them. The price: when the association's own create fails, the guard stays and refuses the
    account's new pods until the next `up` creates the association; none of ours exist yet on a first up, and on a
    later one the association already exists. The association waits for the role's policy and for
    `association_after`, so a pod admitted the moment it is in effect has its permissions too."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(f"{prefix}-role",
                        assume_role_policy=pod_identity_trust(cluster_name, namespace, service_account, parent),
                        description=description, tags=tags, opts=child)
    role_policy = aws.iam.RolePolicy(f"{prefix}-policy", role=role.id, policy=policy, opts=child)
    guard = pod_identity_guard(prefix, namespace=namespace, service_account=service_account, parent=parent,
                               after=[role_policy])
    association = aws.eks.PodIdentityAssociation(
        f"{prefix}-pod-identity", cluster_name=cluster_name, namespace=namespace, service_account=service_account,
        role_arn=role.arn, tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[role_policy, *guard, *(association_after or [])]),
    )
    return PodIdentityRole(role, role_policy, association, guard)


def pod_identity_trust(cluster_name: str, namespace: str, service_account: str,
                       parent: pulumi.Resource) -> pulumi.Output[str]:
    """The Pod Identity trust policy (JSON) for one service account of this account's cluster `cluster_name`."""
    from .aws_iam import pod_identity_trust_policy

    # The cluster's ARN is built, not looked up: with `cluster.mode: create` the cluster does not exist
    # yet at preview, and an eks:DescribeCluster invoke of a missing cluster fails the preview.
    invoke = pulumi.InvokeOptions(parent=parent)
    return pulumi.Output.all(
        aws.get_partition_output(opts=invoke).partition,
        aws.get_region_output(opts=invoke).region,
        aws.get_caller_identity_output(opts=invoke).account_id,
        namespace,
    ).apply(lambda v: json.dumps(pod_identity_trust_policy(
        f"arn:{v[0]}:eks:{v[1]}:{v[2]}:cluster/{cluster_name}", v[3], service_account)))


def subnet_cidr(subnet_id: str, opts: pulumi.InvokeOptions | None = None) -> pulumi.Output[str]:
    """A subnet's IPv4 range, read at preview (ec2:DescribeSubnets)."""
    return aws.ec2.get_subnet_output(id=subnet_id, opts=opts).cidr_block


def cluster_version(name: str) -> str:
    """The cluster's Kubernetes minor (EKS reports e.g. "1.34"), read while the program runs, so a
    mismatch can stop it before any resource is registered."""
    return aws.eks.get_cluster(name=name).version


def vpc_cni_configuration(name: str) -> str | None:
    """The `vpc-cni` EKS add-on's configuration values (JSON), read while the program runs; None when
    the cluster runs the CNI without the managed add-on (nothing to read)."""
    try:
        return aws.eks.get_addon(addon_name="vpc-cni", cluster_name=name).configuration_values
    except Exception:  # noqa: BLE001 - a missing add-on is an answer here, not a failure
        return None


def kubeconfig(cluster_name: str, endpoint: str, certificate_authority: str, region: str) -> str:
    """A kubeconfig whose user runs `aws eks get-token`, so credentials never land in state."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster_name,
                    "cluster": {"server": endpoint, "certificate-authority-data": certificate_authority},
                }
            ],
            "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": "aws"}}],
            "current-context": cluster_name,
            "users": [
                {
                    "name": "aws",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": [
                                "eks", "get-token",
                                "--cluster-name", cluster_name,
                                "--region", region,
                                "--output", "json",
                            ],
                            "interactiveMode": "Never",
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )


def kubernetes_provider(
    name: str, cluster: EksCluster, opts: pulumi.ResourceOptions | None = None
) -> k8s.Provider:
    """The stack's Kubernetes provider; server-side apply so Helm- and kubectl-owned fields coexist."""
    config = pulumi.Output.all(cluster.endpoint, cluster.certificate_authority, cluster.region).apply(
        lambda args: kubeconfig(cluster.name, args[0], args[1], args[2])
    )
    return k8s.Provider(
        name,
        kubeconfig=config,
        enable_server_side_apply=True,
        # An unreachable cluster (VPN down, expired SSO) must fail the update, never silently drop
        # the GPU workloads from state as if they had been deleted.
        delete_unreachable=False,
        opts=opts,
    )
