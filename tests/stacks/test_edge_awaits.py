"""Every committed stack's edge is awaited before its deploy gate: the Gateway (programmed, each certificate
resolved), each HTTPRoute (accepted and resolved by its Gateway) or, with byModel routing, the AIGatewayRoute, and
every Envoy Gateway policy (accepted at that Gateway).

Each rendered annotation is evaluated (tests/support/wait_for.py) against the status its controller writes once
the object is accepted for its current spec, and against the same status left from an older spec.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from stacks.offline import awaits
from stacks.offline.render import RenderResult
from tests.conftest import STACK_NAMES
from tests.support import wait_for

WAIT_FOR = "pulumi.com/waitFor"
CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"  # gateway-helm 1.9.0's default controller name
AWAITED_EDGE_KINDS = ("Gateway", "HTTPRoute", "AIGatewayRoute", "SecurityPolicy", "ClientTrafficPolicy",
                      "BackendTrafficPolicy")


def _accepted(obj: dict[str, Any], generation: int, gateway: dict[str, Any]) -> dict[str, Any]:
    """The status Envoy Gateway v1.9.0 / Envoy AI Gateway v1.1.0 write for an accepted object (see test_awaits.py
    under tests/components/edge for each field's source), every condition stamped with `generation`; `gateway` is
    the parentRef of the stack's routes, the ancestor at which its policies apply."""
    def ok(kind: str) -> dict[str, Any]:
        return {"type": kind, "status": "True", "reason": kind, "observedGeneration": generation}
    kind = obj["kind"]
    if kind == "Gateway":
        return {"conditions": [ok("Accepted"), ok("Programmed")],
                "listeners": [{"name": x["name"], "conditions": [ok("Accepted"), ok("ResolvedRefs"), ok("Programmed")]}
                              for x in obj["spec"]["listeners"]]}
    if kind.endswith("Policy"):
        return {"ancestors": [{"ancestorRef": gateway, "controllerName": CONTROLLER,
                               "conditions": [ok("Accepted")]}]}
    if kind == "HTTPRoute":
        return {"parents": [{"parentRef": ref, "controllerName": CONTROLLER,
                             "conditions": [ok("Accepted"), ok("ResolvedRefs")]} for ref in obj["spec"]["parentRefs"]]}
    return {"conditions": [{"type": "Accepted", "status": "True", "reason": "ReconciliationSucceeded"}]}


def _live(obj: dict[str, Any], generation: int, status: dict[str, Any]) -> dict[str, Any]:
    found = copy.deepcopy(obj)
    found["metadata"]["generation"] = generation
    found["status"] = status
    return found


def _edge_objects(result: RenderResult) -> list[dict[str, Any]]:
    return [r for r in result.resources if r["type"].rsplit(":", 1)[-1] in AWAITED_EDGE_KINDS]


def _check(result: RenderResult) -> None:
    objects = _edge_objects(result)
    assert objects, result.stack
    gates = [r for r in result.resources
             if r["type"] == "kubernetes:batch/v1:Job" and r["name"].endswith("-verify-job")]
    assert gates, result.stack
    (gateway,) = {json.dumps(ref, sort_keys=True) for r in objects if r["type"].endswith("Route")
                  for ref in r["inputs"]["spec"]["parentRefs"]}
    for resource in objects:
        key = f"{resource['type']}::{resource['name']}"
        obj = resource["inputs"]
        annotation = obj["metadata"]["annotations"][WAIT_FOR]
        accepted = _accepted(obj, 1, json.loads(gateway))
        assert wait_for.satisfied(annotation, _live(obj, 1, accepted)), key
        assert not wait_for.satisfied(annotation, _live(obj, 1, {})), key
        if obj["kind"] != "AIGatewayRoute":  # no observedGeneration to tell (llm_serving/edge/awaits.py)
            assert not wait_for.satisfied(annotation, _live(obj, 2, accepted)), key
        # Within the one clock (stacks/offline/awaits.py), and before every gate.
        assert awaits.await_seconds(resource) == awaits.KUBERNETES_AWAIT_SECONDS, key
        for gate in gates:
            assert key in gate["options"]["dependsOn"], (key, gate["name"])


@pytest.mark.parametrize("name", STACK_NAMES)
def test_every_gate_waits_for_its_edge_to_be_accepted(rendered, name):
    _check(rendered[name])


def test_by_model_routing_awaits_its_ai_gateway_route(multi_model):
    kinds = sorted({r["type"].rsplit(":", 1)[-1] for r in _edge_objects(multi_model)})
    assert kinds == ["AIGatewayRoute", "BackendTrafficPolicy", "ClientTrafficPolicy", "Gateway", "SecurityPolicy"]
    _check(multi_model)


def test_no_inference_pool_is_awaited_since_only_a_later_route_gives_it_a_parent(rendered):
    """Envoy AI Gateway lists a pool's parents from the routes that name it (v1.1.0 internal/controller/
    inference_pool.go getReferencedGateways); the picker reports ready only once it has read its pool (llm-d-router
    v0.10.0 cmd/epp/runner/health.go, PoolHasSynced); the route waits for the picker. An await on the pool would
    hold the route, and itself, until its timeout: the route's ResolvedRefs is the gateway's word that the pool
    resolved."""
    result = rendered["prod"]
    (pool,) = [r for r in result.resources if r["type"].endswith(":InferencePool")]
    (route,) = [r for r in result.resources if r["type"].endswith(":HTTPRoute")]
    assert WAIT_FOR not in (pool["inputs"]["metadata"].get("annotations") or {})
    assert "kubernetes:apps/v1:Deployment::llama-70b-epp-deployment" in route["options"]["dependsOn"]
    assert f"{pool['type']}::{pool['name']}" in route["options"]["dependsOn"]
