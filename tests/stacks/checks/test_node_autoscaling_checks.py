"""Node autoscaling, cluster version and rollout capacity: what a preview accepts and rejects, exactly."""

from __future__ import annotations

import dataclasses
from typing import Any

from llm_serving.platform.args import validate
from llm_serving.serving import offload_init_seconds
from llm_serving.stack import planning
from llm_serving.stack.rules import platform as platform_checks
from stacks import checks
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_gpu_node_group_checks import BASE


def config(**top: Any) -> ServingStackArgs:
    return validate(ServingStackArgs, {**BASE, **top})


def lines(**top: Any) -> list[str]:
    return [p.line() for p in checks.check(config(**top))]


def group(**changes: Any) -> dict[str, Any]:
    return {**BASE["gpuNodeGroup"], **changes}


def test_cluster_autoscaler_is_the_default_and_counts_max_nodes():
    cfg = config()
    assert cfg.node_autoscaling.mode.value == "clusterAutoscaler"
    supply = planning.supply(cfg)
    assert (supply.nodes, supply.gpus_per_node, supply.autoscaled) == (2, 8, True)


def test_without_an_autoscaler_only_desired_nodes_count():
    cfg = config(nodeAutoscaling={"mode": "none"})
    supply = planning.supply(cfg)
    assert (supply.nodes, supply.autoscaled) == (1, False)
    # Nine TP1 replicas fit 2 x 8 GPUs but not the one node that exists.
    models = [{**BASE["models"][0], "replicas": 9}]
    assert lines(nodeAutoscaling={"mode": "none"}, models=models) == [
        "llm-serving:gpuNodeGroup.scaling.desiredNodes: at peak the models need 2 nodes (qwen-7b 9 x TP1 = 9 GPUs, "
        "each replica on one node) but the node group supplies 1 x p5.48xlarge (8 GPUs each; desiredNodes, no node "
        "autoscaler) (got 1; expected >= 2)"
    ]
    assert lines(models=models) == []


def test_existing_mode_names_its_autoscaler_and_refuses_karpenter():
    assert lines(nodeAutoscaling={"mode": "existing"}) == [
        "llm-serving:nodeAutoscaling.existing: mode existing needs the autoscaler the cluster runs (got null; "
        "expected cluster-autoscaler)"
    ]
    assert lines(nodeAutoscaling={"mode": "existing", "existing": "karpenter"}) == [
        "llm-serving:nodeAutoscaling.existing: Karpenter launches its own nodes and never resizes an EKS managed "
        'node group, so this program\'s GPU group would not grow (got "karpenter"; expected cluster-autoscaler, '
        "mode none (the group's fixed desiredNodes), or the nodes Karpenter launches: gpuNodeGroup.mode existing)"
    ]
    assert lines(nodeAutoscaling={"mode": "existing", "existing": "cluster-autoscaler"}) == []
    assert lines(nodeAutoscaling={"mode": "none", "existing": "cluster-autoscaler"}) == [
        'llm-serving:nodeAutoscaling.existing: only read with mode existing, not none (got "cluster-autoscaler"; '
        "expected unset)"
    ]


def test_cluster_autoscaler_needs_an_image_for_the_clusters_minor():
    assert lines(cluster={"name": "llm-prod", "kubernetesVersion": "1.33"}) == []
    # The add-ons this stack installs need builds pinned for the minor too (test_eks_addons.py); without
    # them only the autoscaler's image is in question.
    no_addons = {"gpuNodeGroup": group(autoRepair={"installMonitoringAgent": False}),
                 "weightsStorage": {"efs": {**BASE["weightsStorage"]["efs"], "installCsiDriver": False}}}
    assert lines(cluster={"name": "llm-prod", "kubernetesVersion": "1.35"}, **no_addons) == [
        'llm-serving:cluster.kubernetesVersion: no Cluster Autoscaler image is pinned for Kubernetes 1.35 (pinned: '
        "1.33, 1.34); add the matching release to llm_serving/platform/versions.py (got \"1.35\"; expected 1.33, "
        "1.34)"
    ]
    # Without our autoscaler the version is not ours to match.
    assert lines(cluster={"name": "llm-prod", "kubernetesVersion": "1.35"}, nodeAutoscaling={"mode": "none"},
                 **no_addons) == []


def test_ami_release_must_belong_to_the_clusters_minor():
    assert lines(gpuNodeGroup=group(amiReleaseVersion="1.34.2-20261101")) == []
    assert lines(gpuNodeGroup=group(amiReleaseVersion="1.33.5-20261001")) == [
        "llm-serving:gpuNodeGroup.amiReleaseVersion: not a release for Kubernetes 1.34 (cluster.kubernetesVersion) "
        '(got "1.33.5-20261001"; expected a 1.34.x release, or unset)'
    ]
    # Bottlerocket releases carry the OS version, not the Kubernetes minor.
    bottlerocket = group(amiType="BOTTLEROCKET_x86_64_NVIDIA", containerStorage="ebs",
                         amiReleaseVersion="1.47.0-6154605b")
    assert lines(gpuNodeGroup=bottlerocket) == []


def test_cluster_version_mismatch_names_both_versions():
    assert platform_checks.cluster_version_problem(config(), "1.34") is None
    problem = platform_checks.cluster_version_problem(config(), "1.35")
    assert problem is not None and problem.line() == (
        'llm-serving:cluster.kubernetesVersion: cluster llm-prod runs Kubernetes 1.35 (got "1.34"; expected '
        "'1.35' (with gpuNodeGroup.amiReleaseVersion a 1.35 release, or unset); the GPU node group then moves to a "
        "new generation beside the old one)"
    )


def test_scale_down_window_defaults_to_the_cold_start_and_refuses_less():
    llama = {"name": "llama-70b", "modelId": "meta-llama/Llama-3.1-70B-Instruct",
             "revision": "1605565b47bb9346c5515c34102e054115b4f98b", "maxModelLen": 16384, "replicas": 2}
    cfg = config(models=[llama], gpuNodeGroup=group(scaling={"minNodes": 1, "maxNodes": 2, "desiredNodes": 1}))
    plan = planning.model_plan(cfg, cfg.models[0])
    # 141 GB at EFS's 500 MiB/s, engine start, graph capture (510 s), and filling the planner's CPU KV tier.
    fill = offload_init_seconds(planning.kv_offload_gib(cfg, cfg.models[0]))
    assert plan.cold_start_seconds == 510 + fill
    # A new node (300 s), the image pull (300 s), the cold start with the compile cache hit (10 s of torch.compile
    # instead of 67 s) and 30 s minReadySeconds.
    assert (plan.compile_seconds, plan.compile_cached_seconds) == (67, 10)
    window = 300 + 300 + plan.cold_start_seconds - 67 + 10 + 30
    assert planning.scale_down_window(cfg, cfg.models[0], plan) == window
    short = {**llama, "autoscaling": {"scaleDownWindowSeconds": 900}}
    assert lines(models=[short]) == [
        "llm-serving:models[llama-70b].autoscaling.scaleDownWindowSeconds: llama-70b: scale-down window must be >= "
        f"adding a replica (a node, the image pull and the cold start) ({window:,} s): a burst would pay for a "
        f"replica and lose it before it served (got 900; expected >= {window})"
    ]
    # Bounded to [300, 3600] s: the HPA API's maximum window, and no flapping for a tiny model.
    quick = config(models=[llama], gpuNodeGroup=group(nodeReadySeconds=60, imagePullSeconds=0))
    fast = dataclasses.replace(plan, cold_start_seconds=120)
    slow = dataclasses.replace(plan, cold_start_seconds=5000)
    assert planning.scale_down_window(quick, cfg.models[0], fast) == 300
    assert planning.scale_down_window(cfg, cfg.models[0], slow) == 3600


KARPENTER_NODES = {"mode": "existing", "instanceType": "p5.48xlarge", "existing": {"maxNodes": 3},
                   "subnets": BASE["gpuNodeGroup"]["subnets"]}
EXISTING_EFS_NODES = {"nodeRoleArn": "arn:aws:iam::123456789012:role/karpenter-gpu",
                      "securityGroupId": "sg-0dd00000000000001"}


def test_existing_gpu_nodes_grow_with_the_clusters_own_autoscaler_karpenter_included():
    nodes = {**KARPENTER_NODES, "existing": {"maxNodes": 3, **EXISTING_EFS_NODES}}
    assert lines(gpuNodeGroup=nodes, nodeAutoscaling={"mode": "existing", "existing": "karpenter"}) == []
    assert lines(gpuNodeGroup=nodes) == [
        "llm-serving:nodeAutoscaling.mode: the stack installs Cluster Autoscaler for a node group of its own; "
        "existing GPU nodes grow with the cluster's own autoscaler (got \"clusterAutoscaler\"; expected existing "
        "(with existing: karpenter or cluster-autoscaler), or none)"]
    # The pool's limit is what rollouts and peaks are planned on, named by its own key.
    supply = planning.supply(config(gpuNodeGroup=nodes, nodeAutoscaling={"mode": "existing", "existing": "karpenter"}))
    assert (supply.nodes, supply.autoscaled) == (3, True)
    crowded = [{**BASE["models"][0], "replicas": 30}]
    assert [p.path for p in checks.check(config(gpuNodeGroup=nodes, models=crowded, nodeAutoscaling={
        "mode": "existing", "existing": "karpenter"}))] == ["gpuNodeGroup.existing.maxNodes"]


def test_existing_gpu_nodes_name_what_only_their_owner_knows():
    karpenter = {"nodeAutoscaling": {"mode": "existing", "existing": "karpenter"}}
    assert [p.path for p in checks.check(config(gpuNodeGroup={**KARPENTER_NODES, "existing": None}, **karpenter))] == [
        "gpuNodeGroup.existing"]
    # EFS admits GPU nodes by their role and a security group of theirs; S3 needs neither.
    assert [p.path for p in checks.check(config(gpuNodeGroup=KARPENTER_NODES, **karpenter))] == [
        "gpuNodeGroup.existing.nodeRoleArn", "gpuNodeGroup.existing.securityGroupId"]
    scaled = {**KARPENTER_NODES, "scaling": BASE["gpuNodeGroup"]["scaling"]}
    assert [p.path for p in checks.check(config(gpuNodeGroup={**scaled, "existing": {"maxNodes": 3,
                                                                                      **EXISTING_EFS_NODES}},
                                                **karpenter))] == ["gpuNodeGroup.scaling"]


def test_a_created_group_needs_its_node_counts():
    assert [p.line() for p in checks.check(config(gpuNodeGroup={**BASE["gpuNodeGroup"], "scaling": None}))] == [
        "llm-serving:gpuNodeGroup.scaling: mode create needs the node counts (got null; expected {minNodes: <n>, "
        "maxNodes: <n>, desiredNodes: <n>})"]
