"""Every EKS add-on the program creates: configurationValues valid against the add-on's vendored
published schema, the version pinned for the cluster's minor, and the conflict modes chosen."""

from __future__ import annotations

import json

import pytest

from llm_serving.gpu import monitoring_agent, scheduling
from llm_serving.platform import addon_settings, addon_version, versions
from llm_serving.platform.args import validate
from llm_serving.stack.rules.platform import addon_version_rules
from stacks.config import ServingStackArgs
from tests.conftest import render_file
from tests.stacks.checks.test_gpu_node_group_checks import BASE
from tests.support import reference, stack_variants

ADDON = "aws:eks/addon:Addon"


def _fsx_variant(variants_dir):
    return render_file(stack_variants.prod_on_fsx(variants_dir))


def _addons(result) -> list[dict]:
    return [r for r in result.resources if r["type"] == ADDON]


def test_every_rendered_addon_configuration_is_valid_against_its_schema(rendered, variants_dir):
    results = {**rendered, "fsx": _fsx_variant(variants_dir)}
    seen: set[str] = set()
    for stack, result in results.items():
        for addon in _addons(result):
            inputs = addon["inputs"]
            seen.add(inputs["addonName"])
            if "configurationValues" in inputs:
                assert reference.addon_configuration_errors(
                    inputs["addonName"], inputs["configurationValues"]) == [], (stack, addon["name"])
    # The renders reach every add-on the program can create, so none escapes the check.
    assert seen == set(versions.EKS_ADDON_VERSIONS)


def test_every_rendered_addon_is_pinned_for_the_cluster_minor_with_deliberate_conflict_modes(rendered, variants_dir):
    results = {**rendered, "fsx": _fsx_variant(variants_dir)}
    for stack, result in results.items():
        # The node group runs the cluster's minor (CreateNodegroup accepts no other).
        (minor,) = {r["inputs"]["version"] for r in result.resources if r["type"] == "aws:eks/nodeGroup:NodeGroup"}
        for addon in _addons(result):
            inputs = addon["inputs"]
            got = (inputs["addonVersion"], inputs["resolveConflictsOnCreate"], inputs["resolveConflictsOnUpdate"])
            pinned = versions.EKS_ADDON_VERSIONS[inputs["addonName"]][minor]
            assert got == (pinned, "OVERWRITE", "OVERWRITE"), (stack, addon["name"])


def test_node_monitoring_agent_tolerates_the_gpu_taint_on_its_dcgm_agent_only(rendered):
    addon = rendered["prod"].resource(ADDON, "node-monitoring-agent")["inputs"]
    # nodeAgent keeps its default (every taint tolerated); dcgmAgent defaults to none.
    assert json.loads(addon["configurationValues"]) == {
        "dcgmAgent": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    assert addon["addonVersion"] == "v1.7.0-eksbuild.1"
    toleration = json.loads(addon["configurationValues"])["dcgmAgent"]["tolerations"][0]
    assert (toleration["key"], toleration["effect"]) == (scheduling.GPU_TAINT_KEY, scheduling.GPU_TAINT_EFFECT)


def test_schema_refuses_the_monitoring_agent_key_renamed_in_march_2026():
    # What the program sent before: EKS refuses CreateAddon once the node group is ACTIVE.
    old = json.dumps({"monitoringAgent": {"tolerations": [{"operator": "Exists"}]}})
    assert reference.addon_configuration_errors("eks-node-monitoring-agent", old) == [
        "add-on eks-node-monitoring-agent: monitoringAgent: unknown field (not in the schema; EKS refuses "
        "CreateAddon and UpdateAddon)"
    ]


def test_schema_refuses_unknown_keys_below_the_agents_and_wrong_types():
    bad = {"dcgmAgent": {"tolerations": [{"operator": "Exists"}], "hostNetwork": True},
           "nodeAgent": {"probePort": "8002"}}
    assert reference.addon_configuration_errors("eks-node-monitoring-agent", json.dumps(bad)) == [
        "add-on eks-node-monitoring-agent: dcgmAgent.hostNetwork: unknown field (not in the schema; EKS refuses "
        "CreateAddon and UpdateAddon)",
        "add-on eks-node-monitoring-agent: nodeAgent.probePort: '8002' is not of type 'integer'",
    ]
    assert reference.addon_configuration_errors(
        "eks-node-monitoring-agent", json.dumps(monitoring_agent.monitoring_agent_configuration())) == []


def test_configuration_of_an_addon_without_a_vendored_schema_is_refused():
    assert reference.addon_configuration_errors("aws-efs-csi-driver", "{}") == [
        "add-on aws-efs-csi-driver: no vendored configuration schema (add it to ../shared/reference/aws/addons/ "
        "and re-derive the fixtures), so its configurationValues cannot be checked"
    ]


def test_addon_settings_pin_the_version_and_conflict_modes():
    assert addon_settings("aws-efs-csi-driver", "1.33") == {
        "addon_name": "aws-efs-csi-driver", "addon_version": "v3.4.1-eksbuild.1",
        "resolve_conflicts_on_create": "OVERWRITE", "resolve_conflicts_on_update": "OVERWRITE"}


def test_addon_version_refuses_a_minor_or_addon_without_a_pin():
    expected = (r"^no aws-fsx-csi-driver add-on version is pinned for Kubernetes 1\.32 \(pinned: 1\.33, 1\.34\); "
                r"add the build EKS lists for it to llm_serving/platform/versions\.py$")
    with pytest.raises(ValueError, match=expected):
        addon_version("aws-fsx-csi-driver", "1.32")
    with pytest.raises(ValueError, match="^no version is pinned for the EKS add-on vpc-cni;"):
        addon_version("vpc-cni", "1.34")


def test_preview_refuses_a_minor_without_addon_pins_naming_the_switch():
    config = validate(ServingStackArgs, {**BASE, "cluster": {**BASE["cluster"], "kubernetesVersion": "1.32"}})
    assert [p.line() for p in addon_version_rules(config)] == [
        "llm-serving:cluster.kubernetesVersion: no eks-node-monitoring-agent add-on version is pinned for Kubernetes "
        "1.32 (pinned: 1.33, 1.34); add the build EKS lists for it to llm_serving/platform/versions.py (got \"1.32\"; "
        "expected 1.33, 1.34, or gpuNodeGroup.autoRepair.installMonitoringAgent: false)",
        "llm-serving:cluster.kubernetesVersion: no aws-efs-csi-driver add-on version is pinned for Kubernetes 1.32 "
        "(pinned: 1.33, 1.34); add the build EKS lists for it to llm_serving/platform/versions.py (got \"1.32\"; "
        "expected 1.33, 1.34, or weightsStorage.efs.installCsiDriver: false)",
    ]
    assert list(addon_version_rules(validate(ServingStackArgs, BASE))) == []
