"""ValidatingAdmissionPolicies walked as the API server walks them, over a pod the EKS Pod Identity webhook
has mutated or not: what tests/components/test_pod_identity_guard.py and the stacks' tests ask of the program's
admission guards (llm_serving/platform/pod_identity.py).

The walk covers what those policies use and asserts the rest away: a binding's Deny, the policy's match
constraints (CREATE of pods, in the namespace its selector names by kubernetes.io/metadata.name), its match
conditions and validations, evaluated by cel-python (a full implementation of the CEL spec the API server
evaluates); an expression that cannot be evaluated denies, as `failurePolicy: Fail` does (Kubernetes API
reference, ValidatingAdmissionPolicySpec).
"""

from __future__ import annotations

import copy
from typing import Any

import celpy

from llm_serving.platform.pod_identity import CREDENTIALS_ENV

_CEL = celpy.Environment()


def evaluate(expression: str, **variables: Any) -> bool:
    """The boolean an expression gives over JSON-like variables; CELEvalError when it cannot be evaluated."""
    result = _CEL.program(_CEL.compile(expression)).evaluate(
        {name: celpy.json_to_cel(value) for name, value in variables.items()})
    if isinstance(result, celpy.CELEvalError):
        raise result
    if not isinstance(result, celpy.celtypes.BoolType):
        raise celpy.CELEvalError(f"{expression} gave {result!r}, not a bool")
    return bool(result)

POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
# What the webhook adds to every container of a pod whose service account has an association in effect (its
# pkg/constants.go variable names; the values EKS configures, EKS user guide pod-id-how-it-works.html).
INJECTED = [
    {"name": CREDENTIALS_ENV, "value": "http://169.254.170.23/v1/credentials"},
    {"name": "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
     "value": "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token"},
]


def denials(policies: list[dict[str, Any]], namespace: str, pod: dict[str, Any]) -> list[str]:
    """The messages with which the bound policies refuse to create `pod` in `namespace` ([] admits it)."""
    by_name = {p["metadata"]["name"]: p for p in policies if p["kind"] == POLICY}
    labels = {"kubernetes.io/metadata.name": namespace}
    found = []
    for binding in (b for b in policies if b["kind"] == BINDING):
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert set(binding["spec"]) == {"policyName", "validationActions"}, "a binding narrowed beyond the policy"
        spec = by_name[binding["spec"]["policyName"]]["spec"]
        constraints = spec["matchConstraints"]
        assert set(constraints) == {"namespaceSelector", "resourceRules"}, "a match constraint this walk ignores"
        assert set(constraints["namespaceSelector"]) == {"matchLabels"}
        if not constraints["namespaceSelector"]["matchLabels"].items() <= labels.items():
            continue
        if not any("CREATE" in rule["operations"] and "pods" in rule["resources"] and "" in rule["apiGroups"]
                   for rule in constraints["resourceRules"]):
            continue
        assert spec["failurePolicy"] == "Fail"
        try:
            if not all(evaluate(c["expression"], object=pod) for c in spec["matchConditions"]):
                continue
            found += [v["message"] for v in spec["validations"] if not evaluate(v["expression"], object=pod)]
        except celpy.CELEvalError as error:
            found.append(f"failurePolicy Fail: {error}")
    return found


def mutated(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` as the webhook leaves it when the association is in effect: the variables in every container and
    init container (the token volume and its mounts are not what the guard reads)."""
    pod = copy.deepcopy(pod)
    for container in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]:
        container["env"] = [*container.get("env", []), *INJECTED]
    return pod
