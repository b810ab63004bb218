"""Tests for llm_serving/edge/awaits.py: what `pulumi up` waits for on the Gateway, the routes and the AIGatewayRoute.

Each rendered `pulumi.com/waitFor` is evaluated as pulumi-kubernetes would (tests/support/wait_for.py) against
status documents shaped as the controllers write them: Envoy Gateway v1.9.0 for the Gateway and HTTPRoutes
(internal/gatewayapi/status/gateway.go and route.go: every condition stamped with the object's generation; a
missing certificate Secret is a listener's ResolvedRefs False, InvalidCertificateRef; a missing backend a route's
ResolvedRefs False, BackendNotFound), Envoy AI Gateway v1.1.0 for the AIGatewayRoute (internal/controller/
controller.go newConditions: one condition, Accepted True or NotAccepted False, no observedGeneration).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from llm_serving.edge import awaits, by_model
from llm_serving.edge import objects as edge
from tests.components.edge.test_by_model import ROUTES as POOL_ROUTES
from tests.components.edge.test_by_model import SETTINGS as BY_MODEL
from tests.components.edge.test_objects import CERT_MANAGER, EDGE_NS, LLAMA, QWEN_OWN_HOST, ROUTES, SETTINGS, one
from tests.support import wait_for

WAIT_FOR = "pulumi.com/waitFor"
CONTROLLER = edge.CONTROLLER_NAME


def condition(kind: str, status: str, generation: int | None, reason: str = "") -> dict[str, Any]:
    found = {"type": kind, "status": status, "reason": reason or (kind if status == "True" else "Invalid"),
             "message": "", "lastTransitionTime": "2026-12-06T12:00:00Z"}
    return found if generation is None else {**found, "observedGeneration": generation}


def live(obj: dict[str, Any], generation: int, status: dict[str, Any] | None) -> dict[str, Any]:
    """The object as the API server returns it: its generation, and the status its controller wrote."""
    found = copy.deepcopy(obj)
    found["metadata"]["generation"] = generation
    if status is not None:
        found["status"] = status
    return found


# --------------------------------------------------------------------------------------------
# HTTPRoute: Accepted and ResolvedRefs by its own Gateway, for its current spec


ROUTE = one(edge.gateway_objects(SETTINGS, ROUTES), "HTTPRoute", "llama-70b")
PARENT = ROUTE["spec"]["parentRefs"][0]


def route_status(accepted: str, resolved: str, generation: int, parent: dict[str, Any] = PARENT,
                 resolved_reason: str = "") -> dict[str, Any]:
    return {"parents": [{"parentRef": parent, "controllerName": CONTROLLER, "conditions": [
        condition("Accepted", accepted, generation, "" if accepted == "True" else "NotAllowedByListeners"),
        condition("ResolvedRefs", resolved, generation, resolved_reason),
    ]}]}


@pytest.mark.parametrize("generation,status,ready", [
    (1, None, False),  # just created: no controller has written a status yet
    (1, route_status("True", "True", 1), True),
    # The spec changed (generation 2) and Envoy Gateway has not reconciled it yet: the previous generation's
    # Accepted must not let the gate run against the old route.
    (2, route_status("True", "True", 1), False),
    (2, route_status("True", "True", 2), True),
    (1, route_status("False", "True", 1), False),  # the listener does not admit the route's namespace
    (1, route_status("True", "False", 1, resolved_reason="BackendNotFound"), False),  # no Service, no pool yet
    # Accepted by another Gateway only (a second parent of the same name elsewhere): not ours.
    (1, route_status("True", "True", 1, parent={**PARENT, "namespace": "other"}), False),
], ids=["fresh", "accepted", "stale", "reconciled", "refused", "backend-missing", "other-gateway"])
def test_route_await_holds_only_for_its_gateways_acceptance_of_the_current_spec(
        generation: int, status: dict[str, Any] | None, ready: bool) -> None:
    assert wait_for.satisfied(ROUTE["metadata"]["annotations"][WAIT_FOR], live(ROUTE, generation, status)) is ready


def test_route_await_names_the_parent_the_route_attaches_to() -> None:
    # Our own Gateway's listener, or an existing Gateway in its own namespace: the await follows the parentRef.
    existing = dataclasses.replace(SETTINGS, existing_gateway=True, gateway_name="shared", gateway_namespace="infra",
                                   listener="https")
    (route,) = [o for o in edge.gateway_objects(existing, [LLAMA]) if o["kind"] == "HTTPRoute"]
    parent = route["spec"]["parentRefs"][0]
    assert (parent["name"], parent["namespace"]) == ("shared", "infra")
    annotation = route["metadata"]["annotations"][WAIT_FOR]
    assert wait_for.satisfied(annotation, live(route, 1, route_status("True", "True", 1, parent=parent)))
    assert not wait_for.satisfied(annotation, live(route, 1, route_status("True", "True", 1)))


def test_every_http_route_of_the_gateway_is_awaited() -> None:
    routes = [o for o in edge.gateway_objects(SETTINGS, ROUTES) if o["kind"] == "HTTPRoute"]
    assert len(routes) == len(ROUTES)
    assert {o["metadata"]["annotations"][WAIT_FOR] for o in routes} == {
        awaits.route_wait_for(SETTINGS.gateway_name, EDGE_NS)}


# --------------------------------------------------------------------------------------------
# Gateway: Programmed, and each listener's certificate resolved


GATEWAY = one(edge.gateway_objects(CERT_MANAGER, [LLAMA, QWEN_OWN_HOST]), "Gateway", "llm-serving")
LISTENERS = [listener["name"] for listener in GATEWAY["spec"]["listeners"]]


def gateway_status(generation: int, programmed: str = "True", certificates: dict[str, str] | None = None,
                   listener_generation: int | None = None) -> dict[str, Any]:
    certificates = certificates or {}
    listeners = []
    for name in LISTENERS:
        resolved = certificates.get(name, "True")
        listeners.append({"name": name, "attachedRoutes": 1, "supportedKinds": [], "conditions": [
            condition("ResolvedRefs", resolved, listener_generation or generation,
                      "" if resolved == "True" else "InvalidCertificateRef"),
            condition("Programmed", resolved, listener_generation or generation),
            condition("Accepted", "True", listener_generation or generation),
        ]})
    return {"conditions": [condition("Accepted", "True", generation), condition("Programmed", programmed, generation)],
            "listeners": listeners}


@pytest.mark.parametrize("generation,status,ready", [
    (1, None, False),
    (1, gateway_status(1), True),
    # cert-manager has not issued the certificate of one host yet: Envoy Gateway still reports the Gateway
    # Programmed (proxies up, address assigned), but that listener is not: no TLS to serve on that host.
    (1, gateway_status(1, certificates={"https-qwen-example-com": "False"}), False),
    (1, gateway_status(1, programmed="False"), False),  # no address yet, or no proxy available
    (2, gateway_status(2, listener_generation=1), False),  # a listener added: its old status is stale
    (2, gateway_status(1), False),
], ids=["fresh", "programmed", "certificate-pending", "not-programmed", "stale-listeners", "stale"])
def test_gateway_await_holds_once_programmed_with_every_certificate(
        generation: int, status: dict[str, Any] | None, ready: bool) -> None:
    assert wait_for.satisfied(GATEWAY["metadata"]["annotations"][WAIT_FOR], live(GATEWAY, generation, status)) is ready


def test_gateway_await_covers_each_listener() -> None:
    expressions = json.loads(GATEWAY["metadata"]["annotations"][WAIT_FOR])
    assert expressions[0] == "condition=Programmed"
    assert LISTENERS == ["https-llm-example-com", "https-qwen-example-com"]
    for name in LISTENERS:
        assert awaits.listener_condition(name, "ResolvedRefs") in expressions
        assert awaits.listener_condition(name, "Programmed") in expressions


# --------------------------------------------------------------------------------------------
# Envoy Gateway policies: accepted at our Gateway, for their current spec


def policy_status(accepted: str, generation: int, gateway: str = "llm-serving", namespace: str = EDGE_NS,
                  section: str | None = None) -> dict[str, Any]:
    ancestor = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway, "namespace": namespace,
                **({"sectionName": section} if section else {})}
    return {"ancestors": [{"ancestorRef": ancestor, "controllerName": CONTROLLER, "conditions": [
        condition("Accepted", accepted, generation)]}]}


POLICIES = [o for o in edge.gateway_objects(SETTINGS, ROUTES)
            if o["kind"] in ("SecurityPolicy", "ClientTrafficPolicy", "BackendTrafficPolicy")]


@pytest.mark.parametrize("generation,status,ready", [
    (1, None, False),  # its target not there yet: no ancestor
    (1, policy_status("True", 1), True),
    # A route-targeted policy's ancestor is the route's parent Gateway, with the route's section.
    (1, policy_status("True", 1, section="https-llm-example-com"), True),
    (2, policy_status("True", 1), False),
    (1, policy_status("False", 1), False),  # invalid: a credential Secret missing, an unknown section
    (1, policy_status("True", 1, gateway="other"), False),
], ids=["fresh", "accepted", "accepted-at-section", "stale", "refused", "other-gateway"])
def test_every_policy_await_holds_once_accepted_at_our_gateway(generation: int, status: dict[str, Any] | None,
                                                             ready: bool) -> None:
    assert sorted(o["kind"] for o in POLICIES) == ["BackendTrafficPolicy", "BackendTrafficPolicy",
                                                   "ClientTrafficPolicy", "SecurityPolicy"]
    for policy in POLICIES:
        annotation = policy["metadata"]["annotations"][WAIT_FOR]
        assert wait_for.satisfied(annotation, live(policy, generation, status)) is ready, policy["kind"]


def test_a_shared_gateways_route_policies_wait_for_that_gateway() -> None:
    existing = dataclasses.replace(SETTINGS, existing_gateway=True, gateway_name="shared", gateway_namespace="infra",
                                   listener="https")
    policies = [o for o in edge.gateway_objects(existing, [LLAMA])
                if o["kind"] in ("SecurityPolicy", "BackendTrafficPolicy")]
    assert len(policies) == 2
    for policy in policies:
        annotation = policy["metadata"]["annotations"][WAIT_FOR]
        assert wait_for.satisfied(annotation, live(policy, 1, policy_status("True", 1, "shared", "infra", "https")))
        assert not wait_for.satisfied(annotation, live(policy, 1, policy_status("True", 1)))


def test_by_model_policies_are_awaited_too() -> None:
    policies = [o for o in by_model.models_route_objects(BY_MODEL, POOL_ROUTES) if o["kind"] == "BackendTrafficPolicy"]
    assert len(policies) == len(POOL_ROUTES) + 1  # one per model's rule, one on route-not-found
    assert {p["metadata"]["annotations"][WAIT_FOR] for p in policies} == {
        awaits.policy_wait_for(BY_MODEL.gateway_name, EDGE_NS)}


# --------------------------------------------------------------------------------------------
# AIGatewayRoute (byModel): accepted by Envoy AI Gateway


AI_ROUTE = one(by_model.models_route_objects(BY_MODEL, POOL_ROUTES), "AIGatewayRoute",
               by_model.models_route_name(BY_MODEL))


@pytest.mark.parametrize("generation,status,ready", [
    (1, None, False),
    (1, {"conditions": [condition("Accepted", "True", None, "ReconciliationSucceeded")]}, True),
    (1, {"conditions": [condition("NotAccepted", "False", None, "ReconciliationFailed")]}, False),
    # The documented window (awaits.AI_ROUTE_WAIT_FOR): no observedGeneration, so an older spec's Accepted passes.
    (2, {"conditions": [condition("Accepted", "True", None, "ReconciliationSucceeded")]}, True),
], ids=["fresh", "accepted", "refused", "stale-passes"])
def test_ai_gateway_route_await_holds_once_accepted(generation: int, status: dict[str, Any] | None,
                                                    ready: bool) -> None:
    annotation = AI_ROUTE["metadata"]["annotations"][WAIT_FOR]
    assert annotation == "condition=Accepted"
    assert wait_for.satisfied(annotation, live(AI_ROUTE, generation, status)) is ready


# --------------------------------------------------------------------------------------------
# What the provider accepts


def test_every_expression_parses_as_the_provider_parses_it() -> None:
    """One "=" outside "==" (jsonpath.go Parse splits on it), braces, a value: else `pulumi up` fails at once."""
    annotations = [GATEWAY["metadata"]["annotations"][WAIT_FOR], ROUTE["metadata"]["annotations"][WAIT_FOR]]
    expressions = [e for a in annotations for e in json.loads(a)]
    assert len(expressions) == 1 + 2 * len(LISTENERS) + 2
    for expression in expressions:
        if expression.startswith("jsonpath="):
            _, value = wait_for.parse(expression)
            assert value == "True"


@pytest.mark.parametrize("expression", [
    'jsonpath={.status.parents[?(@.parentRef.name!="x")].conditions}=True',  # "!=" splits into three parts
    "jsonpath=.status.conditions=True",  # no braces
    'jsonpath={.status.parents[?(@.parentRef.name=="x" || @.y=="z")].status}=True',  # not in the subset: refused
    "{.status}=True",  # no prefix
])
def test_the_evaluator_refuses_what_it_cannot_check(expression: str) -> None:
    with pytest.raises(ValueError):
        wait_for.satisfied(expression, {"metadata": {"generation": 1}, "status": {}})
