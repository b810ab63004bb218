"""Every stack file in the repo renders, every object it declares is valid, and nothing drifted
from the golden snapshot without a `make golden` in the same change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stacks.environment import load_stack_file
from stacks.offline import render
from tests.conftest import STACK_FILES, STACK_NAMES
from tests.support import reference

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def test_repo_has_dev_prod_and_staging_stacks():
    assert {"dev", "prod", "staging"} <= set(STACK_NAMES)


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_kubernetes_object_validates_against_its_schema(rendered, name):
    result = rendered[name]
    _, config = load_stack_file(STACK_FILES[STACK_NAMES.index(name)])
    assert result.manifests, "a stack that declares no Kubernetes object renders nothing real"
    errors = [
        error
        for manifest in result.manifests
        for error in reference.kubernetes_object_errors(manifest, config.cluster.kubernetes_version)
    ]
    assert errors == []


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_custom_resource_validates_against_its_crd(rendered, name):
    custom = [
        m for m in rendered[name].manifests if reference.is_custom_kind(m["apiVersion"], m["kind"])
    ]
    assert {m["kind"] for m in custom} >= {"ServiceMonitor", "PrometheusRule"}
    assert [e for m in custom for e in reference.custom_resource_errors(m)] == []


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_helm_value_set_exists_in_the_pinned_chart(rendered, name):
    by_type = rendered[name].by_type()
    releases = by_type["kubernetes:helm.sh/v3:Release"] + by_type.get("kubernetes:helm.sh/v4:Chart", [])
    assert releases
    for release in releases:
        inputs = release["inputs"]
        # An OCI chart is addressed by its full reference; the reference folder drops the "v".
        chart = inputs["chart"].rsplit("/", 1)[-1]
        version = inputs["version"].removeprefix("v")
        info = reference.chart_info(chart, version)
        assert inputs["version"] == info["version"]
        if inputs["chart"].startswith("oci://"):
            assert inputs["chart"] == info["repository"] and "repositoryOpts" not in inputs
        else:
            assert inputs["repositoryOpts"]["repo"] == info["repository"]
        assert reference.helm_value_errors(chart, version, inputs["values"]) == []


@pytest.mark.parametrize("name", STACK_NAMES)
def test_render_matches_golden_snapshot(rendered, name, tmp_path):
    manifests, resources = render.write(rendered[name], tmp_path)
    golden = GOLDEN / name
    assert manifests.read_text() == (golden / "manifests.yaml").read_text(), (
        f"the {name} render changed; review it and run `make golden`"
    )
    assert resources.read_text() == (golden / "resources.json").read_text(), (
        f"the {name} render changed; review it and run `make golden`"
    )


def test_render_is_byte_identical_across_runs(rendered, tmp_path):
    # The session's render of prod (this worker's or another's, from an earlier test) and a new one here:
    # two runs, possibly in two processes, after different tests.
    prod = STACK_FILES[STACK_NAMES.index("prod")]
    first = render.write(rendered["prod"], tmp_path / "a")
    second = render.write(render.render_stack(prod), tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_no_secret_value_reaches_the_render(rendered):
    dev = rendered["dev"]
    secret = dev.manifest("Secret", "grafana-admin")
    assert secret["stringData"] == {"admin-user": "[secret]", "admin-password": "[secret]"}
    text = json.dumps(dev.resources) + yaml.safe_dump_all(dev.manifests)
    assert "encrypted in the stack file" not in text
    assert "replace-with-pulumi-config-set-secret" not in text


def test_resources_json_lists_every_resource_with_its_urn_parent_inputs_and_options(rendered):
    for result in rendered.values():
        for resource in result.resources:
            assert set(resource) == {"type", "name", "urn", "parent", "inputs", "options"}
            assert set(resource["options"]) - {"aliases"} == {
                "dependsOn", "provider", "ignoreChanges", "replaceOnChanges", "deleteBeforeReplace", "protect",
                "retainOnDelete", "customTimeouts"}
        parents = {r["parent"] for r in result.resources}
        assert "llmserving:stack:ServingStack::llm-serving" in parents
    # The URN as the engine builds it: every ancestor's type, so renaming or re-nesting a component
    # changes every descendant's URN.
    group = rendered["prod"].resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-48xlarge-node-group")
    assert group["urn"] == (
        "urn:pulumi:prod::llm-serving::llmserving:stack:ServingStack$llmserving:gpu:GpuNodeGroup"
        "$aws:eks/nodeGroup:NodeGroup::gpu-p5-48xlarge-node-group")
    claim = rendered["prod"].resource("kubernetes:core/v1:PersistentVolumeClaim", "llama-70b-weights-claim")
    assert (claim["options"]["protect"], claim["options"]["retainOnDelete"]) == (True, True)


def test_staging_renders_prod_with_staging_capacity_and_cluster(rendered):
    prod, staging = rendered["prod"], rendered["staging"]
    prod_group = prod.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-48xlarge-node-group")["inputs"]
    staging_group = staging.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-48xlarge-node-group")["inputs"]
    assert staging_group["scalingConfig"] == {"minSize": 1, "maxSize": 2, "desiredSize": 1}
    assert prod_group["scalingConfig"] == {"minSize": 2, "maxSize": 4, "desiredSize": 2}
    assert staging_group["clusterName"] == "llm-staging"
    for key in ("amiType", "releaseVersion", "instanceTypes", "taints", "updateConfig", "nodeRepairConfig"):
        assert staging_group[key] == prod_group[key]
    # Its own subnets make its own node generation; everything else about the nodes is prod's.
    generation = "llm-serving/node-generation"
    assert (staging_group["labels"][generation], prod_group["labels"][generation]) == ("01d77e386c", "8fff7a3ae2")
    assert {**staging_group["labels"], generation: "x"} == {**prod_group["labels"], generation: "x"}
    prod_releases = {r["name"]: r["inputs"] for r in prod.by_type()["kubernetes:helm.sh/v3:Release"]}
    staging_releases = {r["name"]: r["inputs"] for r in staging.by_type()["kubernetes:helm.sh/v3:Release"]}
    autoscaler = "cluster-autoscaler-release"
    assert {k: v for k, v in staging_releases.items() if k != autoscaler} == {
        k: v for k, v in prod_releases.items() if k != autoscaler}
    # The autoscaler differs only in the cluster it discovers node groups of.
    assert json.dumps(staging_releases[autoscaler]).replace("llm-staging", "llm-prod") == json.dumps(
        prod_releases[autoscaler])
    assert staging.manifest("PrometheusRule", "gpu-health") == prod.manifest("PrometheusRule", "gpu-health")


DEVICE_PLUGIN_REASON = "gpu-feature-discovery runs privileged; the device plugin mounts the kubelet socket (hostPath)"
DCGM_REASON = "dcgm-exporter runs as root with SYS_ADMIN for profiling metrics"
NODE_EXPORTER_REASON = "node-exporter uses hostNetwork, hostPID and hostPath /"


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_namespace_enforces_the_lowest_pod_security_level_its_pods_need(rendered, name):
    found = {}
    for resource in rendered[name].resources:
        if resource["type"] == "kubernetes:core/v1:Namespace":
            metadata = resource["inputs"]["metadata"]
            labels = {k.removeprefix("pod-security.kubernetes.io/"): v for k, v in metadata["labels"].items()
                      if k.startswith("pod-security.kubernetes.io/")}
            # warn and audit stay at restricted everywhere, so any gap shows in kubectl and the audit log.
            assert (labels["warn"], labels["audit"]) == ("restricted", "restricted")
            found[metadata["name"]] = (labels["enforce"],
                                       metadata.get("annotations", {}).get("llm-serving/pod-security-reason"))
    expected = {
        "llm-serving": ("restricted", None),
        "envoy-gateway-system": ("restricted", None),
        "keda": ("restricted", None),
        "nvidia-device-plugin": ("privileged", DEVICE_PLUGIN_REASON),
        "gpu-monitoring": ("privileged", DCGM_REASON),
        # Every stack routes through InferencePools: prod's and staging's models scale past one replica,
        # dev's scales to zero (its picker holds the first request while it wakes).
        "envoy-ai-gateway-system": ("restricted", None),
    }
    if name == "dev":  # dev installs kube-prometheus-stack; staging and prod use the cluster's Prometheus
        expected["monitoring"] = ("privileged", NODE_EXPORTER_REASON)
    assert found == expected


# Every stack has room for a surge pod (dev through its autoscaler's second node), so a pod-template change
# rolls one replica at a time without taking one away; Pulumi waits for the planned steps and a stuck last one,
# and a delete for the longest drain.
@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_every_stack_rolls_out_a_pod_template_change_within_its_gpus(rendered, name):
    from llm_serving.stack import timing
    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    _, config = load_stack_file(stack_file_path(name))
    (model,) = config.models
    (deployment,) = [m for m in rendered[name].manifests if m["kind"] == "Deployment"
                     and m["metadata"]["namespace"] == "llm-serving"
                     and m["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"]
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    wiring = rendered[name].wiring[f"kubernetes:apps/v1:Deployment::{deployment['metadata']['name']}-deployment"]
    wait = timing.rollout_await_seconds(config, model)
    delete = timing.model_drains(config, model).delete_timeout_seconds
    assert wait > timing.progress_deadline_seconds(config, model)
    assert delete > deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert wiring["customTimeouts"] == {"create": f"{wait}s", "update": f"{wait}s", "delete": f"{delete}s"}


@pytest.mark.parametrize(("name", "crd_charts"), [
    ("dev", {"edge-gateway-crds": "gateway-crds-helm", "prometheus-crds": "prometheus-operator-crds"}),
    ("staging", {"edge-gateway-crds": "gateway-crds-helm"}),
    ("prod", {"edge-gateway-crds": "gateway-crds-helm"}),
])
def test_crds_come_from_crd_charts_first_so_a_bump_upgrades_them(rendered, name, crd_charts):
    result = rendered[name]
    charts = {r["name"]: r["inputs"]["chart"].rsplit("/", 1)[-1]
              for r in result.by_type()["kubernetes:helm.sh/v4:Chart"]}
    assert charts == crd_charts
    gateway = result.resource("kubernetes:helm.sh/v3:Release", "edge-envoy-gateway")
    assert gateway["inputs"]["values"]["crds"] == {"enabled": False}
    assert "kubernetes:helm.sh/v4:Chart::edge-gateway-crds" in gateway["options"]["dependsOn"]
    for resource in result.resources:
        if resource["type"].startswith("kubernetes:gateway."):
            crds = "kubernetes:helm.sh/v4:Chart::edge-gateway-crds"
            assert crds in resource["options"]["dependsOn"], resource["name"]
    if "prometheus-crds" in crd_charts:
        stack = result.resource("kubernetes:helm.sh/v3:Release", "prometheus-release")
        assert stack["inputs"]["values"]["crds"] == {"enabled": False}
        assert "kubernetes:helm.sh/v4:Chart::prometheus-crds" in stack["options"]["dependsOn"]
