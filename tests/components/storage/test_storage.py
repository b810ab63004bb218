"""Weights storage as rendered: the EFS file system and everything around it, the StorageClass and
claims, the download Job's patterns, the per-backend cold start, and the rejections."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from llm_serving.platform.args import validate
from llm_serving.serving import offload_init_seconds, weights
from llm_serving.stack import planning
from llm_serving.storage import EFS_READ_MIB_PER_SECOND, mount_target_subnets
from llm_serving.storage import objects as storage_objects
from stacks import checks
from stacks.config import ServingStackArgs
from tests.conftest import render_file
from tests.stacks.checks.test_model_checks import BASE, LLAMA_70B
from tests.support import reference, stack_variants

TAGS = {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod"}


def inputs(result: Any, type_: str, name: str) -> dict[str, Any]:
    return result.resource(type_, name)["inputs"]


def test_prod_owns_an_encrypted_elastic_file_system_it_never_deletes(rendered):
    prod = rendered["prod"]
    fs = prod.resource("aws:efs/fileSystem:FileSystem", "weights-storage-file-system")
    assert fs["inputs"] == {"encrypted": True, "performanceMode": "generalPurpose", "throughputMode": "elastic",
                            "tags": {**TAGS, "Name": "llm-prod-weights-storage"}}
    # Protected in prod, retained everywhere: destroy never deletes weights.
    assert (fs["options"]["protect"], fs["options"]["retainOnDelete"]) == (True, True)
    staging = rendered["staging"].resource("aws:efs/fileSystem:FileSystem", "weights-storage-file-system")
    assert (staging["options"]["protect"], staging["options"]["retainOnDelete"]) == (False, True)


def test_one_mount_target_per_node_group_zone_behind_an_nfs_only_security_group(rendered):
    prod = rendered["prod"]
    targets = {r["name"]: r["inputs"] for r in prod.by_type()["aws:efs/mountTarget:MountTarget"]}
    assert targets == {
        f"weights-storage-mount-us-east-1{z}": {
            "fileSystemId": "weights-storage-file-system-id", "securityGroups": ["weights-storage-nfs-id"],
            "subnetId": f"subnet-0bb0000000000000{i}"}
        for i, z in ((1, "a"), (2, "b"), (3, "c"))
    }
    ingress = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
    rules = {r["name"]: r["inputs"] for r in prod.by_type()[ingress]}
    # NFS only from the GPU nodes' own group and the staging nodes' (stagingNodeSecurityGroupIds), never
    # from the cluster security group every node and the control plane carry.
    nfs = {"fromPort": 2049, "toPort": 2049, "ipProtocol": "tcp", "securityGroupId": "weights-storage-nfs-id"}
    assert rules == {
        "weights-storage-nfs-from-gpu-nodes": {**nfs, "description": "NFS from the gpu-nodes",
                                               "referencedSecurityGroupId": "gpu-p5-48xlarge-nodes-id"},
        "weights-storage-nfs-from-staging-nodes-sg-0cc00000000000001": {
            **nfs, "description": "NFS from the staging-nodes-sg-0cc00000000000001",
            "referencedSecurityGroupId": "sg-0cc00000000000001"},
    }
    group = inputs(prod, "aws:ec2/securityGroup:SecurityGroup", "weights-storage-nfs")
    assert group["vpcId"] == "vpc-0123456789abcdef0"
    # Two subnets in one zone get one mount target (EFS allows one per zone).
    assert mount_target_subnets([("subnet-1", "a"), ("subnet-2", "a"), ("subnet-3", "b")]) == {
        "a": "subnet-1", "b": "subnet-3"}


def test_the_csi_driver_add_on_gets_its_aws_managed_policy_through_pod_identity(rendered):
    prod = rendered["prod"]
    addon = inputs(prod, "aws:eks/addon:Addon", "weights-storage-csi-driver")
    assert addon == {"addonName": "aws-efs-csi-driver", "clusterName": "llm-prod", "tags": TAGS,
                     "addonVersion": "v3.4.1-eksbuild.1", "resolveConflictsOnCreate": "OVERWRITE",
                     "resolveConflictsOnUpdate": "OVERWRITE",
                     "podIdentityAssociations": [{"roleArn": "arn:aws:iam::123456789012:role/weights-storage-csi-role",
                                                  "serviceAccount": "efs-csi-controller-sa"}]}
    role = inputs(prod, "aws:iam/role:Role", "weights-storage-csi-role")
    assert json.loads(role["assumeRolePolicy"])["Statement"] == [{
        "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        # Only this service account of this cluster: the session tags EKS Pod Identity sets.
        "Condition": {"StringEquals": {
            "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/llm-prod",
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "efs-csi-controller-sa"}}}]
    attachment = inputs(prod, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "weights-storage-csi-policy")
    assert attachment["policyArn"] == "arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_storage_class_retains_and_owns_files_as_the_pods_user(rendered, stack):
    result = rendered[stack]
    sc = result.manifest("StorageClass", "llm-serving-weights")
    assert sc == {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "llm-serving-weights", "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "provisioner": "efs.csi.aws.com", "reclaimPolicy": "Retain", "volumeBindingMode": "Immediate",
        # TLS in transit, and mounts signed with the node's role so the file-system policy applies.
        "mountOptions": ["tls", "iam"],
        "parameters": {"provisioningMode": "efs-ap", "fileSystemId": "weights-storage-file-system-id",
                       "directoryPerms": "750", "uid": "2000", "gid": "2000", "basePath": "/llm-serving",
                       "subPathPattern": "${.PVC.namespace}/${.PVC.name}", "ensureUniqueDirectory": "false"},
    }
    depends = result.wiring["kubernetes:storage.k8s.io/v1:StorageClass::weights-storage-storage-class"]["dependsOn"]
    # Claims bind only once the driver runs and every zone can mount the file system.
    assert "aws:eks/addon:Addon::weights-storage-csi-driver" in depends
    assert sum(d.startswith("aws:efs/mountTarget:MountTarget::") for d in depends) == (2 if stack == "dev" else 3)


def test_the_download_fetches_only_what_vllm_loads():
    assert "stage(os.environ[\"REVISION\"], os.environ[\"TARGET\"], ['*.safetensors', '*.safetensors.index.json', "\
           "'config.json', 'generation_config.json', 'tokenizer*', 'special_tokens_map.json', 'added_tokens.json', "\
           "'vocab*', 'merges.txt', '*.jinja', 'chat_template.json', 'preprocessor_config.json'], ['original/*', "\
           "'*.pth', '*.bin', '*.pt', '*.gguf', '*.onnx'])" in weights.STAGE_SCRIPT


def test_job_in_the_render_runs_that_script(rendered):
    (job,) = [m for m in rendered["prod"].manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c", weights.STAGE_SCRIPT]
    # An amd64 node (the lock holds x86_64 wheels) of the staging node group, whose role alone may write
    # the weights; the GPU taint keeps it off GPU nodes.
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64",
                                                               "eks.amazonaws.com/nodegroup": "llm-prod-cpu"}
    configmap = rendered["prod"].manifest("ConfigMap", weights.requirements_configmap_name("llama-70b"))
    assert configmap["immutable"] is True
    lines = configmap["data"]["requirements.txt"].splitlines()
    assert "huggingface-hub==2.4.0 --hash=sha256:" in "\n".join(lines)
    # Every requirement pinned and hashed: pip --require-hashes refuses anything else.
    assert all(re.fullmatch(r"[a-z0-9-]+==[^ ]+( --hash=sha256:[0-9a-f]{64})+", line) for line in lines[1:])


SIZED = {**LLAMA_70B, "storage": {"sizeGib": 300}}  # an existing class needs the claim's size


def config(**top: Any) -> ServingStackArgs:
    return validate(ServingStackArgs, {**BASE, "models": [LLAMA_70B], **top})


def lines(**top: Any) -> list[str]:
    return [p.line() for p in checks.check(config(**top))]


def tier_fill_seconds(stack: ServingStackArgs) -> int:
    """What filling the planner's CPU KV tier adds to every start, whatever the storage (the figures below omit it)."""
    return offload_init_seconds(planning.kv_offload_gib(stack, stack.models[0]))


def test_cold_start_follows_the_backends_read_speed():
    efs = config()
    plan = planning.model_plan(efs, efs.models[0])
    fill = tier_fill_seconds(efs)
    assert fill > 0
    assert (planning.storage_read_mib_per_second(efs), plan.cold_start_seconds) == (EFS_READ_MIB_PER_SECOND, 510 + fill)
    slow = config(models=[SIZED], weightsStorage={"backend": "existingStorageClass",
                                                  "existingStorageClass": {"name": "gp3", "readMibPerSecond": 125}})
    assert tier_fill_seconds(slow) == fill
    assert planning.model_plan(slow, slow.models[0]).cold_start_seconds == 1317 + fill
    assert planning.storage_backend_label(slow) == "StorageClass gp3, 125 MiB/s per pod (operator's figure)"


def test_a_cold_start_above_the_ceiling_is_rejected_with_the_numbers():
    slow = {"backend": "existingStorageClass", "existingStorageClass": {"name": "nfs", "readMibPerSecond": 20},
            "maxColdStartSeconds": 3600}
    fill = tier_fill_seconds(config(models=[SIZED], weightsStorage=slow))
    assert lines(models=[SIZED], weightsStorage=slow) == [
        f"llm-serving:models[llama-70b]: its planned cold start is {6969 + fill} s (141 GB from StorageClass nfs, "
        "20 MiB/s per pod (operator's figure), plus engine start), above weightsStorage.maxColdStartSeconds (got "
        "3600; expected faster storage, a smaller checkpoint, or a higher ceiling)"
    ]


def test_backend_settings_that_cannot_work_are_rejected():
    assert lines(models=[SIZED], weightsStorage={"backend": "existingStorageClass"}) == [
        "llm-serving:weightsStorage.existingStorageClass: backend existingStorageClass needs the class and the read "
        "speed it gives (got null; expected {name: <class>, readMibPerSecond: <MiB/s>})"
    ]
    assert lines(weightsStorage={"existingStorageClass": {"name": "gp3", "readMibPerSecond": 125},
                                 "efs": BASE["weightsStorage"]["efs"]}) == [
        'llm-serving:weightsStorage.existingStorageClass: only read with backend existingStorageClass (got "gp3"; '
        "expected unset, or backend existingStorageClass)"
    ]
    sized = {**LLAMA_70B, "storage": {"sizeGib": 200}}
    assert [p.line() for p in checks.check(validate(ServingStackArgs, {**BASE, "models": [sized]}))] == [
        "llm-serving:models[llama-70b].storage.sizeGib: EFS ignores a claim's size (it grows with its data); a size "
        "here would only risk a shrink (got 200; expected unset)"
    ]
    existing = {"backend": "existingStorageClass", "existingStorageClass": {"name": "gp3", "readMibPerSecond": 125}}
    assert lines(weightsStorage=existing) == [
        "llm-serving:models[llama-70b].storage.sizeGib: required with an existing StorageClass: a size that followed "
        "the checkpoint would shrink the claim when a smaller model moves in, which Kubernetes refuses (got null; "
        "expected a size in GiB you only ever raise)"
    ]


def test_a_read_write_once_claim_pins_its_job_and_replica_to_one_zone(stack_dir):
    path = stack_dir / "Pulumi.rwo.yaml"
    path.write_text(json.dumps({"config": {
        "aws:region": "us-east-1", "llm-serving:extends": "dev", "llm-serving:apiKey": {"secure": "v1:abc"},
        "llm-serving:hfToken": {"secure": "v1:def"}, "llm-serving:grafanaAdminPassword": {"secure": "v1:ghi"},
        "llm-serving:weightsStorage": {"backend": "existingStorageClass",
                                       "existingStorageClass": {"name": "gp3", "readMibPerSecond": 125}},
        # Kept at one replica: a wake from zero at 125 MiB/s would outlast dev's edge timeouts (refused).
        "llm-serving:models": [{"name": "llama-8b", "storage": {"accessMode": "ReadWriteOnce", "sizeGib": 40},
                                "autoscaling": {"minReplicas": None, "maxReplicas": None, "scaleToZero": None}}],
    }}))
    result = render_file(path)
    claim = result.manifest("PersistentVolumeClaim", "llama-8b-weights")
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                             "resources": {"requests": {"storage": "40Gi"}}}
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64",
                                                               "topology.kubernetes.io/zone": "us-east-1a"}
    deployment = result.manifest("Deployment", "llama-8b")
    assert deployment["spec"]["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] == "us-east-1a"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    # No file system of ours with an existing class.
    assert not [r for r in result.resources if r["type"].startswith("aws:efs/")]


def test_fsx_for_lustre_gives_one_retained_file_system_and_a_shared_claim(variants_dir):
    result = render_file(stack_variants.prod_on_fsx(variants_dir))
    fs = result.resource("aws:fsx/lustreFileSystem:LustreFileSystem", "weights-storage-file-system")
    assert fs["inputs"] == {
        "deploymentType": "PERSISTENT_2", "storageCapacity": 2400, "perUnitStorageThroughput": 500,
        "subnetIds": "subnet-0bb00000000000001", "securityGroupIds": ["weights-storage-lnet-id"],
        "fileSystemTypeVersion": "2.15", "tags": {**TAGS, "Name": "llm-prod-weights-storage"}}
    assert (fs["options"]["protect"], fs["options"]["retainOnDelete"]) == (True, True)
    rules = sorted((r["inputs"]["fromPort"], r["inputs"]["toPort"], r["inputs"]["referencedSecurityGroupId"])
                   for r in result.by_type()["aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"])
    # LNET from the nodes and within the group itself (FSx refuses to create the file system otherwise).
    assert rules == [(988, 988, "sg-0123456789abcdef0"), (988, 988, "weights-storage-lnet-id"),
                     (1018, 1023, "sg-0123456789abcdef0"), (1018, 1023, "weights-storage-lnet-id")]
    assert inputs(result, "aws:eks/addon:Addon", "weights-storage-csi-driver")["addonName"] == "aws-fsx-csi-driver"
    # Static provisioning makes no AWS call: no IAM role for the driver.
    assert not [r for r in result.by_type()["aws:iam/role:Role"] if "weights" in r["name"]]
    volume = result.manifest("PersistentVolume", "llm-serving-weights-fsx")
    assert volume["spec"] == {
        "capacity": {"storage": "2400Gi"}, "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "", "mountOptions": ["flock"],
        "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": "weights-storage-file-system-id",
                "volumeAttributes": {"dnsname": "weights-storage-file-system.fsx.us-east-1.amazonaws.com",
                                     "mountname": "placeholder"}}}
    claims = [m for m in result.manifests if m["kind"] == "PersistentVolumeClaim"]
    assert [c["metadata"]["name"] for c in claims] == ["weights-fsx"]
    assert claims[0]["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                                 "volumeName": "llm-serving-weights-fsx",
                                 "resources": {"requests": {"storage": "2400Gi"}}}
    claim = result.resource("kubernetes:core/v1:PersistentVolumeClaim", "weights-storage-claim")
    assert (claim["options"]["protect"], claim["options"]["retainOnDelete"]) == (True, True)
    for manifest in result.manifests:
        assert reference.kubernetes_object_errors(manifest, "1.34") == [], manifest["kind"]
    # Every model's Job and Deployment mount the shared claim.
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    deployment = result.manifest("Deployment", "llama-70b")
    for pod in (job["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]):
        (volume_ref,) = [v for v in pod["volumes"] if v["name"] == "weights"]
        assert volume_ref["persistentVolumeClaim"]["claimName"] == "weights-fsx"


def test_fsx_read_speed_is_capacity_times_per_unit_throughput():
    fsx = config(weightsStorage={"backend": "fsxLustre"})
    # 2400 GiB = 2.34 TiB x 500 MB/s/TiB = 1,172 MB/s = 1,117.6 MiB/s.
    assert planning.storage_read_mib_per_second(fsx) == 1117.6
    assert planning.model_plan(fsx, fsx.models[0]).cold_start_seconds == 361 + tier_fill_seconds(fsx)
    small = config(weightsStorage={"backend": "fsxLustre",
                                   "fsxLustre": {"storageCapacityGib": 1200, "perUnitStorageThroughput": 125}})
    assert planning.storage_read_mib_per_second(small) == 139.7


def test_fsx_capacity_must_be_a_valid_persistent_2_size():
    assert lines(weightsStorage={"backend": "fsxLustre", "fsxLustre": {"storageCapacityGib": 3600}}) == [
        "llm-serving:weightsStorage.fsxLustre.storageCapacityGib: PERSISTENT_2 capacity is 1200 GiB, 2400 GiB or a "
        "multiple of 2400 GiB (got 3600; expected 1200, 2400, 4800, 7200, ...)"
    ]
    assert lines(weightsStorage={"backend": "fsxLustre", "fsxLustre": {"storageCapacityGib": 4800}}) == []


def test_a_zones_mount_target_is_deleted_before_its_replacement(rendered):
    # One mount target per AZ: a create-before-delete replacement (a new subnet in the zone) conflicts.
    for stack in ("dev", "prod"):
        for target in rendered[stack].by_type()["aws:efs/mountTarget:MountTarget"]:
            assert target["options"]["deleteBeforeReplace"] is True, (stack, target["name"])


def test_the_staging_job_runs_only_in_zones_with_a_mount_target(rendered):
    prod = rendered["prod"]
    zones = sorted(r["name"].removeprefix("weights-storage-mount-")
                   for r in prod.by_type()["aws:efs/mountTarget:MountTarget"])
    assert zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    for job in (m for m in prod.manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]):
        pod = job["spec"]["template"]["spec"]
        assert pod["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}]}]}}}, job["metadata"]


def test_stage_affinity_is_left_to_a_pinned_zone_or_a_reachable_claim():
    assert weights.stage_affinity("us-east-1a", ("us-east-1a", "us-east-1b")) == {}
    assert weights.stage_affinity(None, ()) == {}


def test_the_lustre_security_group_allows_lnet_out_as_well_as_in(variants_dir):
    # The provider strips the default allow-all egress, and Lustre servers connect back on LNET.
    result = render_file(stack_variants.prod_on_fsx(variants_dir))
    egress = sorted((r["inputs"]["fromPort"], r["inputs"]["toPort"], r["inputs"]["referencedSecurityGroupId"],
                     r["inputs"]["ipProtocol"])
                    for r in result.by_type()["aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"])
    assert egress == [(988, 988, "sg-0123456789abcdef0", "tcp"), (988, 988, "weights-storage-lnet-id", "tcp"),
                      (1018, 1023, "sg-0123456789abcdef0", "tcp"), (1018, 1023, "weights-storage-lnet-id", "tcp")]
    fs = result.resource("aws:fsx/lustreFileSystem:LustreFileSystem", "weights-storage-file-system")
    egress_names = {f"aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule::{r['name']}"
                    for r in result.by_type()["aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"]}
    assert egress_names <= set(fs["options"]["dependsOn"])
FS_ARN = "arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/weights-storage-file-system-id"
GPU_ROLE = "arn:aws:iam::123456789012:role/gpu-p5-48xlarge-node-role"
STAGING_ROLE = "arn:aws:iam::123456789012:role/llm-prod-cpu-nodes"
CACHE_AP = "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/weights-storage-compile-cache-llama-70b-id"
SERVING_AP = "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/weights-storage-serving-llama-70b-id"


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_the_file_system_policy_requires_tls_and_iam_denies_root_and_lets_only_staging_write(rendered, stack):
    (policy,) = [r for r in rendered[stack].resources if r["type"] == "aws:efs/fileSystemPolicy:FileSystemPolicy"]
    assert policy["inputs"]["fileSystemId"] == "weights-storage-file-system-id"
    through_mount_target = {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}}
    assert json.loads(policy["inputs"]["policy"]) == {"Version": "2012-10-17", "Statement": [
        {"Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "*", "Resource": FS_ARN,
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        {"Sid": "DenyRootAccess", "Effect": "Deny", "Principal": {"AWS": "*"},
         "Action": "elasticfilesystem:ClientRootAccess", "Resource": FS_ARN},
        # The serving identity (the GPU nodes' role): a write only through the model's compile cache access point
        # (whose root is the model's cache directory, never the weights'), and a mount only through the serving
        # access point or the cache's, whatever an identity policy on the node role might allow.
        {"Sid": "DenyServingWrites", "Effect": "Deny", "Principal": {"AWS": [GPU_ROLE]},
         "Action": "elasticfilesystem:ClientWrite", "Resource": FS_ARN,
         "Condition": {"StringNotEquals": {"elasticfilesystem:AccessPointArn": [CACHE_AP]}}},
        {"Sid": "DenyServingOutsideItsAccessPoints", "Effect": "Deny", "Principal": {"AWS": [GPU_ROLE]},
         "Action": "elasticfilesystem:ClientMount", "Resource": FS_ARN,
         "Condition": {"StringNotEquals": {"elasticfilesystem:AccessPointArn": [CACHE_AP, SERVING_AP]}}},
        {"Sid": "ServingMountsReadOnlyThroughItsAccessPoints", "Effect": "Allow", "Principal": {"AWS": [GPU_ROLE]},
         "Action": "elasticfilesystem:ClientMount", "Resource": FS_ARN,
         "Condition": {**through_mount_target,
                       "StringEquals": {"elasticfilesystem:AccessPointArn": [CACHE_AP, SERVING_AP]}}},
        {"Sid": "CompileCacheWrites", "Effect": "Allow", "Principal": {"AWS": [GPU_ROLE]},
         "Action": "elasticfilesystem:ClientWrite", "Resource": FS_ARN,
         "Condition": {**through_mount_target, "StringEquals": {"elasticfilesystem:AccessPointArn": [CACHE_AP]}}},
        # The staging identity writes no cache: not through the caches' access points, not from the root.
        {"Sid": "DenyStagingCompileCacheWrites", "Effect": "Deny", "Principal": {"AWS": STAGING_ROLE},
         "Action": "elasticfilesystem:ClientWrite", "Resource": FS_ARN,
         "Condition": {"StringEquals": {"elasticfilesystem:AccessPointArn": [CACHE_AP]}}},
        {"Sid": "DenyStagingWithoutAnAccessPoint", "Effect": "Deny", "Principal": {"AWS": STAGING_ROLE},
         "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"], "Resource": FS_ARN,
         "Condition": {"Null": {"elasticfilesystem:AccessPointArn": "true"}}},
        # No anonymous principal: a mount without the `iam` option matches no Allow and is refused.
        {"Sid": "StagingMountsAndWrites", "Effect": "Allow", "Principal": {"AWS": STAGING_ROLE},
         "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"], "Resource": FS_ARN,
         "Condition": through_mount_target},
    ]}
    # Claims bind only once the policy is in force.
    depends = rendered[stack].wiring["kubernetes:storage.k8s.io/v1:StorageClass::weights-storage-storage-class"]
    assert "aws:efs/fileSystemPolicy:FileSystemPolicy::weights-storage-policy" in depends["dependsOn"]
    (job,) = [m for m in rendered[stack].manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    assert job["spec"]["template"]["spec"]["nodeSelector"]["eks.amazonaws.com/nodegroup"] == "llm-prod-cpu"


def _policy(**overrides: Any) -> dict[str, Any]:
    return storage_objects.file_system_policy(
        "arn:fs", **{"reader_role_arns": ["arn:r"], "writer_role_arn": "arn:w", "serving_access_point_arns": ["arn:ap"],
                     **overrides})


@pytest.mark.parametrize("caches", [[], ["arn:cache-a", "arn:cache-b"]], ids=["no-compile-cache", "compile-caches"])
def test_the_policy_uses_only_efs_client_actions_and_the_condition_keys_efs_enforces_for_clients(caches):
    # EFS enforces four condition keys for NFS clients and no other (iam-access-control-nfs-efs): a key
    # outside them (aws:PrincipalArn) would be absent from the request, and a negated condition on it
    # would deny the writer too.
    document = _policy(compile_cache_access_point_arns=caches)
    actions = {a for s in document["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions - {"*"} == set(storage_objects.EFS_CLIENT_ACTIONS)
    keys = {key for s in document["Statement"] for test in s.get("Condition", {}).values() for key in test}
    assert keys == {"aws:SecureTransport", "elasticfilesystem:AccessPointArn",
                    "elasticfilesystem:AccessedViaMountTarget"}
    assert keys <= set(storage_objects.EFS_CLIENT_CONDITION_KEYS)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"writer_role_arn": ""}, "needs reader roles, a writer role and the serving access points"),
    ({"reader_role_arns": []}, "needs reader roles, a writer role and the serving access points"),
    ({"serving_access_point_arns": []}, "needs reader roles, a writer role and the serving access points"),
    ({"reader_role_arns": ["arn:w"]}, "the writer role must not also be a reader role"),
])
def test_a_policy_that_would_lock_out_serving_or_staging_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        _policy(**overrides)


def test_dev_without_a_staging_role_has_no_policy_and_says_so(rendered):
    assert not [r for r in rendered["dev"].resources if r["type"] == "aws:efs/fileSystemPolicy:FileSystemPolicy"]
