"""No destroy, rename or replacement deletes a CRD: every resource that applies CRDs is retained on
delete (protected in prod), and KEDA's chart keeps its templated CRDs on uninstall."""

from __future__ import annotations

import pytest

from stacks.offline.replacements import applies_crds
from tests.conftest import STACK_NAMES


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_crd_carrier_is_retained_on_delete_and_protected_in_prod(rendered, name):
    carriers = [r for r in rendered[name].resources if applies_crds(r)]
    assert carriers, "every stack applies some CRDs (at least Gateway API's or KEDA's)"
    for resource in carriers:
        options = resource["options"]
        if resource["type"] == "kubernetes:helm.sh/v3:Release" and resource["inputs"]["chart"] in ("keda", "lws"):
            # A controller and its CRDs in one release: retaining the release would leave the controller
            # running after destroy; the CRDs are kept by Helm itself instead (below, and lws's crds/).
            continue
        assert (resource["name"], options["retainOnDelete"], options["protect"]) == (
            resource["name"], True, name == "prod")


@pytest.mark.parametrize("name", STACK_NAMES)
def test_kedas_templated_crds_carry_helms_keep_policy(rendered, name):
    releases = [r for r in rendered[name].resources
                if r["type"] == "kubernetes:helm.sh/v3:Release" and r["inputs"]["chart"] == "keda"]
    for release in releases:
        assert release["inputs"]["values"]["crds"] == {
            "install": True, "additionalAnnotations": {"helm.sh/resource-policy": "keep"}}


def test_prod_retains_and_protects_the_gateway_pool_and_objective_crds(rendered):
    protected = sorted((r["type"], r["name"]) for r in rendered["prod"].resources
                       if applies_crds(r) and r["options"]["protect"])
    assert protected == [
        ("kubernetes:helm.sh/v3:Release", "edge-ai-gateway-crds"),
        ("kubernetes:helm.sh/v4:Chart", "edge-gateway-crds"),
        ("kubernetes:yaml/v2:ConfigGroup", "edge-inference-pool-crds"),
        ("kubernetes:yaml/v2:ConfigGroup", "inference-routing-objective-crds"),
    ]
