"""A created cluster's add-ons in preflight: their pinned versions and configurationValues are the
rendered ones, and vpc-cni's are checked against the schema EKS serves for the pin (no schema of
vpc-cni's configuration is published outside the account, so none is vendored)."""

from __future__ import annotations

import dataclasses
import json

from stacks import environment
from stacks.config.files import PROJECT_DIR
from stacks.preflight import intent
from stacks.preflight.result import Outcome
from tests.conftest import render_file
from tests.stacks.preflight.support import Aws, context
from tests.stacks.preflight.test_aws_checks import aws, run  # noqa: F401 - the aws fixture

SANDBOX = PROJECT_DIR / "examples" / "Pulumi.sandbox.yaml"
# A stand-in for what DescribeAddonConfiguration returns: only its shape matters here (a closed object
# whose enableNetworkPolicy is a "true"/"false" string), not that it is vpc-cni's published schema.
STAND_IN_SCHEMA = {"type": "object", "additionalProperties": False,
                   "properties": {"enableNetworkPolicy": {"type": "string", "enum": ["true", "false"]}}}


def sandbox_intent():
    _, config = environment.load_stack_file(SANDBOX)
    return intent("sandbox", "us-east-1", config)


def test_created_cluster_addons_are_the_rendered_ones_at_their_pins():
    created = {a["inputs"]["addonName"]: (a["inputs"]["addonVersion"],
                                          json.loads(a["inputs"].get("configurationValues") or "null"))
               for a in render_file(SANDBOX).by_type()["aws:eks/addon:Addon"]
               if a["parent"] == "llmserving:cluster:Cluster::cluster"}
    found = {a.name: (a.version, a.configuration) for a in sandbox_intent().addons if a.version is not None}
    assert found == created
    assert found["vpc-cni"] == ("v1.22.3-eksbuild.1", {"enableNetworkPolicy": "true"})
    # coredns, kube-proxy and the Pod Identity agent send no configurationValues: nothing to validate.
    assert {name for name, (_, values) in found.items() if values is None} == {
        "coredns", "kube-proxy", "eks-pod-identity-agent"}


def _vpc_cni_only(values: dict | None = None):
    found = sandbox_intent()
    (cni,) = [a for a in found.addons if a.name == "vpc-cni"]
    if values is not None:
        cni = dataclasses.replace(cni, configuration=values)
    return dataclasses.replace(found, addons=(cni,))


def test_vpc_cni_configuration_is_validated_against_the_pinned_versions_schema(aws: Aws):  # noqa: F811
    # The pin is asked for directly: no DescribeAddon or DescribeAddonVersions on a cluster that does
    # not exist yet (the Stubber fails on any call not queued here).
    for values, outcome in ((None, Outcome.PASS), ({"enableNetworkPolicy": True}, Outcome.FAIL)):
        aws.respond("eks", "describe_addon_configuration",
                    {"addonName": "vpc-cni", "addonVersion": "v1.22.3-eksbuild.1",
                     "configurationSchema": json.dumps(STAND_IN_SCHEMA)},
                    {"addonName": "vpc-cni", "addonVersion": "v1.22.3-eksbuild.1"})
        (finding,) = run("addons.configuration", context(aws, _vpc_cni_only(values)))
        assert finding.outcome is outcome
    assert finding.reason == ("vpc-cni v1.22.3-eksbuild.1 (pinned for Kubernetes 1.34) rejects the configurationValues "
                              "the program sends: enableNetworkPolicy: True is not of type 'string'; "
                              "enableNetworkPolicy: True is not one of ['true', 'false']")
    assert finding.fix.endswith("cluster.mode: existing")
