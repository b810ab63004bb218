"""LoadBalancerController: the AWS Load Balancer Controller's chart in kube-system, with its published
IAM policy on a role the controller assumes through EKS Pod Identity. It turns the Envoy Service
(type LoadBalancer) into an NLB and the ALB mode's Ingresses into an ALB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from llm_serving.platform import helm_release, pod_identity_role

from . import load_balancer


@dataclass(frozen=True)
class LoadBalancerControllerArgs:
    cluster_name: str
    region: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    chart_version: str
    # Where its pods run: the created cluster's CPU nodes; {} on an existing cluster (the GPU nodes'
    # taint keeps them off those).
    node_selector: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the chart's images with a digest there are
    # pulled by it (platform.helm_release); the others run by their chart's tag.
    image_digests: dict[str, str] = field(default_factory=dict)


class LoadBalancerController(pulumi.ComponentResource):
    """IAM role and policy, Pod Identity association, and the aws-load-balancer-controller release."""

    release: pulumi.Resource

    def __init__(self, name: str, args: LoadBalancerControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:edge:LoadBalancerController", name, None, opts)
        partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition
        identity = pod_identity_role(
            name, cluster_name=args.cluster_name, namespace=load_balancer.NAMESPACE,
            service_account=load_balancer.SERVICE_ACCOUNT,
            policy=partition.apply(lambda p: json.dumps(load_balancer.iam_policy(p))),
            description=f"AWS Load Balancer Controller of {args.cluster_name}", tags=args.tags, parent=self,
        )
        values = pulumi.Output.all(args.region, args.vpc_id).apply(
            lambda v: load_balancer.chart_values(
                cluster_name=args.cluster_name, region=v[0], vpc_id=v[1], node_selector=args.node_selector
            )
        )
        # The release waits for the Deployment's readiness, which includes the webhook server
        # (v3.5.0 main.go: the "ready-webhook" readyz check): what depends on it may create Ingresses,
        # whose validating webhook fails closed. On destroy it goes after them, so the controller is
        # still there to delete their load balancers and remove its finalizers.
        self.release = helm_release(
            f"{name}-release",
            chart="aws-load-balancer-controller",
            version=args.chart_version,
            release_namespace=load_balancer.NAMESPACE,
            values=values,
            parent=self,
            # Credentials are injected when a pod is admitted, and only once the association is in effect
            # (seconds after it is created): the association's admission guard, created after it (and so after
            # the role's policy), refuses the controller's pods until then and the ReplicaSet retries them
            # (llm_serving/platform/pod_identity.py).
            depends_on=identity.ready,
            image_digests=args.image_digests,
        )
        self.role_arn = identity.role.arn
        self.register_outputs({"role_arn": self.role_arn})
