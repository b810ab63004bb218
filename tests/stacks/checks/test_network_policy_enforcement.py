"""A stack that relies on NetworkPolicies refuses to preview when the VPC CNI does not enforce them."""

from __future__ import annotations

import json

import pytest

from llm_serving.platform.args import validate
from llm_serving.stack.rules.platform import network_policy_enforcement_problem
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_gpu_node_group_checks import BASE


def config(**cluster) -> ServingStackArgs:
    return validate(ServingStackArgs, {**BASE, "cluster": {**BASE["cluster"], **cluster}})


@pytest.mark.parametrize("values", ['{"enableNetworkPolicy": "true"}', '{"enableNetworkPolicy": true, "x": 1}'])
def test_the_vpc_cni_enforcing_network_policies_passes(values):
    assert network_policy_enforcement_problem(config(), values) is None


@pytest.mark.parametrize("values", [None, "", "{}", '{"enableNetworkPolicy": "false"}', "not json"])
def test_a_vpc_cni_without_enforcement_is_refused_with_the_fix(values):
    problem = network_policy_enforcement_problem(config(), values)
    assert problem is not None
    assert problem.line() == (
        "llm-serving:cluster.networkPolicyEnforcement: the vpc-cni add-on of cluster llm-prod does not enforce "
        f"NetworkPolicies, so nothing fences the models (got {json.dumps(values or None)}; "
        "expected enableNetworkPolicy: \"true\" in the add-on's configuration, or networkPolicyEnforcement: other)"
    )


def test_another_enforcer_is_taken_at_its_word():
    assert network_policy_enforcement_problem(config(networkPolicyEnforcement="other"), None) is None


def test_a_preview_against_a_cluster_without_enforcement_stops_before_any_resource(monkeypatch):
    from stacks.config import files as stack_files
    from stacks.offline import render

    original = render.RenderMocks.call

    def no_enforcement(self, args):
        if args.token == "aws:eks/getAddon:getAddon":
            return {"addonName": "vpc-cni", "clusterName": args.args["clusterName"], "id": "x",
                    "configurationValues": "{}"}
        return original(self, args)

    monkeypatch.setattr(render.RenderMocks, "call", no_enforcement)
    with pytest.raises(Exception, match="rely on NetworkPolicies nothing enforces"):
        render.render_stack(stack_files.stack_file_path("dev"))
