"""Checks of what the nodes need before an up creates or uses them: the pinned GPU AMI release is one EKS
publishes (SSM public parameters), and a CPU node can take the S3 staging Job's ephemeral storage."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from llm_serving.cluster import EKS_AMI_ROOT_GIB, allocatable_ephemeral_gib, disk_for_ephemeral_gib
from stacks.config import AmiType
from stacks.preflight.context import ClusterUnknown, Context
from stacks.preflight.result import Finding, failed, passed, unknown


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class ReleaseParameters:
    """Where EKS publishes the releases of one AMI type, as public SSM parameters (ssm:GetParameter)."""

    root: str  # every release for a Kubernetes minor is below it ({minor})
    form: str  # what a release version looks like, for the messages
    pattern: re.Pattern[str]  # the same, with the parts the parameter name is made of
    release: str  # below root: the parameter of one release ({minor} and the pattern's groups)
    recommended: str  # below root: the version of the release EKS takes when none is pinned
    unchecked: str = ""  # what of the version the parameter's name does not carry ({groups})

    def name(self, minor: str, version: str) -> str | None:
        match = self.pattern.fullmatch(version)
        if match is None:
            return None
        return f"{self.root.format(minor=minor)}/{self.release.format(minor=minor, **match.groupdict())}"

    def note(self, version: str) -> str:
        match = self.pattern.fullmatch(version)
        return self.unchecked.format(**match.groupdict()) if match and self.unchecked else ""


RELEASES = {
    # /aws/service/eks/optimized-ami/<minor>/amazon-linux-2023/x86_64/nvidia/ holds `recommended/` (EKS user guide,
    # https://docs.aws.amazon.com/eks/latest/userguide/retrieve-ami-id.html) and one entry per AMI, named like the AMI:
    # amazon-eks-node-al2023-x86_64-nvidia-<minor>-v<date>/image_id (Karpenter's resolvePath for an al2023@v<date>
    # alias, https://github.com/aws/karpenter-provider-aws/blob/v1.14.1/pkg/providers/amifamily/al2023.go). An EKS
    # release version <minor>.<patch>-<date> (e.g. 1.34.2-20261101) is that AMI: the date, as v<date>, is in the
    # name, the kubelet patch is not.
    # `recommended/release_version` is what terraform-aws-modules/terraform-aws-eks passes as a node group's
    # release_version (modules/eks-managed-node-group/main.tf at v21.19.0).
    AmiType.AL2023_X86_64_NVIDIA.value: ReleaseParameters(
        root="/aws/service/eks/optimized-ami/{minor}/amazon-linux-2023/x86_64/nvidia",
        form="<kubernetes minor>.<patch>-<YYYYMMDD>, e.g. 1.34.2-20261101",
        pattern=re.compile(r"(?P<kubelet>\d+\.\d+\.\d+)-(?P<date>\d{8})"),
        release="amazon-eks-node-al2023-x86_64-nvidia-{minor}-v{date}/image_id",
        recommended="recommended/release_version",
        unchecked="the parameter names the AMI's date (v{date}), not the kubelet {kubelet}, which is not compared",
    ),
    # Bottlerocket publishes {variant}/{arch}/{image_version}/image_id (bottlerocket-os/bottlerocket
    # tools/pubsys/policies/ssm/defaults.toml at v1.26.0) under /aws/service/bottlerocket/, the NVIDIA variant being
    # aws-k8s-<minor>-nvidia (aws/karpenter-provider-aws pkg/providers/amifamily/bottlerocket.go at v1.14.1; EKS
    # user guide: https://docs.aws.amazon.com/eks/latest/userguide/retrieve-ami-id-bottlerocket.html). Its
    # image_version is the EKS release version: terraform-aws-modules/terraform-aws-eks passes `latest/image_version`
    # as a node group's release_version (modules/eks-managed-node-group/main.tf at v21.19.0).
    AmiType.BOTTLEROCKET_X86_64_NVIDIA.value: ReleaseParameters(
        root="/aws/service/bottlerocket/aws-k8s-{minor}-nvidia/x86_64",
        form="<os version>-<build>, e.g. 1.47.0-6154605b",
        pattern=re.compile(r"(?P<version>\d+\.\d+\.\d+-[0-9a-f]{8})"),
        release="{version}/image_id",
        recommended="latest/image_version",
    ),
}


def _recommended(ctx: Context, scheme: ReleaseParameters, minor: str) -> str | None:
    """The release EKS would take, for the fix; None when it cannot be read (the fix then gives the command)."""
    try:
        return str(ctx.ssm.get_parameter(Name=f"{scheme.root.format(minor=minor)}/{scheme.recommended}")
                   ["Parameter"]["Value"])
    except ClientError:
        return None


def ami_release(ctx: Context) -> list[Finding]:
    """A pinned gpuNodeGroup.amiReleaseVersion is a release EKS publishes for the AMI type and the Kubernetes minor:
    CreateNodegroup refuses any other, after the up has spent its first tens of minutes."""
    i = ctx.intent
    version = i.ami_release
    if version is None:
        return []  # no pin (EKS takes the newest release) or nodes the stack does not create
    check = "nodegroup.ami-release"
    key = "gpuNodeGroup.amiReleaseVersion"
    minor = i.kubernetes_version
    scheme = RELEASES.get(i.ami_type)
    if scheme is None:
        return [unknown(check, f"no SSM parameter scheme known for gpuNodeGroup.amiType {i.ami_type}: release "
                        f"{version} not looked up", f"check that {version} is a {i.ami_type} release for Kubernetes "
                        f"{minor} in the AMI type's release notes before the up")]
    name = scheme.name(minor, version)
    if name is None:
        return [unknown(check, f"{key} {version} is not of the form {scheme.form}, which is how {i.ami_type} "
                        "releases are published: not looked up", f"check {key} against the published releases "
                        f"(aws ssm get-parameters-by-path --path {scheme.root.format(minor=minor)} --recursive "
                        f"--region {i.region} --query 'Parameters[].Name')")]
    root = scheme.root.format(minor=minor)
    try:
        image = ctx.ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as error:
        if _code(error) != "ParameterNotFound":
            raise
        recommended = _recommended(ctx, scheme, minor)
        newest = f"e.g. the recommended {recommended}" if recommended else "e.g. the recommended one"
        return [failed(check, f"{key} {version}: EKS publishes no {i.ami_type} release {version} for Kubernetes "
                       f"{minor} in {i.region} ({name} does not exist): creating the GPU node group would fail",
                       f"set {key} to a published release, {newest} (aws ssm get-parameter --name "
                       f"{root}/{scheme.recommended} --region {i.region}); all of them: aws ssm "
                       f"get-parameters-by-path --path {root} --recursive --region {i.region} --query "
                       "'Parameters[].Name'; or unset it for the newest")]
    note = scheme.note(version)
    return [passed(check, f"{i.ami_type} release {version} is published for Kubernetes {minor} in {i.region} "
                   f"({image})" + (f"; {note}" if note else ""))]


# EKS managed node group AMI types (EKS API, Nodegroup amiType): the staging Job asks for amd64 Linux and
# tolerates no taint; GPU, Neuron, Arm and Windows groups are not where it should or can run.
NOT_FOR_THE_JOB = (("NVIDIA", "GPU"), ("GPU", "GPU"), ("NEURON", "Neuron"), ("ARM", "Arm"), ("WINDOWS", "Windows"))
# Where the kubelet's directory (pods' ephemeral storage) lives: Bottlerocket keeps it on its data volume
# /dev/xvdb, the Amazon Linux AMIs on the root volume /dev/xvda (aws/karpenter-provider-aws
# pkg/providers/amifamily/bottlerocket.go and al2023.go at v1.14.1, EphemeralBlockDevice).
BOTTLEROCKET_DATA_DEVICE = "/dev/xvdb"
ROOT_DEVICE = "/dev/xvda"
# EC2 instance type names carry `d` among the attributes after the generation for instance store volumes, and the
# storage optimized families (d, h, i, im, is) have them too (Amazon EC2 instance types guide,
# https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html): a node's user data may put the
# kubelet's directory there, which the node group's API does not show.
INSTANCE_NAME = re.compile(r"^(?P<family>[a-z]+)\d+(?P<attributes>[a-z-]*)\.")
STORAGE_FAMILIES = ("d", "h", "i", "im", "is")


def _instance_store(types: list[str]) -> bool:
    for name in types:
        match = INSTANCE_NAME.match(name)
        if match and ("d" in match["attributes"] or match["family"] in STORAGE_FAMILIES):
            return True
    return False


def _node_groups(ctx: Context, cluster: str) -> list[dict[str, Any]]:
    names: list[str] = []
    token = None
    while True:
        page = ctx.eks.list_nodegroups(clusterName=cluster, **({"nextToken": token} if token else {}))
        names += page.get("nodegroups", [])
        token = page.get("nextToken")
        if not token:
            break
    return [ctx.eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"] for name in names]


def _excluded(group: dict[str, Any]) -> str | None:
    """Why the staging Job cannot (or should not) land on the group's nodes, or None."""
    ami = group.get("amiType", "")
    for marker, kind in NOT_FOR_THE_JOB:
        if marker in ami:
            return f"{kind} nodes ({ami})"
    taints = [t for t in group.get("taints", []) if t.get("effect") in ("NO_SCHEDULE", "NO_EXECUTE")]
    if taints:
        return "tainted " + ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in taints)
    return None


def _disk(ctx: Context, group: dict[str, Any]) -> tuple[float | None, str]:
    """The GiB of the volume the group's kubelets keep pods' ephemeral storage on, and where that figure comes from;
    None when the node group's API cannot tell."""
    ami = group.get("amiType", "")
    if group.get("diskSize"):
        return float(group["diskSize"]), f"diskSize {group['diskSize']} GiB"
    template = group.get("launchTemplate")
    if not template:
        return None, "no diskSize and no launch template"
    if ami == "CUSTOM":
        return None, "a custom AMI: which volume holds the kubelet's directory is the AMI's"
    device = BOTTLEROCKET_DATA_DEVICE if ami.startswith("BOTTLEROCKET") else ROOT_DEVICE
    selector = {"LaunchTemplateId": template["id"]} if template.get("id") else {
        "LaunchTemplateName": template["name"]}
    (found,) = ctx.ec2.describe_launch_template_versions(**selector, Versions=[str(template["version"])])[
        "LaunchTemplateVersions"]
    where = f"launch template {template.get('name') or template.get('id')} v{template['version']}"
    for mapping in found.get("LaunchTemplateData", {}).get("BlockDeviceMappings", []):
        size = mapping.get("Ebs", {}).get("VolumeSize")
        if mapping.get("DeviceName") == device and size:
            return float(size), f"{where}: {device} {size} GiB"
    if ami.startswith("AL2023"):
        # EKS launches the AMI's own root volume, 20 GiB for the AL2023 AMIs (llm_serving.cluster.node_disk).
        return float(EKS_AMI_ROOT_GIB), f"{where} maps no {device}: the AMI's {EKS_AMI_ROOT_GIB} GiB"
    return None, f"{where} maps no {device}: the AMI's own size"


def staging_disk(ctx: Context) -> list[Finding]:
    """On S3 the staging Job requests ephemeral storage and runs on an untainted amd64 (CPU) node: one of them must
    offer that much allocatable, or the Job stays Pending and the up waits out its deadline."""
    i = ctx.intent
    need = i.staging_ephemeral_gib
    if need is None:
        return []
    check = "staging.disk"
    request = f"the staging Job's {need} GiB ephemeral-storage request"
    if i.created_cpu_root_gib is not None:
        room = allocatable_ephemeral_gib(i.created_cpu_root_gib)
        if room < need:
            return [failed(check, f"the created CPU nodes' {i.created_cpu_root_gib} GiB root volume leaves "
                           f"{room:.0f} GiB allocatable, under {request}",
                           "a program defect: fix llm_serving.stack.planning.system_root_volume_gib")]
        return [passed(check, f"the program gives its CPU nodes a {i.created_cpu_root_gib} GiB root volume: "
                       f"{room:.0f} GiB allocatable >= {request}")]
    if ctx.cluster is None:
        raise ClusterUnknown()
    groups = _node_groups(ctx, i.cluster_name)
    fits, small, unclear, skipped = [], [], [], []
    for group in groups:
        name = group.get("nodegroupName", "?")
        why = _excluded(group)
        if why is not None:
            skipped.append(f"{name}: {why}")
            continue
        disk, source = _disk(ctx, group)
        store = _instance_store(group.get("instanceTypes") or [])
        if disk is not None and allocatable_ephemeral_gib(disk) >= need:
            fits.append(f"{name} ({source}: {allocatable_ephemeral_gib(disk):.0f} GiB allocatable)")
        elif disk is None or store:
            extra = "; instance store the user data may use" if store else ""
            unclear.append(f"{name} ({source}{extra})")
        else:
            small.append(f"{name} ({source}: {allocatable_ephemeral_gib(disk):.0f} GiB allocatable)")
    if fits:
        return [passed(check, f"CPU node group {'; '.join(fits)} can take {request}")]
    size = disk_for_ephemeral_gib(need)
    listing = "kubectl get nodes -o custom-columns=NAME:.metadata.name,EPHEMERAL:.status.allocatable.ephemeral-storage"
    if unclear or not small:
        seen = (f"of the managed node groups, {'; '.join(unclear)} may" if unclear
                else "no managed node group is an untainted amd64 CPU group")
        others = f" (not for the Job: {'; '.join(skipped)})" if skipped else ""
        return [unknown(check, f"cannot tell whether a CPU node offers {request}: {seen}{others}; Karpenter's and "
                        "self-managed nodes are not in the node-group API",
                        f"check that an untainted amd64 node has {need}Gi allocatable ephemeral-storage ({listing})")]
    return [failed(check, f"no CPU node group offers {request} ({'; '.join(small)}; allocatable is the disk less "
                   "10% eviction threshold and 1 GiB kube-reserved): the Job stays Pending and the up waits out its "
                   "deadline", f"give an untainted amd64 node group a kubelet volume of {size} GiB or more (diskSize, "
                   "or the launch template's block device mapping); nodes outside managed node groups (Karpenter's) "
                   f"are not seen: if one of those takes the Job, check it instead ({listing})")]
