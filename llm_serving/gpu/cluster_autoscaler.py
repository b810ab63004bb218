"""ClusterAutoscaler: the official chart in kube-system, with least-privilege IAM through EKS Pod Identity.

It discovers only node groups carrying this program's tag (node_autoscaling.DISCOVERY_TAG), so it
adds GPU nodes when vLLM pods are Pending and removes a GPU node only once it holds none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from llm_serving.platform import chart_images, helm_release, pod_identity_role, versions

from . import node_autoscaling


@dataclass(frozen=True)
class ClusterAutoscalerArgs:
    cluster_name: str
    region: pulumi.Input[str]
    chart_version: str
    image_tag: str
    node_group_name: str  # the logical name; its managed node groups are named <name>-<suffix>
    tags: dict[str, str]
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


class ClusterAutoscaler(pulumi.ComponentResource):
    """IAM role, Pod Identity association and the cluster-autoscaler release."""

    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:gpu:ClusterAutoscaler", name, None, opts)
        invoke = pulumi.InvokeOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account_id = aws.get_caller_identity_output(opts=invoke).account_id

        policy = pulumi.Output.all(partition, args.region, account_id).apply(
            lambda values: node_autoscaling.iam_policy(
                cluster_name=args.cluster_name, partition=values[0], region=values[1], account_id=values[2]
            )
        )
        # Needs the eks-pod-identity-agent add-on on the cluster (docs/operations.md, what it assumes).
        identity = pod_identity_role(
            name, cluster_name=args.cluster_name, namespace=node_autoscaling.NAMESPACE,
            service_account=node_autoscaling.SERVICE_ACCOUNT, policy=pulumi.Output.json_dumps(policy),
            description=f"Cluster Autoscaler for the llm-serving GPU node groups of {args.cluster_name}",
            tags=args.tags, parent=self,
        )
        values = pulumi.Output.from_input(args.region).apply(
            lambda region: node_autoscaling.chart_values(
                cluster_name=args.cluster_name,
                region=region,
                image_tag=args.image_tag,
                node_group_name=args.node_group_name,
            )
        )
        helm_release(
            f"{name}-release",
            chart="cluster-autoscaler",
            version=args.chart_version,
            release_namespace=node_autoscaling.NAMESPACE,
            values=values,
            parent=self,
            # Credentials are injected when a pod is admitted, and only once the association is in effect: the
            # association's admission guard, created after it (and so after the role's policy), refuses the
            # autoscaler's pods until then and the ReplicaSet retries them (llm_serving/platform/pod_identity.py).
            depends_on=identity.ready,
            image_digests=args.image_digests,
            # The chart lists one image per pinned minor (versions.py): this release runs the one of `image_tag`.
            images=[image for image in chart_images.runs(versions.CLUSTER_AUTOSCALER, args.chart_version)
                    if image.tag == args.image_tag],
        )
        self.role_arn = identity.role.arn
        self.register_outputs({"role_arn": self.role_arn})
