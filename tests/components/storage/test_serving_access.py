"""The serving pods' own way to the weights, as rendered: a read-only EFS access point on the directory the
staging Job writes, a static volume and claim bound to it, the Deployment on that claim, and NFS admitted
from the GPU and staging nodes' own security groups only."""

from __future__ import annotations

from typing import Any

import pytest

from llm_serving.gpu import node_network
from llm_serving.serving import engine
from llm_serving.storage import objects as storage_objects
from tests.support import reference

GROUP = "gpu-p5-48xlarge"
AP = "aws:efs/accessPoint:AccessPoint"
PV = "kubernetes:core/v1:PersistentVolume::weights-storage-serving-llama-70b-volume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim::weights-storage-serving-llama-70b-claim"


def _pod(result: Any, kind: str, predicate) -> dict[str, Any]:
    (found,) = [m for m in result.manifests if m["kind"] == kind and predicate(m["metadata"]["name"])]
    return found["spec"]["template"]["spec"]


def test_each_model_gets_an_access_point_on_the_directory_its_staging_claim_writes(rendered):
    prod = rendered["prod"]
    # The serving access point, beside the model's compile cache's (tests/components/serving/test_warm_start.py).
    assert sorted(p["name"] for p in prod.by_type()[AP]) == ["weights-storage-compile-cache-llama-70b",
                                                             "weights-storage-serving-llama-70b"]
    (point,) = [p for p in prod.by_type()[AP] if p["name"] == "weights-storage-serving-llama-70b"]
    assert point["inputs"] == {
        "fileSystemId": "weights-storage-file-system-id",
        # The same POSIX identity the StorageClass forces on the staging claim, so files the Job wrote
        # (owned 2000:2000, directories 750) are readable through it.
        "posixUser": {"uid": 2000, "gid": 2000},
        "rootDirectory": {"path": "/llm-serving/llm-serving/llama-70b-weights",
                          "creationInfo": {"ownerUid": 2000, "ownerGid": 2000, "permissions": "750"}},
        "tags": {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod",
                 "Name": "llm-prod-llama-70b-serving"},
    }
    # The driver roots the staging claim's access point at basePath/<namespace>/<claim>: the same path.
    parameters = prod.manifest("StorageClass", "llm-serving-weights")["parameters"]
    staging_claim = prod.manifest("PersistentVolumeClaim", "llama-70b-weights")
    assert point["inputs"]["rootDirectory"]["path"] == "/".join([
        parameters["basePath"], staging_claim["metadata"]["namespace"], staging_claim["metadata"]["name"]])
    assert (parameters["uid"], parameters["gid"], parameters["directoryPerms"]) == ("2000", "2000", "750")


def test_the_serving_volume_is_static_read_only_and_reserved_for_its_claim(rendered):
    prod = rendered["prod"]
    volume = prod.manifest("PersistentVolume", "llm-serving-llama-70b-weights-ro")
    assert volume["spec"] == {
        "capacity": {"storage": "1024Gi"}, "accessModes": ["ReadOnlyMany"], "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "", "mountOptions": ["iam"],
        "claimRef": {"namespace": "llm-serving", "name": "llama-70b-weights-ro"},
        # efs:<file system>::<access point>, the driver's own format (v3.4.1 parseVolumeId).
        "csi": {"driver": "efs.csi.aws.com", "readOnly": True,
                "volumeHandle": "weights-storage-file-system-id::weights-storage-serving-llama-70b-id"},
    }
    claim = prod.manifest("PersistentVolumeClaim", "llama-70b-weights-ro")
    assert claim["spec"] == {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                             "volumeName": "llm-serving-llama-70b-weights-ro",
                             "resources": {"requests": {"storage": "1024Gi"}}}
    assert claim["metadata"]["labels"] == {"app.kubernetes.io/part-of": "llm-serving",
                                           "app.kubernetes.io/component": "weights"}
    for manifest in (volume, claim):
        assert reference.kubernetes_object_errors(manifest, "1.34") == [], manifest["kind"]
    # Retained everywhere and protected in prod, like the staging claim.
    for urn in (PV, PVC):
        options = prod.wiring[urn]
        assert (options["protect"], options["retainOnDelete"]) == (True, True), urn
    assert (rendered["dev"].wiring[PVC.replace("70b", "8b")]["protect"]) is False


def test_the_serving_claim_binds_only_after_the_policy_the_mount_targets_and_the_driver(rendered):
    depends = set(rendered["prod"].wiring[PVC]["dependsOn"])
    assert {PV, "aws:efs/fileSystemPolicy:FileSystemPolicy::weights-storage-policy",
            "aws:eks/addon:Addon::weights-storage-csi-driver",
            *(f"aws:efs/mountTarget:MountTarget::weights-storage-mount-us-east-1{z}" for z in "abc")} <= depends
    policy = "aws:efs/fileSystemPolicy:FileSystemPolicy::weights-storage-policy"
    assert policy in rendered["prod"].wiring[PV]["dependsOn"]


def test_serving_pods_mount_the_read_only_claim_and_the_job_keeps_the_writable_one(rendered):
    prod = rendered["prod"]
    serving = _pod(prod, "Deployment", lambda name: name == "llama-70b")
    staging = _pod(prod, "Job", lambda name: "-stage-" in name)
    weights = {v["name"]: v for v in serving["volumes"]}["weights"]
    assert weights == {"name": "weights", "persistentVolumeClaim": {"claimName": "llama-70b-weights-ro",
                                                                     "readOnly": True}}
    assert {v["name"]: v for v in staging["volumes"]}["weights"] == {
        "name": "weights", "persistentVolumeClaim": {"claimName": "llama-70b-weights"}}
    # The pod's user is the access point's POSIX user: what the process sees it owns is what EFS enforces.
    (point,) = [p for p in prod.by_type()[AP] if p["name"] == "weights-storage-serving-llama-70b"]
    posix = point["inputs"]["posixUser"]
    assert (serving["securityContext"]["runAsUser"], serving["securityContext"]["runAsGroup"]) == (
        posix["uid"], posix["gid"]) == (engine.RUN_AS_UID, engine.RUN_AS_GID)


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_gpu_nodes_carry_the_cluster_security_group_and_one_of_their_own(rendered, stack):
    result = rendered[stack]
    group = "gpu-p5-48xlarge" if stack == "prod" else "gpu-p5-4xlarge"
    template = result.resource("aws:ec2/launchTemplate:LaunchTemplate", f"{group}-launch-template")["inputs"]
    # Naming groups in the template drops EKS's automatic cluster security group: it is named too.
    assert template["vpcSecurityGroupIds"] == ["sg-0123456789abcdef0", f"{group}-nodes-id"]
    own = result.resource("aws:ec2/securityGroup:SecurityGroup", f"{group}-nodes")["inputs"]
    cluster = result.resource("aws:eks/nodeGroup:NodeGroup", f"{group}-node-group")["inputs"]["clusterName"]
    assert own == {"vpcId": "vpc-0123456789abcdef0",
                   "description": f"GPU nodes of {cluster} ({group}); source for the weights storage",
                   "tags": {**own["tags"], "Name": f"{cluster}-{group}-nodes"}}
    # No rules of its own (the cluster group carries node and control-plane traffic), and not tagged for
    # the cluster (the load balancer controller wants one such group per ENI).
    assert not [r for kind in ("Ingress", "Egress")
                for r in result.by_type().get(f"aws:vpc/securityGroup{kind}Rule:SecurityGroup{kind}Rule", [])
                if r["inputs"]["securityGroupId"] == f"{group}-nodes-id"]
    assert not [key for key in own["tags"] if key.startswith("kubernetes.io/cluster/")]


def test_the_security_groups_are_part_of_the_node_generation():
    # A new group on the nodes is a launch-template change: hashed, so the nodes come up in a new group.
    assert node_network.SECURITY_GROUP_ROLES == ("cluster", "gpu-nodes")
    assert node_network.instance_security_groups(0, ["a", "b"]) == ["a", "b"]
    assert node_network.instance_security_groups(2, ["a", "b"]) is None
    assert node_network.efa_interfaces(0, ["a"]) is None


def test_dev_without_staging_groups_admits_the_cluster_group(rendered):
    dev = rendered["dev"]
    sources = sorted((r["name"], r["inputs"]["referencedSecurityGroupId"])
                     for r in dev.by_type()["aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"])
    assert sources == [("weights-storage-nfs-from-cluster-security-group", "sg-0123456789abcdef0"),
                       ("weights-storage-nfs-from-gpu-nodes", "gpu-p5-4xlarge-nodes-id")]


def test_the_claim_directory_refuses_a_namespace_that_is_not_a_label():
    directory = storage_objects.claim_directory("llm-serving", "llama-70b-weights")
    assert directory == "/llm-serving/llm-serving/llama-70b-weights"
    with pytest.raises(ValueError, match="expected a DNS-1123 label"):
        storage_objects.claim_directory("../etc", "llama-70b-weights")
