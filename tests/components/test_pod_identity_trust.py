"""Every Pod Identity role trusts exactly the service account its association binds, on this cluster.

EKS Pod Identity tags each session with the cluster ARN, namespace and service account (EKS user guide,
pod-id-abac.html#pod-id-abac-tags); the trust policy matches them, so a role bound to the wrong name would never
hand out credentials, and another association naming the role could not assume it.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import STACK_NAMES

ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ROLE = "aws:iam/role:Role"
ADDON = "aws:eks/addon:Addon"


def _bindings(resources: list[dict]) -> list[tuple[str, str, str]]:
    """(role ARN, namespace, service account) of every association, standalone or an add-on's."""
    found = [(r["inputs"]["roleArn"], r["inputs"]["namespace"], r["inputs"]["serviceAccount"])
             for r in resources if r["type"] == ASSOCIATION]
    for addon in (r for r in resources if r["type"] == ADDON):
        # EKS installs the add-ons' controllers in kube-system.
        found += [(a["roleArn"], "kube-system", a["serviceAccount"])
                  for a in addon["inputs"].get("podIdentityAssociations", [])]
    return found


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_each_role_trusts_the_service_account_its_association_binds(rendered, stack):
    resources = rendered[stack].resources
    roles = {f"arn:aws:iam::123456789012:role/{r['name']}": r for r in resources if r["type"] == ROLE}
    bindings = _bindings(resources)
    assert bindings, f"{stack} binds no role through Pod Identity"
    cluster = next(r for r in resources if r["type"] == ASSOCIATION or r["type"] == ADDON)["inputs"]["clusterName"]
    for role_arn, namespace, service_account in bindings:
        (statement,) = json.loads(roles[role_arn]["inputs"]["assumeRolePolicy"])["Statement"]
        assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert statement["Condition"] == {"StringEquals": {
            "aws:RequestTag/eks-cluster-arn": f"arn:aws:eks:us-east-1:123456789012:cluster/{cluster}",
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account}}


def test_a_trust_policy_without_its_session_tag_conditions_cannot_be_built():
    from llm_serving.platform import pod_identity_trust_policy

    arn = "arn:aws:eks:us-east-1:123456789012:cluster/llm-prod"
    for args in (("llm-prod", "kube-system", "sa"), (arn, "", "sa"), (arn, "kube-system", "")):
        with pytest.raises(ValueError, match="needs the cluster ARN, the namespace and the service account"):
            pod_identity_trust_policy(*args)
    # Each condition is a session tag the EKS user guide lists; none is a key the guide does not say EKS sends.
    (statement,) = pod_identity_trust_policy(arn, "kube-system", "sa")["Statement"]
    assert list(statement["Condition"]) == ["StringEquals"]
    assert {key.removeprefix("aws:RequestTag/") for key in statement["Condition"]["StringEquals"]} <= {
        "eks-cluster-arn", "eks-cluster-name", "kubernetes-namespace", "kubernetes-service-account",
        "kubernetes-pod-name", "kubernetes-pod-uid"}
