"""Every preflight check, in the order it runs, with the calls it makes: the docs' table and the
read-only IAM policy are generated from and tested against this list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stacks.preflight import aws_checks, existing_checks, hub, kube_checks, node_checks, reference_checks, s3_checks
from stacks.preflight.context import Context, guarded
from stacks.preflight.result import Finding


@dataclass(frozen=True)
class Check:
    id: str
    what: str  # what it proves, for the docs
    aws: tuple[str, ...]  # IAM actions (each is also the API operation it names)
    other: str  # Kubernetes reads or HTTP requests
    run: Callable[[Context], list[Finding]]


CHECKS: tuple[Check, ...] = (
    Check("cluster.exists", "the cluster is there, in the stack's region", ("eks:DescribeCluster",), "",
          aws_checks.cluster_exists),
    Check("cluster.active", "its status is ACTIVE", (), "(DescribeCluster's answer)", aws_checks.cluster_active),
    Check("cluster.version", "its Kubernetes minor equals `cluster.kubernetesVersion`", (),
          "(DescribeCluster's answer)", aws_checks.cluster_version),
    Check("cluster.subnets", "every node subnet exists, sits in the cluster's VPC and in the configured zone",
          ("ec2:DescribeSubnets",), "", aws_checks.cluster_subnets),
    Check("iam.references", "every IAM role ARN and security-group id the stack names (staging nodes, existing GPU "
          "nodes, the ALB controller, admin roles) exists; a group is in the cluster's VPC",
          ("iam:GetRole", "ec2:DescribeSecurityGroups"), "", reference_checks.references),
    Check("cluster.endpoint", "the API server answers the program's kubeconfig and knows the caller "
          "(access entry or aws-auth)", (), "GET /version; list namespaces", kube_checks.endpoint),
    Check("addons.pod-identity-agent", "`eks-pod-identity-agent` runs when the EFS CSI add-on, Cluster "
          "Autoscaler, the load balancer controller or the S3 weights roles use Pod Identity", ("eks:DescribeAddon",),
          "", aws_checks.pod_identity_agent),
    Check("addons.vpc-cni-network-policy", "the `vpc-cni` add-on enforces NetworkPolicies "
          "(`enableNetworkPolicy`)", ("eks:DescribeAddon",), "", aws_checks.vpc_cni_network_policy),
    Check("addons.conflicts", "no add-on the program creates exists already (unless this stack's, by tags)",
          ("eks:DescribeAddon",), "", aws_checks.addon_conflicts),
    Check("addons.configuration", "every `configurationValues` the program sends passes the add-on's schema "
          "for the version it will run", ("eks:DescribeAddon", "eks:DescribeAddonVersions",
                                          "eks:DescribeAddonConfiguration"), "", aws_checks.addon_configuration),
    Check("s3.bucket", "with `weightsStorage.s3.bucketName`, the bucket exists, this identity reads it, and it is in "
          "the stack's region", ("s3:GetBucketLocation", "s3:ListBucket"), "", s3_checks.s3_bucket),
    Check("s3.gateway-endpoint", "on S3, an S3 gateway endpoint of the cluster's VPC is on every GPU subnet's route "
          "table (else cold starts stream through the NAT gateway), and no S3 interface endpoint's private DNS "
          "answers the VPC's own lookups (else the pods' S3 traffic goes to its addresses, which the prefix-list "
          "fence refuses)", ("ec2:DescribeVpcEndpoints", "ec2:DescribeRouteTables"), "",
          s3_checks.s3_gateway_endpoint),
    Check("s3.prefix-list", "where the pods that stream from the bucket are fenced to S3 "
          "(`weightsStorage.s3.vpcEndpoint`, a created VPC), S3's AWS-managed prefix list `com.amazonaws.<region>.s3` "
          "answers with the CIDRs the preview reads into their NetworkPolicies", ("ec2:DescribePrefixLists",), "",
          s3_checks.s3_prefix_list),
    Check("staging.disk", "on S3, a CPU node (untainted, amd64, non-GPU managed node group) has the allocatable "
          "ephemeral storage the staging Job requests; a created cluster's CPU nodes are sized for it",
          ("eks:ListNodegroups", "eks:DescribeNodegroup", "ec2:DescribeLaunchTemplateVersions"), "",
          node_checks.staging_disk),
    Check("nodegroup.ami-release", "a pinned `gpuNodeGroup.amiReleaseVersion` is a release EKS publishes for the AMI "
          "type and the Kubernetes minor (its public SSM parameter)", ("ssm:GetParameter",), "",
          node_checks.ami_release),
    Check("quota.vcpus", "the family's On-Demand or Spot vCPU quota covers the peak nodes (bound plus a "
          "node-update group)", ("servicequotas:GetServiceQuota",), "", aws_checks.vcpu_quota),
    Check("capacity.offerings", "the instance type is offered in every configured zone",
          ("ec2:DescribeInstanceTypeOfferings",), "", aws_checks.instance_offerings),
    Check("capacity.reservation", "the reservation or Capacity Block exists, matches type and zone, holds "
          "the nodes and outlives the longest planned operation", ("ec2:DescribeCapacityReservations",), "",
          aws_checks.capacity_reservation),
    Check("k8s.prometheus-operator", "with `prometheus.mode: existing`, the Prometheus Operator's CRDs exist",
          (), "get customresourcedefinitions", kube_checks.prometheus_crds),
    Check("k8s.alb-controller", "where the cluster runs the load balancer controller (gateway mode, or ALB mode "
          "with an existing controller), its CRDs exist", (),
          "get customresourcedefinitions", kube_checks.alb_controller),
    Check("k8s.gpu-nodes", "with `gpuNodeGroup.mode: existing`, nodes carry the selector's labels and advertise the "
          "GPUs a serving pod asks for (none yet: could not check, the provisioner launches them)", (),
          "list nodes (by label)", existing_checks.gpu_nodes),
    Check("k8s.device-plugin", "with `addons.nvidiaDevicePlugin.mode: existing` on a created node group, a device "
          "plugin DaemonSet runs and tolerates the group's GPU taint", (), "list daemonsets (all namespaces)",
          existing_checks.device_plugin),
    Check("k8s.gateway", "with `edge.gateway`, the Gateway exists, is Envoy Gateway's and programmed, and a listener "
          "for each host admits HTTPRoutes from the serving namespace", (),
          "get gateways, gatewayclasses (gateway.networking.k8s.io)", existing_checks.existing_gateway),
    Check("k8s.autoscaler", "with `autoscaling.controller: existing`, KEDA's ScaledObject CRD (or the custom metrics "
          "API prometheus-adapter serves) exists", (), "get customresourcedefinitions or apiservices",
          existing_checks.existing_autoscaler),
    Check("k8s.cert-manager-issuer", "the named cert-manager ClusterIssuer exists and is Ready", (),
          "get clusterissuers.cert-manager.io", kube_checks.cert_manager_issuer),
    Check("k8s.tls-secret", "`edge.tls.secretName` exists in the edge namespace as a kubernetes.io/tls Secret",
          (), "get secrets (edge namespace)", kube_checks.tls_secret),
    Check("k8s.collisions", "no Service named like a model exists unless this program manages it", (),
          "get services (serving namespace)", kube_checks.service_collisions),
    Check("k8s.install-conflicts", "no other Helm release of a chart the program installs (or of a rival: "
          "Karpenter), and no Helm install of an add-on it creates", (),
          "list deployments and daemonsets (all namespaces)", kube_checks.chart_conflicts),
    Check("model.hub", "the Hugging Face token reads the pinned revision, and the staging Job's patterns "
          "keep its weights", (), "GET huggingface.co/api/models/<id>/revision/<rev>", hub.model_sources),
    Check("lora.adapters", "each LoRA adapter's adapter_config.json at its commit names the model's modelId as its "
          "base and a rank at most maxLoraRank (the staging Job's own check, before the up)", (),
          "GET huggingface.co/<adapter>/resolve/<rev>/adapter_config.json", hub.adapter_sources),
    Check("eval.tasks", "each eval task file exists in its dataset at the pinned commit with the pinned SHA-256 (the "
          "eval's staging Job refuses any other); a wrong pin is answered with main's commit and digest", (),
          "GET huggingface.co/api/datasets/<id>/revision/<rev>?blobs=true", hub.eval_sources),
)


def run(ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        # (A default argument binds the check; mypy cannot type a lambda with one.)
        findings += guarded(check.id, check.aws, lambda c=check: c.run(ctx))  # type: ignore[misc]
    return findings


def aws_actions() -> list[str]:
    """Every IAM action the checks need, sorted: the read-only policy's Action list."""
    return sorted({action for check in CHECKS for action in check.aws})
