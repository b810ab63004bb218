"""The GPU layer as rendered for prod: node group, launch template, role, add-ons, and where the
add-ons' pods can land.

Length: one render's GPU objects, asserted exactly; split per object, each file would repeat the
same fixtures and render lookups.
"""

from __future__ import annotations

import base64

import pytest
import yaml

from llm_serving.gpu import scheduling as gpu_scheduling
from tests.conftest import render_file
from tests.support import reference
from tests.support.scheduling import Node, fits, helm_merge

GROUP = "gpu-p5-48xlarge"
# The node generation of prod's group: a hash of its version, AMI release and launch-template inputs.
PROD_GENERATION = "8fff7a3ae2"

GPU_NODE = Node(
    "ip-10-0-1-10",
    labels={
        **gpu_scheduling.node_labels(GROUP, PROD_GENERATION, "nvidia-h100-80gb-hbm3"),
        # Set by GPU feature discovery once the node runs it.
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
    },
    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
)
CPU_NODE = Node("ip-10-0-2-20", labels={"node.kubernetes.io/instance-type": "m7i.2xlarge"})
TAINTED_SYSTEM_NODE = Node(
    "ip-10-0-3-30",
    labels={"node.kubernetes.io/instance-type": "m7i.xlarge"},
    taints=[{"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}],
)
NODES = [GPU_NODE, CPU_NODE, TAINTED_SYSTEM_NODE]


def inputs(rendered, stack, type_, name):
    return rendered[stack].resource(type_, name)["inputs"]


def test_node_group_inputs_for_prod(rendered):
    group = inputs(rendered, "prod", "aws:eks/nodeGroup:NodeGroup", f"{GROUP}-node-group")
    assert group == {
        "amiType": "AL2023_x86_64_NVIDIA",
        "capacityType": "ON_DEMAND",
        "clusterName": "llm-prod",
        "instanceTypes": ["p5.48xlarge"],
        "labels": {"llm-serving/node-group": GROUP, "llm-serving/node-generation": PROD_GENERATION,
                   "nvidia.com/gpu.present": "true",
                   # Cluster Autoscaler's GPU label: no second scale-up while the device plugin starts.
                   "k8s.amazonaws.com/accelerator": "nvidia-h100-80gb-hbm3"},
        "launchTemplate": {"id": f"{GROUP}-launch-template-id", "version": "1"},
        "nodeGroupNamePrefix": f"{GROUP}-",
        "nodeRoleArn": f"arn:aws:iam::123456789012:role/{GROUP}-node-role",
        "releaseVersion": "1.34.2-20261101",
        "scalingConfig": {"desiredSize": 2, "maxSize": 4, "minSize": 2},
        "subnetIds": ["subnet-0bb00000000000001", "subnet-0bb00000000000002", "subnet-0bb00000000000003"],
        "tags": {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod"},
        "taints": [{"effect": "NO_SCHEDULE", "key": "nvidia.com/gpu", "value": "true"}],
        "updateConfig": {"maxUnavailable": 1},
        # Repair one node at a time, and none while two are unhealthy (a fleet-wide fault pages).
        "nodeRepairConfig": {"enabled": True, "maxParallelNodesRepairedCount": 1, "maxUnhealthyNodeThresholdCount": 1},
        "version": "1.34",
    }
    wiring = rendered["prod"].wiring[f"aws:eks/nodeGroup:NodeGroup::{GROUP}-node-group"]
    # A new generation is a new group beside the old one; the cluster autoscaler owns the size.
    assert wiring["replaceOnChanges"] == ["labels"]
    assert wiring["ignoreChanges"] == ["scalingConfig.desiredSize"]


def test_launch_template_requires_imdsv2_and_puts_containers_on_nvme(rendered):
    template = inputs(rendered, "prod", "aws:ec2/launchTemplate:LaunchTemplate", f"{GROUP}-launch-template")
    assert template["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    assert template["blockDeviceMappings"] == [
        {
            "deviceName": "/dev/xvda",
            "ebs": {"deleteOnTermination": "true", "encrypted": "true", "volumeSize": 200, "volumeType": "gp3"},
        }
    ]
    user_data = base64.b64decode(template["userData"]).decode()
    node_config = yaml.safe_load(user_data.split("application/node.eks.aws", 1)[1].split("--LLMSERVING--")[0])
    assert node_config == {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}},
    }
    # No instance type, market options or interfaces unless a capacity block or EFA asks for them.
    for key in ("instanceType", "instanceMarketOptions", "networkInterfaces", "capacityReservationSpecification"):
        assert key not in template


def test_node_role_trusts_ec2_and_carries_worker_policies(rendered):
    role = inputs(rendered, "prod", "aws:iam/role:Role", f"{GROUP}-node-role")
    assert yaml.safe_load(role["assumeRolePolicy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    policies = sorted(
        r["inputs"]["policyArn"]
        for r in rendered["prod"].by_type()["aws:iam/rolePolicyAttachment:RolePolicyAttachment"]
        if r["inputs"]["role"] == f"{GROUP}-node-role"
    )
    assert policies == [
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
        "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    ]  # no AmazonSSMManagedInstanceCore: shells on GPU nodes only with gpuNodeGroup.ssmAccess


def node_group(args):
    """The stack's GPU node group alone, under the mocks (the component tier)."""
    from llm_serving.gpu import GpuNodeGroup
    from llm_serving.stack import parts
    from tests.support.components import run, site

    seen = {}
    result = run(lambda: seen.update(group=GpuNodeGroup(parts.node_group_name(args), parts.node_group(args,
                                                                                                     site(args)))))
    return result, seen["group"]


def test_ssm_on_gpu_nodes_is_opt_in():
    from tests.support.components import committed_args

    result, _ = node_group(committed_args("prod", gpuNodeGroup={"ssmAccess": True}))
    attachments = {r["name"]: r["inputs"]["policyArn"] for r in result.by_type()[
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment"] if r["inputs"]["role"] == f"{GROUP}-node-role"}
    assert attachments[f"{GROUP}-node-ssm"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"


def test_autoscaler_can_scale_the_group_from_zero(rendered):
    tags = {
        r["inputs"]["tag"]["key"]: r["inputs"]["tag"]["value"]
        for r in rendered["prod"].by_type()["aws:autoscaling/tag:Tag"]
    }
    prefix = "k8s.io/cluster-autoscaler/node-template"
    assert tags == {
        # Discovery and write access of this program's autoscaler are scoped to this tag.
        "llm-serving/node-autoscaling": "llm-prod",
        f"{prefix}/resources/nvidia.com/gpu": "8",
        f"{prefix}/taint/nvidia.com/gpu": "true:NoSchedule",
        f"{prefix}/label/nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        f"{prefix}/label/nvidia.com/gpu.present": "true",
        f"{prefix}/label/llm-serving/node-group": GROUP,
        f"{prefix}/label/llm-serving/node-generation": PROD_GENERATION,
        f"{prefix}/label/k8s.amazonaws.com/accelerator": "nvidia-h100-80gb-hbm3",
    }
    asgs = {r["inputs"]["autoscalingGroupName"] for r in rendered["prod"].by_type()["aws:autoscaling/tag:Tag"]}
    assert asgs == {f"eks-{GROUP}-node-group-asg"}


def test_capacity_block_group_launches_into_the_reservation():
    from pulumi.runtime.sync_await import _sync_await

    from tests.support.components import committed_args

    result, group_component = node_group(committed_args("prod", gpuNodeGroup={
        "capacityType": "CAPACITY_BLOCK", "capacityReservationId": "cr-0123456789abcdef0",
        "subnets": [{"id": "subnet-0bb00000000000001", "availabilityZone": "us-east-1a"}],
        "efaInterfaces": 32, "placement": "cluster", "scaling": {"minNodes": 0, "maxNodes": 3, "desiredNodes": 0}}))

    template = result.resource("aws:ec2/launchTemplate:LaunchTemplate", f"{GROUP}-launch-template")["inputs"]
    group = result.resource("aws:eks/nodeGroup:NodeGroup", f"{GROUP}-node-group")["inputs"]
    assert template["instanceType"] == "p5.48xlarge"
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    }
    assert template["placement"] == {"groupName": f"{GROUP}-placement"}
    interfaces = template["networkInterfaces"]
    assert len(interfaces) == 32
    assert interfaces[0] == {
        "deleteOnTermination": "true",
        "deviceIndex": 0,
        "interfaceType": "efa",
        "networkCardIndex": 0,
        # The cluster's group and the nodes' own on every interface; none at the instance (EC2 takes one or
        # the other, EKS user guide launch-templates).
        "securityGroups": ["sg-0123456789abcdef0", f"{GROUP}-nodes-id"],
    }
    assert {tuple(i["securityGroups"]) for i in interfaces} == {("sg-0123456789abcdef0", f"{GROUP}-nodes-id")}
    assert "vpcSecurityGroupIds" not in template
    assert {(i["interfaceType"], i["deviceIndex"]) for i in interfaces[1:]} == {("efa-only", 1)}
    assert group["capacityType"] == "CAPACITY_BLOCK"
    # The reservation holds exactly its nodes: no second group beside the first, so it updates in
    # place, terminating an old node before launching its replacement.
    assert group["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
    assert result.wiring[f"aws:eks/nodeGroup:NodeGroup::{GROUP}-node-group"]["replaceOnChanges"] == []
    # EKS rejects instance types on the node group when the launch template names one.
    assert "instanceTypes" not in group
    assert result.resource("aws:ec2/placementGroup:PlacementGroup", f"{GROUP}-placement")["inputs"][
        "strategy"
    ] == "cluster"
    # Updated in place, node by node: a replica evicted from an old node must fit the new one, so the
    # selector the workloads get names the group, not its generation (which the new nodes carry and the old
    # ones lose).
    assert _sync_await(group_component.node_selector.future()) == {
        "llm-serving/node-group": GROUP, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    # No second group, so no old group to hold back: no generation replaced, so no drain barrier.
    assert group_component.replaced_generation is None


def release_values(rendered, chart):
    releases = rendered["prod"].by_type()["kubernetes:helm.sh/v3:Release"]
    (release,) = [r["inputs"] for r in releases if r["inputs"]["chart"] == chart]
    return release


def effective(chart: str, version: str, values: dict) -> dict:
    return helm_merge(reference.scheduling_defaults(chart, version), values)


def where(pod: dict) -> list[str]:
    return [n.name for n in NODES if fits(n, pod)]


def test_device_plugin_and_gfd_run_exactly_on_gpu_nodes(rendered):
    release = release_values(rendered, "nvidia-device-plugin")
    assert release["version"] == "0.20.0"
    assert release["values"]["gfd"] == {"enabled": True}
    pod = effective("nvidia-device-plugin", "0.20.0", release["values"])
    assert where(pod) == [GPU_NODE.name]


def test_nfd_worker_tolerates_the_eks_gpu_taint(rendered):
    release = release_values(rendered, "nvidia-device-plugin")
    worker = effective("nvidia-device-plugin", "0.20.0", release["values"])["nfd"]["worker"]
    assert where(worker) == [GPU_NODE.name]


def test_chart_default_nfd_worker_would_miss_the_gpu_nodes():
    # The trap this stack avoids: operator Equal, value "present" does not match our taint "true".
    worker = reference.scheduling_defaults("nvidia-device-plugin", "0.20.0")["nfd"]["worker"]
    assert GPU_NODE.name not in where(worker)


def test_dcgm_exporter_runs_exactly_on_gpu_nodes(rendered):
    release = release_values(rendered, "dcgm-exporter")
    pod = effective("dcgm-exporter", "4.8.2", release["values"])
    assert where(pod) == [GPU_NODE.name]
    # Without our values the chart's pods would land on the CPU node only.
    assert where(reference.scheduling_defaults("dcgm-exporter", "4.8.2")) == [CPU_NODE.name]


def test_gpu_workload_selector_lands_on_the_group_once_gfd_labelled_it(rendered):
    pod = {
        "nodeSelector": gpu_scheduling.workload_node_selector(GROUP, PROD_GENERATION, "NVIDIA-H100-80GB-HBM3"),
        "tolerations": gpu_scheduling.gpu_tolerations(),
    }
    assert where(pod) == [GPU_NODE.name]


def test_gpu_workloads_leave_a_node_of_the_previous_generation(rendered):
    old_node = Node("ip-10-0-1-11", labels={**GPU_NODE.labels, "llm-serving/node-generation": "0123456789"},
                    taints=GPU_NODE.taints)
    pod = {
        "nodeSelector": gpu_scheduling.workload_node_selector(GROUP, PROD_GENERATION, "NVIDIA-H100-80GB-HBM3"),
        "tolerations": gpu_scheduling.gpu_tolerations(),
    }
    assert fits(old_node, pod) is False and fits(GPU_NODE, pod) is True


def test_dcgm_exporter_reads_our_counters_file(rendered):
    release = release_values(rendered, "dcgm-exporter")["values"]
    (configmap,) = [
        m for m in rendered["prod"].manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"].startswith("llm-serving-dcgm-counters-")
    ]
    mount = release["extraVolumeMounts"][0]
    assert release["arguments"] == ["-f", mount["mountPath"]]
    volume = release["extraConfigMapVolumes"][0]
    assert volume["name"] == mount["name"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert volume["configMap"]["items"][0]["key"] in configmap["data"]
    assert release["serviceMonitor"] == {"enabled": False}


def test_service_monitor_scrapes_the_exporter_service_and_names_the_node(rendered):
    monitor = rendered["prod"].manifest("ServiceMonitor", "dcgm-exporter")
    assert monitor["metadata"]["labels"] == {"release": "kube-prometheus-stack"}
    assert monitor["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/instance": "dcgm-exporter", "app.kubernetes.io/name": "dcgm-exporter"}
    }
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["relabelings"] == [
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_prometheus_rule_carries_selector_labels_and_gpu_alerts(rendered, stack):
    rule = rendered[stack].manifest("PrometheusRule", "gpu-health")
    expected_labels = {"release": "kube-prometheus-stack"} if stack == "prod" else {}
    assert rule["metadata"]["labels"] == expected_labels
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(alerts) == len(set(alerts)) >= 6


def test_dev_installs_prometheus_with_a_secret_grafana_password(rendered):
    dev = rendered["dev"]
    release = dev.resource("kubernetes:helm.sh/v3:Release", "prometheus-release")["inputs"]
    assert release["values"]["grafana"] == {"admin": {"existingSecret": "grafana-admin"}}
    assert release["values"]["prometheus"]["prometheusSpec"]["serviceMonitorSelectorNilUsesHelmValues"] is False
    # Prod uses the cluster's existing Prometheus Operator and installs none.
    assert not [r for r in rendered["prod"].resources if r["name"] == "prometheus-release"]


def test_every_kubernetes_resource_uses_the_stack_provider(rendered):
    for stack in ("dev", "prod"):
        result = rendered[stack]
        kubernetes = [r for r in result.resources if r["type"].startswith("kubernetes:")]
        assert kubernetes
        for r in kubernetes:
            assert result.wiring[f"{r['type']}::{r['name']}"]["provider"] == "pulumi:providers:kubernetes::kubernetes"


def test_monitors_and_rules_wait_for_the_release_that_brings_their_crds(rendered):
    wiring = rendered["dev"].wiring
    for name in ("dcgm-exporter-service-monitor", "dcgm-exporter-gpu-health-rules"):
        kind = "ServiceMonitor" if "monitor" in name else "PrometheusRule"
        depends = wiring[f"kubernetes:monitoring.coreos.com/v1:{kind}::{name}"]["dependsOn"]
        assert "kubernetes:helm.sh/v3:Release::prometheus-release" in depends
        assert "kubernetes:helm.sh/v3:Release::dcgm-exporter-release" in depends


def test_node_group_leaves_desired_size_to_autoscalers(rendered):
    wiring = rendered["prod"].wiring[f"aws:eks/nodeGroup:NodeGroup::{GROUP}-node-group"]
    assert wiring["ignoreChanges"] == ["scalingConfig.desiredSize"]


def test_counters_configmap_name_changes_with_its_content(monkeypatch):
    from llm_serving.gpu import counters as dcgm_counters
    from llm_serving.gpu import dcgm_exporter

    before = dcgm_exporter.counters_configmap_name()
    monkeypatch.setattr(dcgm_counters, "counters_csv", lambda: "DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    assert dcgm_exporter.counters_configmap_name() != before
    assert dcgm_exporter.chart_values()["extraConfigMapVolumes"][0]["configMap"]["name"] == (
        dcgm_exporter.counters_configmap_name()
    )


def _example_tags() -> dict[str, str]:
    from stacks.config.files import PROJECT_DIR

    result = render_file(PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml")
    return {r["inputs"]["tag"]["key"]: r["inputs"]["tag"]["value"] for r in result.by_type()["aws:autoscaling/tag:Tag"]}


def test_an_efa_group_at_zero_offers_its_interfaces_and_huge_pages_to_the_autoscaler():
    prefix = "k8s.io/cluster-autoscaler/node-template/resources"
    tags = _example_tags()
    assert {k: v for k, v in tags.items() if k.startswith(prefix)} == {
        f"{prefix}/nvidia.com/gpu": "8", f"{prefix}/vpc.amazonaws.com/efa": "32", f"{prefix}/hugepages-2Mi": "10256Mi"}
    # What a rank asks for fits what the template offers, or the autoscaler would never pick the group.
    from llm_serving.serving import multinode

    assert multinode.EFA_RESOURCE == gpu_scheduling.EFA_RESOURCE
    mib = int(multinode.EFA_HUGEPAGES.removesuffix("Mi"))
    assert mib <= int(gpu_scheduling.EFA_NODE_HUGEPAGES_2MI.removesuffix("Mi"))


def test_an_on_demand_groups_replicas_follow_the_generation(rendered):
    (deployment,) = [m for m in rendered["prod"].manifests if m["kind"] == "Deployment"
                     and "llm-serving/node-group" in m["spec"]["template"]["spec"].get("nodeSelector", {})][:1]
    assert set(deployment["spec"]["template"]["spec"]["nodeSelector"]) == {
        "llm-serving/node-group", "llm-serving/node-generation", "nvidia.com/gpu.product"}


def test_a_group_without_efa_offers_no_efa_resources(rendered):
    keys = {r["inputs"]["tag"]["key"] for r in rendered["prod"].by_type()["aws:autoscaling/tag:Tag"]}
    assert not [k for k in keys if "efa" in k or "hugepages" in k]


def test_a_placement_group_model_warns_of_the_capacity_a_node_update_needs():
    import dataclasses

    from llm_serving.gpu import catalog, node_group

    args = node_group.NodeGroupSpec(
        cluster_name="llm-prod", cluster_security_group_id="sg-1", vpc_id="vpc-1", kubernetes_version="1.34",
        instance=catalog.INSTANCE_TYPES["p5.48xlarge"], subnet_ids=["subnet-1"], min_nodes=4, max_nodes=6,
        desired_nodes=4, efa_interfaces=32, cluster_placement_group=True)
    assert node_group.placement_update_warning(args) == (
        "gpuNodeGroup.placement cluster: a node update (new Kubernetes version, AMI or launch template input) runs "
        "the new node group beside the old one in the same cluster placement group: up to 12 x p5.48xlarge (6 old "
        "+ 6 new) in one availability zone until the old group is deleted. Check that EC2 can place them (a "
        "capacity reservation for the update window, or a maintenance window with maxNodes lowered) before "
        "changing those inputs.")
    # Reserved capacity updates in place (no second group); no placement group, no warning.
    assert node_group.placement_update_warning(dataclasses.replace(args, capacity_reservation_id="cr-1")) is None
    assert node_group.placement_update_warning(dataclasses.replace(args, cluster_placement_group=False)) is None
