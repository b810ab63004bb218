"""The pinned GPU AMI release against EKS's public SSM parameters, and the CPU nodes' disk against the S3 staging
Job's ephemeral-storage request: pass, fail and could-not-check through botocore's Stubber."""

from __future__ import annotations

import dataclasses

import pytest

from llm_serving import serving
from llm_serving.cluster import allocatable_ephemeral_gib
from stacks import environment
from stacks.config import StorageBackend
from stacks.config.files import PROJECT_DIR
from stacks.preflight import intent
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import CLUSTER, Aws, context, stack_intent
from tests.stacks.preflight.test_aws_checks import run

NVIDIA = "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/nvidia"
# prod pins 1.34.2-20261101: the AMI of that date, named after it.
PROD_RELEASE_PARAMETER = f"{NVIDIA}/amazon-eks-node-al2023-x86_64-nvidia-1.34-v20261101/image_id"
RECOMMENDED = f"{NVIDIA}/recommended/release_version"


@pytest.fixture
def aws():
    clients = Aws()
    yield clients
    clients.done()


def parameter(name: str, value: str = "ami-0123456789abcdef0") -> dict:
    return {"Parameter": {"Name": name, "Type": "String", "Value": value, "Version": 1}}


def test_a_published_ami_release_passes_with_its_image(aws):
    aws.respond("ssm", "get_parameter", parameter(PROD_RELEASE_PARAMETER), {"Name": PROD_RELEASE_PARAMETER})
    (finding,) = run("nodegroup.ami-release", context(aws))
    assert finding.outcome is Outcome.PASS
    assert finding.reason == ("AL2023_x86_64_NVIDIA release 1.34.2-20261101 is published for Kubernetes 1.34 in "
                              "us-east-1 (ami-0123456789abcdef0); the parameter names the AMI's date (v20261101), "
                              "not the kubelet 1.34.2, which is not compared")


def test_an_unpublished_ami_release_fails_naming_the_key_and_the_recommended_release(aws):
    aws.error("ssm", "get_parameter", "ParameterNotFound", 400, {"Name": PROD_RELEASE_PARAMETER})
    aws.respond("ssm", "get_parameter", parameter(RECOMMENDED, "1.34.4-20261120"), {"Name": RECOMMENDED})
    (finding,) = run("nodegroup.ami-release", context(aws))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason.startswith("gpuNodeGroup.amiReleaseVersion 1.34.2-20261101: EKS publishes no "
                                     "AL2023_x86_64_NVIDIA release 1.34.2-20261101 for Kubernetes 1.34 in us-east-1")
    assert finding.fix.startswith("set gpuNodeGroup.amiReleaseVersion to a published release, e.g. the recommended "
                                  "1.34.4-20261120")
    assert f"aws ssm get-parameters-by-path --path {NVIDIA} --recursive --region us-east-1" in finding.fix


def test_a_bottlerocket_release_is_looked_up_by_its_version_under_the_nvidia_variant(aws):
    release = "/aws/service/bottlerocket/aws-k8s-1.34-nvidia/x86_64/1.47.0-6154605b/image_id"
    aws.error("ssm", "get_parameter", "ParameterNotFound", 400, {"Name": release})
    aws.error("ssm", "get_parameter", "ParameterNotFound", 400,
              {"Name": "/aws/service/bottlerocket/aws-k8s-1.34-nvidia/x86_64/latest/image_version"})
    bottlerocket = stack_intent(ami_type="BOTTLEROCKET_x86_64_NVIDIA", ami_release="1.47.0-6154605b")
    (finding,) = run("nodegroup.ami-release", context(aws, bottlerocket))
    assert finding.outcome is Outcome.FAIL
    assert "gpuNodeGroup.amiReleaseVersion 1.47.0-6154605b" in finding.reason
    assert "e.g. the recommended one (aws ssm get-parameter --name" in finding.fix


def test_ssm_refused_could_not_check_with_the_permission(aws):
    aws.error("ssm", "get_parameter", "AccessDeniedException", 400, {"Name": PROD_RELEASE_PARAMETER})
    (finding,) = run("nodegroup.ami-release", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason == "GetParameter refused: AccessDeniedException"
    assert finding.fix.startswith("allow ssm:GetParameter for this identity")


def test_an_ami_type_without_a_known_parameter_scheme_could_not_check(aws):
    (finding,) = run("nodegroup.ami-release", context(aws, stack_intent(ami_type="AL2023_ARM_64_NVIDIA")))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason.startswith("no SSM parameter scheme known for gpuNodeGroup.amiType AL2023_ARM_64_NVIDIA")


def test_a_release_of_another_shape_could_not_check(aws):
    (finding,) = run("nodegroup.ami-release", context(aws, stack_intent(ami_release="v20261101")))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason.startswith("gpuNodeGroup.amiReleaseVersion v20261101 is not of the form")


def test_no_pinned_release_looks_nothing_up(aws):
    assert stack_intent("dev").ami_release is None
    assert run("nodegroup.ami-release", context(aws, stack_intent("dev"))) == []


S3_EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-s3.yaml"
SANDBOX = PROJECT_DIR / "examples" / "Pulumi.sandbox.yaml"


def s3_intent(path=S3_EXAMPLE):
    _, config = environment.load_stack_file(path)
    weights = dataclasses.replace(config.weights_storage, backend=StorageBackend.S3)
    return intent("prod", "us-east-1", dataclasses.replace(config, weights_storage=weights))


def nodegroup(name: str, *, ami: str = "AL2023_x86_64_STANDARD", disk: int | None = None,
              template: dict | None = None, taints: tuple[dict, ...] = (), types: tuple[str, ...] = ("m7i.xlarge",)):
    group: dict = {"nodegroupName": name, "clusterName": "llm-prod", "amiType": ami, "instanceTypes": list(types),
                   "status": "ACTIVE"}
    if disk is not None:
        group["diskSize"] = disk
    if template is not None:
        group["launchTemplate"] = template
    if taints:
        group["taints"] = list(taints)
    return {"nodegroup": group}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
TEMPLATE = {"name": "llm-prod-cpu", "version": "3", "id": "lt-0123456789abcdef0"}


def template_version(device: str, size: int) -> dict:
    return {"LaunchTemplateVersions": [{
        "LaunchTemplateId": TEMPLATE["id"], "VersionNumber": 3,
        "LaunchTemplateData": {"BlockDeviceMappings": [{"DeviceName": device, "Ebs": {"VolumeSize": size}}]}}]}


def expect_groups(clients: Aws, *groups: dict) -> None:
    """ListNodegroups in two pages (the check follows nextToken), then one DescribeNodegroup per group."""
    names = [g["nodegroup"]["nodegroupName"] for g in groups]
    clients.respond("eks", "list_nodegroups", {"nodegroups": names[:1], "nextToken": "page-2"},
                    {"clusterName": "llm-prod"})
    clients.respond("eks", "list_nodegroups", {"nodegroups": names[1:]},
                    {"clusterName": "llm-prod", "nextToken": "page-2"})
    for name, group in zip(names, groups, strict=True):
        clients.respond("eks", "describe_nodegroup", group, {"clusterName": "llm-prod", "nodegroupName": name})


def test_the_staging_request_is_the_jobs_and_asked_only_on_s3():
    found = s3_intent()
    assert found.staging_ephemeral_gib == serving.S3_STAGE_EPHEMERAL_GIB == 68
    assert stack_intent("prod").staging_ephemeral_gib is None  # EFS: no scratch


def test_a_cpu_node_group_whose_launch_template_disk_fits_passes(aws):
    expect_groups(aws, nodegroup("llm-prod-gpu", ami="AL2023_x86_64_NVIDIA", taints=(GPU_TAINT,)),
                  nodegroup("llm-prod-cpu", template=TEMPLATE))
    aws.respond("ec2", "describe_launch_template_versions", template_version("/dev/xvda", 100),
                {"LaunchTemplateId": TEMPLATE["id"], "Versions": ["3"]})
    (finding,) = run("staging.disk", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.PASS
    assert finding.reason == ("CPU node group llm-prod-cpu (launch template llm-prod-cpu v3: /dev/xvda 100 GiB: 89 GiB "
                              "allocatable) can take the staging Job's 68 GiB ephemeral-storage request")


def test_cpu_node_groups_too_small_for_the_request_fail_naming_the_size_it_needs(aws):
    expect_groups(aws, nodegroup("llm-prod-gpu", ami="AL2023_x86_64_NVIDIA", taints=(GPU_TAINT,)),
                  nodegroup("llm-prod-cpu", disk=50))
    (finding,) = run("staging.disk", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason.startswith("no CPU node group offers the staging Job's 68 GiB ephemeral-storage request "
                                     "(llm-prod-cpu (diskSize 50 GiB: 44 GiB allocatable)")
    assert finding.fix.startswith("give an untainted amd64 node group a kubelet volume of 99 GiB or more")


def test_without_an_untainted_cpu_node_group_the_disk_could_not_check(aws):
    # Karpenter's or self-managed CPU nodes are not in the node-group API: only the tainted GPU group is.
    expect_groups(aws, nodegroup("llm-prod-gpu", ami="AL2023_x86_64_NVIDIA", taints=(GPU_TAINT,)),
                  nodegroup("llm-prod-arm", ami="AL2023_ARM_64_STANDARD", disk=200))
    (finding,) = run("staging.disk", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert ("no managed node group is an untainted amd64 CPU group (not for the Job: llm-prod-gpu: GPU nodes"
            in finding.reason)
    assert "llm-prod-arm: Arm nodes (AL2023_ARM_64_STANDARD)" in finding.reason
    assert finding.fix.startswith("check that an untainted amd64 node has 68Gi allocatable ephemeral-storage")


def test_instance_store_nodes_with_a_small_root_could_not_check(aws):
    expect_groups(aws, nodegroup("llm-prod-cpu", disk=20, types=("m6id.xlarge",)))
    (finding,) = run("staging.disk", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert ("of the managed node groups, llm-prod-cpu (diskSize 20 GiB; instance store the user data may use) may"
            in finding.reason)


def test_listing_node_groups_refused_could_not_check_with_the_permission(aws):
    aws.error("eks", "list_nodegroups", "AccessDeniedException", 403)
    (finding,) = run("staging.disk", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.fix.startswith("allow eks:ListNodegroups, eks:DescribeNodegroup, "
                                  "ec2:DescribeLaunchTemplateVersions for this identity")
    (finding,) = run("staging.disk", context(aws, s3_intent()))
    assert finding.fix == "fix cluster.exists first"


def test_a_created_clusters_cpu_nodes_are_sized_for_the_request_without_a_call(aws):
    created = s3_intent(SANDBOX)
    assert created.created_cpu_root_gib == 99 and allocatable_ephemeral_gib(99) >= 68
    (finding,) = run("staging.disk", context(aws, created))
    assert finding.outcome is Outcome.PASS
    assert finding.reason == ("the program gives its CPU nodes a 99 GiB root volume: 88 GiB allocatable >= the "
                              "staging Job's 68 GiB ephemeral-storage request")
    (finding,) = run("staging.disk", context(aws, dataclasses.replace(created, created_cpu_root_gib=50)))
    assert finding.outcome is Outcome.FAIL and "44 GiB allocatable" in finding.reason


def test_weights_off_s3_ask_nothing_of_the_nodes(aws):
    assert run("staging.disk", context(aws, cluster=CLUSTER)) == []
