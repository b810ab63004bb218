# ruff: noqa: F811 - each test takes the `repo` fixture imported from test_diff.py
"""The offline diff agrees with the engine and the providers, case by case.

A change to a stack file is diffed on real git history: the test edits the scratch repository of
test_diff.py (this project's files committed as `main`) in its working tree and diffs against `main`,
committing nothing to this repository. A change to the code is the session's render with the inputs
that change edited (a side whose code changed renders in a subprocess: test_diff.py covers that path
once). Every case here
was shown wrong by the diff before issue #25 (an ignored input shown as a change, a claim replaced
for a bigger size, a replaced claim said to be created first, no preview error for a protected
replace, Auto Scaling group tags kept when their group is replaced, a Helm release moved to another
namespace shown as an update, the security group and EFS types missing from the replacement rules).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re

import pytest

from llm_serving.stack import timing
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file
from stacks.offline import replacements
from stacks.offline.diff import ResourceChange, diff_resources, format_markdown, format_text
from tests.conftest import STACK_NAMES
from tests.stacks.offline.test_diff import (  # noqa: F401 - `repo` is a fixture
    edit_text,
    edited,
    git,
    prod_rollout_lines,
    prod_rollout_step,
    repo,
    run_diff,
    urned,
)

CREATED_FIRST = "the replacement is created first; the old one is deleted at the end of the update"
DELETED_FIRST = ("deleted before its replacement is created (same name and namespace, or deleteBeforeReplace): it is "
                 "absent until the new one is ready")
# The claim keeps its data (retainOnDelete): the engine's delete is a no-op and the create of its name fails.
RETAINED_DELETED_FIRST = ("up fails: retainOnDelete makes the engine's delete a no-op, so the old object stays and the "
                          "replacement's create of the same name fails (AlreadyExists); the preview does not see it "
                          "(docs/operations.md, \"Replacing a retained object\", says what works)")
PROD_ROLLOUT = prod_rollout_lines()  # what a rollout of prod's llama-70b costs, from the planner's timing


def block(out: str, headline: str) -> list[str]:
    """The lines of one resource's entry in the text diff, its headline first."""
    lines = out.splitlines()
    start = lines.index(headline)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return lines[start:end]


def test_an_input_under_ignore_changes_is_no_change(repo):
    # desiredNodes is the node group's scalingConfig.desiredSize, which the program ignores after
    # creation (the node autoscaler owns it): the engine resets it to the old value before diffing.
    with edited(repo, "Pulumi.prod.yaml", ("desiredNodes: 2", "desiredNodes: 3")):
        result = run_diff(repo, "prod", "--base", "main")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("prod: no changes against main (")


# prod's own weightsStorage block becomes an existing class (its efs keys then go unread).
WEIGHTS_BLOCK = "  llm-serving:weightsStorage:\n"
EXISTING_CLASS = ("    backend: existingStorageClass\n    existingStorageClass:\n"
                  "      name: efs-fast\n      readMibPerSecond: 500\n")
SIZED = ("      maxNumBatchedTokens: 8192\n", "      maxNumBatchedTokens: 8192\n      storage:\n        sizeGib: 300\n")


def test_a_bigger_claim_is_an_update_not_a_replacement(repo):
    # A base whose claim has a size of its own (an existing StorageClass), committed on a branch.
    git(repo, "checkout", "-q", "-b", "sized-claim", "main")
    try:
        edit_text(repo / "Pulumi.prod.yaml", WEIGHTS_BLOCK, WEIGHTS_BLOCK + EXISTING_CLASS)
        edit_text(repo / "Pulumi.prod.yaml", *SIZED)
        git(repo, "commit", "-q", "-am", "prod weights on an existing StorageClass, 300 GiB claims")
        with edited(repo, "Pulumi.prod.yaml", ("        sizeGib: 300\n", "        sizeGib: 400\n")):
            result = run_diff(repo, "prod", "--base", "sized-claim")
    finally:
        git(repo, "checkout", "-q", "feature")
    assert result.returncode == 1, result.stderr
    lines = block(result.stdout, "~ kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim")
    assert lines[1:] == ['    inputs.spec.resources.requests.storage: "300Gi" -> "400Gi"']
    assert "+- " not in result.stdout


def test_a_protected_claim_on_another_storage_class_is_a_preview_error_and_deleted_first(repo):
    with edited(repo, "Pulumi.prod.yaml", (WEIGHTS_BLOCK, WEIGHTS_BLOCK + EXISTING_CLASS), SIZED):
        text = run_diff(repo, "prod", "--base", "main")
        markdown = run_diff(repo, "prod", "--base", "main", "--format", "markdown")
    assert text.returncode == 1, text.stderr
    # The claim, the file system, and each model's serving volume and claim (EFS is left behind).
    assert text.stdout.splitlines()[1].startswith("  pulumi preview fails: 4 protected resource(s) would be deleted or "
                                                  "replaced: ")
    lines = block(text.stdout, "+- kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim (forced by "
                               "spec.storageClassName)")
    assert lines[1:3] == [
        f"    ! {RETAINED_DELETED_FIRST}",
        "    ! preview error: protected, so `pulumi preview` and `pulumi up` fail instead of this replacement until "
        "protect is removed (protect=False in the program, or `pulumi state unprotect`)",
    ]
    assert "> [!CAUTION]\n> The real `pulumi preview` fails: protected resources would be deleted or replaced: " in (
        markdown.stdout)


def test_an_ami_bump_replaces_the_node_group_and_its_asg_tags_and_costs_a_node_generation(repo):
    with edited(repo, "Pulumi.prod.yaml", ("amiReleaseVersion: 1.34.2-20261101", "amiReleaseVersion: 1.34.2-20261115")):
        result = run_diff(repo, "prod", "--base", "main")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    # 10 and 2: the compile cache's producer Job (its pod template selects the node generation) is replaced, and
    # the pre-pull DaemonSet follows the new generation like the Deployment; 6 and 6: the generation's drain
    # barrier (a new one created, the old deleted last): component, Deployment, NetworkPolicy, ServiceAccount, Role
    # and RoleBinding.
    assert out.splitlines()[0].startswith("prod: 10 to replace, 6 to delete, 6 to create, 2 to update against main")
    # The new group's Auto Scaling group name is unknown at preview, and it forces each tag's replacement.
    tags = re.findall(r"^\+- aws:autoscaling/tag:Tag (\S+) \(forced by autoscalingGroupName\)$", out, re.MULTILINE)
    assert len(tags) == 8
    assert block(out, f"+- aws:autoscaling/tag:Tag {tags[0]} (forced by autoscalingGroupName)")[1:4] == [
        "    ! autoscalingGroupName unknown at preview: output of gpu-p5-48xlarge-node-group, which is replaced",
        f"    ! {CREATED_FIRST}",
        '    inputs.autoscalingGroupName: "eks-gpu-p5-48xlarge-node-group-asg" -> (known after the replacement)',
    ]
    group = block(out, "+- aws:eks/nodeGroup:NodeGroup gpu-p5-48xlarge-node-group (forced by labels)")
    # The barrier waits out the longest grace period of prod's vLLM pods.
    grace = timing.node_drain_wait_seconds(load_stack_file(stack_file_path("prod"))[1])
    assert group[1] == f"    ! {CREATED_FIRST}"
    # The roll onto the new nodes: prod's two replicas, a rollout step each.
    roll = math.ceil(2 * prod_rollout_step()[1] / 60)
    assert re.fullmatch(
        r"    = node group update: about \d+ min \(create the new node group: 2 node\(s\) ready in about 5 min; roll "
        rf"every model onto it with its own strategy: about {roll} min \(slowest model\); let the last replaced pods "
        rf"drain \(the old generation's drain barrier\): {grace:,} s; delete the old group's 2 emptied node\(s\): "
        r"about 5 min\)", group[2])
    assert group[3:4] == [
        "    = quota: 2 new p5.48xlarge node(s) beside the 2 old one(s), 4 nodes and 32 GPUs at once until the old "
        "group is deleted",
    ]
    assert '    inputs.releaseVersion: "1.34.2-20261101" -> "1.34.2-20261115"' in group
    # The generation's drain barrier: the new one created, the old one deleted (before the old group).
    assert block(out, "- kubernetes:apps/v1:Deployment node-drain-barrier-8fff7a3ae2-deployment")[1] == (
        f"    = drain barrier: deleted before the old node group, its pod takes {grace:,} s to go (the longest vLLM "
        "grace period), so no replaced pod is still draining when EKS terminates the old nodes")
    assert "+ kubernetes:apps/v1:Deployment node-drain-barrier-f3322b5c04-deployment" in out.splitlines()
    deployment = block(out, "~ kubernetes:apps/v1:Deployment llama-70b-deployment")
    assert deployment[1] == ("    ! spec.template.spec.nodeSelector unknown at preview: output of "
                             "gpu-p5-48xlarge-node-group, which is replaced")
    assert deployment[2:5] == PROD_ROLLOUT
    assert re.fullmatch(r"    inputs\.spec\.template\.spec\.nodeSelector: \{.* -> \(known after the replacement\)",
                        deployment[5])


def test_a_model_revision_bump_stages_a_new_job_and_rolls_every_replica(repo):
    old = "revision: 1605565b47bb9346c5515c34102e054115b4f98b"
    with edited(repo, "Pulumi.prod.yaml", (old, "revision: 2b6f0a4e1d3c5b7a9e8f0d1c2b3a4f5e6d7c8b9a")):
        result = run_diff(repo, "prod", "--base", "main")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    # The staging Job is renamed with the revision, so the new one runs before the old one is deleted.
    # The verification Job reruns too: its settings (and so its name) follow the revision.
    job = [line for line in out.splitlines() if line.startswith("+- kubernetes:batch/v1:Job ")]
    # A new revision is a new compile cache key: a new producer Job, never the old revision's cache.
    assert job[0] == ("+- kubernetes:batch/v1:Job llama-70b-compile-cache (forced by metadata.name, "
                      "spec.template.spec.containers.command)")
    assert job[1:] == ["+- kubernetes:batch/v1:Job llama-70b-verify-job (forced by metadata.name, "
                   "spec.template.spec.volumes.configMap.name)",
                   "+- kubernetes:batch/v1:Job llama-70b-weights-stage (forced by metadata.name, "
                   "spec.template.spec.containers.env.value)"]
    job = job[1:]
    assert block(out, job[0])[1] == f"    ! {CREATED_FIRST}"
    assert block(out, "~ kubernetes:apps/v1:Deployment llama-70b-deployment")[1:4] == PROD_ROLLOUT


def test_a_helm_release_in_another_namespace_is_a_replacement(repo):
    with edited(repo, "Pulumi.dev.yaml", ("      namespace: monitoring\n", "      namespace: observability\n")):
        result = run_diff(repo, "dev", "--base", "main")
    assert result.returncode == 1, result.stderr
    lines = block(result.stdout, "+- kubernetes:helm.sh/v3:Release prometheus-release (forced by namespace)")
    assert lines[1:3] == [
        f"    ! {CREATED_FIRST}",
        "    ! a new release beside the old one until the end of the update: cluster-scoped objects of the chart "
        "(CRDs, ClusterRoles, webhooks) exist twice under the same names and the install fails unless the chart names "
        "them per release",
    ]


def test_a_weights_file_system_change_replaces_what_it_must_in_order(rendered):
    # Two edits of the EFS component in one diff (a refactor a reviewer reads): the NFS group's description
    # (ForceNew on a security group) and the file system's performance mode (ForceNew on the file system), as
    # staging's render carries them (the code path of a side whose code changed is test_diff.py's replacements).
    base = rendered["staging"].resources
    head = copy.deepcopy(base)
    for resource in head:
        if resource["name"] == "weights-storage-nfs" and resource["type"] == "aws:ec2/securityGroup:SecurityGroup":
            resource["inputs"]["description"] = "NFS to the weights of llm-staging"
        if resource["type"] == "aws:efs/fileSystem:FileSystem":
            resource["inputs"]["performanceMode"] = "maxIO"
    out = format_text(diff_resources(base, head, "staging", "main"))
    assert "+- aws:ec2/securityGroup:SecurityGroup weights-storage-nfs (forced by description)" in out
    rule = block(out, "+- aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule weights-storage-nfs-from-gpu-nodes "
                      "(forced by securityGroupId)")
    assert rule[1] == "    ! securityGroupId unknown at preview: output of weights-storage-nfs, which is replaced"
    assert "+- aws:efs/fileSystem:FileSystem weights-storage-file-system (forced by performanceMode)" in out
    mount = block(out, "+- aws:efs/mountTarget:MountTarget weights-storage-mount-us-east-1a (forced by fileSystemId)")
    assert {"    ! fileSystemId unknown at preview: output of weights-storage-file-system, which is replaced",
            "    ! securityGroups unknown at preview: output of weights-storage-nfs, which is replaced",
            # One mount target per zone: the program replaces it delete-before-replace (issue 22).
            f"    ! {DELETED_FIRST}"} <= set(mount)
    # Its security groups alone would change in place (ModifyMountTargetSecurityGroups): not a forcing path.
    assert '    inputs.securityGroups[0]: "weights-storage-nfs-id" -> (known after the replacement)' in mount
    assert not replacements.replacing_paths("aws:efs/mountTarget:MountTarget", ["securityGroups[0]"], [])
    # The StorageClass keeps its name, so pulumi-kubernetes deletes it before creating the new one.
    assert block(out, "+- kubernetes:storage.k8s.io/v1:StorageClass weights-storage-storage-class (forced by "
                      "parameters.fileSystemId)")[2] == f"    ! {DELETED_FIRST}"


# --- provider rules without a stack that exercises them --------------------------------------------


def one(base: dict, head: dict) -> ResourceChange:
    (change,) = diff_resources([base], [head], "prod", "main").changes
    return change


def test_a_persistent_volume_on_another_source_is_replaced_and_its_capacity_is_not():
    def pv(handle: str, size: str) -> dict:
        return urned("kubernetes:core/v1:PersistentVolume", "pv", metadata={"name": "weights"},
                     spec={"capacity": {"storage": size}, "csi": {"driver": "efs.csi.aws.com", "volumeHandle": handle}})
    assert (one(pv("fs-1", "100Gi"), pv("fs-1", "200Gi")).action) == "update"
    change = one(pv("fs-1", "100Gi"), pv("fs-2", "100Gi"))
    assert (change.action, change.forced_by, change.notes) == ("replace", ("spec.csi.volumeHandle",), (DELETED_FIRST,))


def test_a_services_cluster_ip_forces_a_replacement_and_its_ports_do_not():
    def service(ip: str, port: int) -> dict:
        return urned("kubernetes:core/v1:Service", "svc", metadata={"name": "m", "namespace": "llm-serving"},
                     spec={"clusterIP": ip, "ports": [{"name": "http", "port": port}]})
    assert one(service("None", 8000), service("None", 8080)).action == "update"
    assert one(service("None", 8000), service("10.0.0.9", 8000)).forced_by == ("spec.clusterIP",)


def test_an_autonamed_kubernetes_object_is_created_first_and_delete_before_replace_deletes_first():
    job = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}
    moved = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}}
    assert one(urned("kubernetes:batch/v1:Job", "j", **job), urned("kubernetes:batch/v1:Job", "j", **moved)).notes == (
        CREATED_FIRST,)
    option = {"deleteBeforeReplace": True}
    change = one(urned("aws:eks/nodeGroup:NodeGroup", "ng", options=option, subnetIds=["a"]),
                 urned("aws:eks/nodeGroup:NodeGroup", "ng", options=option, subnetIds=["b"]))
    assert change.notes == (DELETED_FIRST,)


def test_lustre_replacements_include_a_capacity_decrease_but_not_an_increase():
    def lustre(capacity: int, subnet: str = "subnet-a") -> dict:
        return urned("aws:fsx/lustreFileSystem:LustreFileSystem", "fsx", deploymentType="PERSISTENT_2",
                     storageCapacity=capacity, subnetIds=[subnet])
    assert one(lustre(2400), lustre(4800)).action == "update"
    assert one(lustre(4800), lustre(2400)).forced_by == ("storageCapacity",)
    assert one(lustre(2400), lustre(2400, "subnet-b")).forced_by == ("subnetIds",)


def test_an_ingress_rule_that_changes_its_source_kind_is_replaced():
    def rule(**source: str) -> dict:
        return urned("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "r", securityGroupId="sg-1",
                     fromPort=2049, toPort=2049, **source)
    assert one(rule(cidrIpv4="10.0.0.0/16"), rule(cidrIpv4="10.1.0.0/16")).action == "update"
    assert one(rule(cidrIpv4="10.0.0.0/16"), rule(referencedSecurityGroupId="sg-2")).forced_by == (
        "cidrIpv4", "referencedSecurityGroupId")


def test_consequences_show_in_markdown_as_cost_lines():
    change = ResourceChange("kubernetes:apps/v1:Deployment", "m-deployment", consequences=("rollout: 1 replica",))
    diff = diff_resources([], [], "prod", "main")
    text = format_markdown(dataclasses.replace(diff, changes=(change,)))
    assert "- **cost:** rollout: 1 replica" in text


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_aws_type_a_stack_creates_has_its_replacement_rules(rendered, stack):
    created = {r["type"] for r in rendered[stack].resources if r["type"].startswith("aws:")}
    assert created and created <= set(replacements.AWS_FORCE_NEW), created - set(replacements.AWS_FORCE_NEW)


def test_a_deployment_replaced_delete_first_is_priced_as_an_outage_not_a_rollout():
    from llm_serving.stack import planning
    from stacks.offline import consequences

    config = load_stack_file(stack_file_path("prod"))[1]
    model = config.models[0]
    (line,) = consequences.for_change(config, "kubernetes:apps/v1:Deployment", "llama-70b-deployment", "replace",
                                      ["inputs.spec.selector.matchLabels.app"], None)
    grace = timing.model_drains(config, model).vllm_grace_seconds
    start = planning.timing(config).image_pull_seconds + planning.model_plan(config, model).cold_start_seconds
    assert line.startswith(f"OUTAGE: deleted before its replacement (same name): every replica drains (up to "
                           f"{grace:,} s)")
    assert line.endswith(f"up to about {math.ceil((grace + start) / 60)} min with no replica serving")
    # An in-place pod-template change is the planned rollout.
    assert consequences.for_change(config, "kubernetes:apps/v1:Deployment", "llama-70b-deployment", "update",
                                   ["inputs.spec.template.spec.containers[vllm].image"], None) == [
        line.removeprefix("    = ") for line in PROD_ROLLOUT]
