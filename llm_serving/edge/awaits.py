"""What `pulumi up` waits for on the edge's custom resources: the `pulumi.com/waitFor` annotation values (pure).

pulumi-kubernetes awaits no custom resource by default; an object annotated `pulumi.com/waitFor` is awaited on
create and on update until the annotation holds, within the resource's custom timeout, else the provider's
10 minutes (pulumi/pulumi-kubernetes provider/pkg/await/await.go `Creation`/`Update`, metadata/overrides.go
`ReadyCondition`, read at commit 94977969d, after v4.32.0: the newest source stored, the pinned 4.34.2 not in it).
The value is one expression, or a JSON list of expressions that must all hold (`condition.NewAll`). Two forms:
- `condition=<Type>`: kubectl's check of `.status.conditions` (await/condition/kubectl.go `checkCondition`),
  which ignores a condition whose `observedGeneration`, or failing that `.status.observedGeneration`, is older
  than `metadata.generation`;
- `jsonpath={<path>}=<value>`: an RFC 9535 query (github.com/theory/jsonpath v0.9.0, provider/pkg/jsonpath), whose
  FIRST result, printed, must equal the value; "=" splits the path from the value ("==" is kept), so a path holds
  no other "=" (no `!=`, `<=`, `>=`). Its only generation check is the top-level `.status.observedGeneration`
  (await/condition/jsonpath.go), which Gateway API routes do not have: their conditions carry it per parent.
  Hence every jsonpath here selects only a condition whose `observedGeneration` equals the object's
  `$.metadata.generation` (RFC 9535 comparisons take absolute singular queries): a status written for an older
  spec selects nothing, and the await goes on waiting.

Nothing here reaches the cluster: tests/components/edge/test_awaits.py evaluates each expression, as the provider
parses it, against status documents the controllers write.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"


def _current(condition_type: str) -> str:
    """A filter on a conditions list: the condition of this type, written for the object's current spec."""
    return f'[?(@.type=="{condition_type}" && @.observedGeneration==$.metadata.generation)]'


def listener_condition(listener: str, condition_type: str) -> str:
    """A Gateway listener's condition True for the current spec (Gateway API ListenerStatus; Envoy Gateway v1.9.0
    internal/gatewayapi/status/gateway.go SetGatewayListenerStatusCondition stamps the Gateway's generation)."""
    return (f'jsonpath={{.status.listeners[?(@.name=="{listener}")].conditions{_current(condition_type)}.status}}'
            "=True")


def parent_condition(gateway: str, namespace: str, condition_type: str) -> str:
    """A route's (or InferencePool's) condition True, as written by the controller of its parent Gateway
    `namespace/gateway`, for the route's current spec (Gateway API RouteParentStatus: one entry per parentRef and
    controller, each condition with the route's generation: Envoy Gateway v1.9.0 internal/gatewayapi/status/
    route.go SetRouteStatusCondition)."""
    parent = f'[?(@.parentRef.name=="{gateway}" && @.parentRef.namespace=="{namespace}")]'
    return f"jsonpath={{.status.parents{parent}.conditions{_current(condition_type)}.status}}=True"


def _annotation(expressions: Sequence[str]) -> str:
    return expressions[0] if len(expressions) == 1 else json.dumps(list(expressions))


def gateway_wait_for(listeners: Sequence[str]) -> str:
    """The Gateway: Programmed (its proxies available and its load balancer addressed: Envoy Gateway v1.9.0
    status/gateway.go updateGatewayProgrammedCondition, which looks at no listener), and each HTTPS listener's
    certificate resolved and the listener programmed. A listener whose Secret is missing or holds no valid chain
    (cert-manager has not issued it yet) is ResolvedRefs False, reason InvalidCertificateRef, and Programmed False
    (internal/gatewayapi/validate.go validateListenerConditions, tls.go); the Gateway itself is still Programmed."""
    return _annotation(["condition=Programmed",
                        *(listener_condition(name, kind) for name in listeners for kind in ("ResolvedRefs",
                                                                                           "Programmed"))])


def route_wait_for(gateway: str, namespace: str) -> str:
    """An HTTPRoute: Accepted (attached to its listener) and ResolvedRefs (every backend found: a Service, or an
    InferencePool, a custom backend Envoy Gateway v1.9.0 reports BackendNotFound until it exists, internal/
    gatewayapi/route.go processDestination) by its Gateway's controller."""
    return _annotation([parent_condition(gateway, namespace, "Accepted"),
                        parent_condition(gateway, namespace, "ResolvedRefs")])


def policy_wait_for(gateway: str, namespace: str) -> str:
    """An Envoy Gateway policy (SecurityPolicy, ClientTrafficPolicy, BackendTrafficPolicy): Accepted by the
    controller for the Gateway it applies at, for the policy's current spec. Gateway API PolicyStatus lists one
    ancestor per Gateway (a route-targeted policy's ancestor is the route's parent Gateway, with its section), each
    condition with the policy's generation (Envoy Gateway v1.9.0 internal/gatewayapi/status/policy.go
    SetConditionForPolicyAncestor, helpers.go getAncestorRefForPolicy); a missing target leaves no ancestor, an
    invalid policy (its credential Secret missing, its route section unknown) is Accepted False. The deploy gate
    needs them in force: it expects a request without a key refused, and the routes' own timeouts."""
    ancestor = f'[?(@.ancestorRef.name=="{gateway}" && @.ancestorRef.namespace=="{namespace}")]'
    return f"jsonpath={{.status.ancestors{ancestor}.conditions{_current('Accepted')}.status}}=True"


# Envoy AI Gateway v1.1.0 sets one condition on an AIGatewayRoute: Accepted True once it has written the HTTPRoute
# of the same name and told the Gateway, else NotAccepted False (internal/controller/ai_gateway_route.go Reconcile,
# controller.go newConditions), so a refused route never satisfies this. Neither the condition nor the status has an
# observedGeneration (api/v1beta1/status.go): on an update, the previous spec's Accepted satisfies the await until
# the controller's reconcile of the new spec rewrites it. The HTTPRoute
# the controller writes is not a Pulumi resource: its acceptance by Envoy Gateway is not awaited.
AI_ROUTE_WAIT_FOR = "condition=Accepted"
