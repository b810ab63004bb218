"""A model's routes over two revisions (edge/objects.py `_revision_rules`): the split by weight over the revisions'
Services on the model's HTTPRoute, and on a second HTTPRoute (which `pulumi up` creates before a revision's gate, and
the split after it) a header rule per revision to its own pool with the rule's rewrite and credential filters kept
and the picker's objective named after that revision's pool, both routes closing the runtime adapter API and held
by the model's policies, all valid against the Gateway API CRDs."""

from __future__ import annotations

import dataclasses

from llm_serving.edge import REVISION_HEADER, RouteRevision
from llm_serving.edge import objects as edge
from llm_serving.routing import OBJECTIVE_HEADER
from tests.components.edge.test_objects import API_KEYS, QWEN, one
from tests.support.reference import kubernetes_object_errors

PAIR = dataclasses.replace(
    QWEN, inference_pool=True, objective_header=(OBJECTIVE_HEADER, "qwen-7b"),
    revisions=(RouteRevision("stable", "qwen-7b", 75), RouteRevision("next", "qwen-7b-next", 25)))


def _rules() -> list[dict]:
    """The model's route's rules, then its header rules' route's."""
    objects = edge.gateway_objects(API_KEYS, [PAIR])
    return [rule for name in ("qwen-7b", "qwen-7b.revisions")
            for rule in one(objects, "HTTPRoute", name)["spec"]["rules"]]


def test_the_route_over_two_revisions_validates_against_the_crds():
    objects = [o for o in edge.gateway_objects(API_KEYS, [PAIR]) if o["kind"] != "HTTPRouteFilter"]
    assert [e for o in objects for e in kubernetes_object_errors(o, "1.34")] == []


def test_the_split_names_each_revisions_service_with_its_weight():
    split = _rules()[0]
    assert split["backendRefs"] == [
        {"group": "", "kind": "Service", "name": "qwen-7b", "port": QWEN.port, "weight": 75},
        {"group": "", "kind": "Service", "name": "qwen-7b-next", "port": QWEN.port, "weight": 25}]
    assert not any(m.get("headers") for m in split["matches"])


def test_each_header_rule_keeps_the_rewrite_and_the_credential_and_names_its_own_objective():
    split, closed, stable, following, closed_too = _rules()
    assert closed == closed_too
    for rule, name, pool in ((stable, "stable", "qwen-7b"), (following, "next", "qwen-7b-next")):
        assert [m["headers"] for m in rule["matches"]] == [[{"type": "Exact", "name": REVISION_HEADER,
                                                             "value": name}]]
        assert [m["path"] for m in rule["matches"]] == [m["path"] for m in split["matches"]]
        assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool}]
        kinds = [f["type"] for f in rule["filters"]]
        assert kinds.count("URLRewrite") == 1 and kinds.count("ExtensionRef") == 1
        (objective,) = [f for f in rule["filters"] if f["type"] == "RequestHeaderModifier"]
        assert objective["requestHeaderModifier"]["set"] == [{"name": OBJECTIVE_HEADER, "value": pool}]
        assert rule["timeouts"] == split["timeouts"]
    # The runtime adapter API stays closed under the prefix.
    assert all(m["path"]["type"] == "Exact" for m in closed["matches"])


def test_the_models_policies_hold_both_of_its_routes():
    objects = edge.gateway_objects(API_KEYS, [PAIR])
    policy = one(objects, "BackendTrafficPolicy", "qwen-7b")
    assert [t["name"] for t in policy["spec"]["targetRefs"]] == ["qwen-7b", "qwen-7b.revisions"]
    # On a Gateway that is not the stack's, the keys are checked per route: the header rules' route too, or a
    # revision would be open to anyone who sends its header.
    existing = dataclasses.replace(API_KEYS, existing_gateway=True, gateway_namespace="shared", listener="https")
    security = one(edge.gateway_objects(existing, [PAIR]), "SecurityPolicy", "llm-serving-auth")
    assert [t["name"] for t in security["spec"]["targetRefs"]] == ["qwen-7b", "qwen-7b.revisions"]


def test_a_route_without_revisions_keeps_its_single_backend():
    single = one(edge.gateway_objects(API_KEYS, [QWEN]), "HTTPRoute", "qwen-7b")["spec"]["rules"]
    assert len(single) == 2 and "weight" not in single[0]["backendRefs"][0]
