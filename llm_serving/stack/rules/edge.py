"""Cross-field rules of the edge: certificate sources, authentication modes, idle timeouts against
the load balancer in front, and each model's route (distinct host/path, timeouts that do not cut
the longest generation short). Pure; rules/__init__.py runs them with the other rules.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from llm_serving import routing, serving
from llm_serving.cluster import ClusterMode, LoadBalancerControllerMode
from llm_serving.edge import BY_MODEL_MAX_MODELS as MAX_MODELS
from llm_serving.edge import BY_MODEL_NOT_FOUND_RULE, ControllerMode, EdgeAuth, EdgeMode, EdgeRouting
from llm_serving.platform.args import Environment
from llm_serving.platform.problems import Problem
from llm_serving.serving import RoutingMode
from llm_serving.stack import planning
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import (
    ALB_MAX_IDLE_TIMEOUT_SECONDS,
    MIN_EDGE_TIMEOUT_SECONDS,
    generation_seconds,
    route_host,
)
from llm_serving.stack.revisions import revision_model_of


def _certificate_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """Where a gateway or ingress-nginx edge gets its certificate: exactly one source that exists by the
    time the listener needs it."""
    edge, tls = config.edge, config.edge.tls
    sources = [name for name, set_ in (("secretName", tls.secret_name is not None),
                                       ("certManagerIssuer", tls.cert_manager_issuer is not None),
                                       ("selfSigned", tls.self_signed)) if set_]
    if not sources:
        yield Problem("edge.tls", f"{edge.mode.value} mode needs a certificate source", "no secretName, "
                      "certManagerIssuer or selfSigned", "tls.secretName, tls.certManagerIssuer or tls.selfSigned")
    elif len(sources) > 1:
        yield Problem("edge.tls", "two certificate sources", " and ".join(sources), "one of them")
    if tls.self_signed and edge.mode is not EdgeMode.GATEWAY:
        yield Problem("edge.tls.selfSigned", f"only gateway mode creates the certificate, not {edge.mode.value}",
                      True, "false, with tls.secretName or tls.certManagerIssuer")
    if tls.self_signed and config.environment is Environment.PROD:
        yield Problem("edge.tls.selfSigned", "prod clients cannot verify a self-signed certificate", True,
                      "false, with tls.certManagerIssuer or tls.secretName")
    if (tls.secret_name is not None and edge.mode is EdgeMode.GATEWAY
            and edge.controller is ControllerMode.INSTALL):
        # The Gateway reads its certificate from the edge namespace, which this program creates: the named
        # Secret cannot exist before the first `pulumi up` and nothing here creates it, so the HTTPS
        # listener would stay unprogrammed (Envoy Gateway: "Secret ... does not exist").
        yield Problem("edge.tls.secretName", f"names a Secret in {planning.edge_namespace(config)}, the edge "
                      "namespace this program creates, so it cannot exist on a first up and nothing creates it",
                      tls.secret_name, "tls.selfSigned: true (dev), tls.certManagerIssuer, or edge.controller "
                      "existing with the Secret in that controller's namespace")


def _existing_gateway_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """Routes attached to a Gateway the cluster runs: its controller is the cluster's, and its listeners hold
    the certificate, so nothing of the stack's own Gateway may be asked for."""
    edge = config.edge
    if edge.mode is not EdgeMode.GATEWAY:
        yield Problem("edge.gateway", f"only gateway mode attaches to a Gateway, not {edge.mode.value}", "set",
                      "unset, or edge.mode gateway")
    if edge.controller is ControllerMode.INSTALL:
        yield Problem("edge.controller", "an existing Gateway runs under the cluster's Envoy Gateway, not one the "
                      "stack installs", "install", "existing")
    tls = edge.tls
    for key, value in (("secretName", tls.secret_name), ("certManagerIssuer", tls.cert_manager_issuer),
                       ("selfSigned", tls.self_signed or None)):
        if value is not None:
            yield Problem(f"edge.tls.{key}", "the existing Gateway's listeners hold its certificate", value, "unset")


def edge_rules(config: ServingStackArgs) -> Iterator[Problem]:
    edge = config.edge
    tls = edge.tls
    yield from _load_balancer_controller_rules(config)
    if edge.mode is EdgeMode.ALB:
        if tls.acm_certificate_arn is None:
            yield Problem("edge.tls.acmCertificateArn", "HTTPS on an ALB needs an ACM certificate", None,
                          "an ACM certificate ARN")
        if len(set(edge.load_balancer_subnet_ids)) < 2:
            # The serving pods admit exactly these subnets; without them the fence would have to
            # admit the VPC, whose range every pod shares under the VPC CNI.
            yield Problem("edge.loadBalancerSubnetIds", "an ALB needs its subnets named (two or more zones)",
                          edge.load_balancer_subnet_ids, "two or more subnet ids")
        # The serving pods' fence admits the ALB's subnets by CIDR: a subnet the GPU nodes also use would admit
        # every pod on those nodes (under the VPC CNI pods take addresses of their node's subnet).
        node_subnets = {s.id for s in config.gpu_node_group.subnets if s.id}
        shared = sorted(set(edge.load_balancer_subnet_ids) & node_subnets)
        if shared:
            yield Problem("edge.loadBalancerSubnetIds", "the ALB's subnets must not be the GPU nodes' own: the "
                          "serving pods admit these subnets' whole ranges, which would admit every pod on the nodes",
                          shared, "public or dedicated load balancer subnets, none of gpuNodeGroup.subnets[].id")
        if (edge.controller is ControllerMode.INSTALL and edge.alb_controller_role_arn is None
                and not planning.installs_load_balancer_controller(config)):
            yield Problem("edge.albControllerRoleArn", "installing the ALB controller needs its IAM role", None,
                          "the ARN of a role with the controller's IAM policy")
    elif edge.gateway is None:
        yield from _certificate_rules(config)
    if edge.gateway is not None:
        yield from _existing_gateway_rules(config)
    if edge.auth is not EdgeAuth.VLLM_API_KEY and edge.mode is not EdgeMode.GATEWAY:
        yield Problem("edge.auth", f"gateway authentication needs mode gateway, not {edge.mode.value}",
                      edge.auth.value, "vllm-api-key")
    # The stream idle timeout against the NLB's is a timing rule (llm_serving/stack/timing.py).
    if edge.auth is EdgeAuth.JWT and edge.jwt is None:
        yield Problem("edge.jwt", "auth jwt needs an issuer, a JWKS URI and the accepted audiences", None,
                      "jwt.issuer, jwt.jwksUri and jwt.audiences")
    by_model = edge.routing is EdgeRouting.BY_MODEL
    if by_model:
        yield from _by_model_rules(config)
    seen: dict[tuple[str, str], str] = {}
    for model in config.models:
        key = (route_host(config, model), model.route.path_prefix)
        if key in seen and not by_model and revision_model_of(model) != seen[key]:
            yield Problem(f"models[{model.name}].route", f"same host and path as model {seen[key]}",
                          f"{key[0]}{key[1]}", "a distinct host or pathPrefix")
        seen.setdefault(key, model.name)
        if edge.mode is not EdgeMode.GATEWAY and model.route.path_prefix != "/":
            # Neither Ingress rewrites paths and vLLM serves /v1 at its root: a prefix would 404.
            yield Problem(f"models[{model.name}].route.pathPrefix", f"{edge.mode.value} mode cannot strip a path "
                          "prefix; give each model its own host", model.route.path_prefix, "/")
        needed = generation_seconds(config, model)
        bound = model.route.max_stream_seconds
        planned = math.ceil(model.max_model_len * model.slo.itl_p95_seconds + model.slo.ttft_p95_seconds)
        floor = min(serving.MAX_STREAM_SECONDS, max(MIN_EDGE_TIMEOUT_SECONDS, planned))
        if bound is not None and bound < floor:
            yield Problem(f"models[{model.name}].route.maxStreamSeconds", f"cuts generations short: "
                          f"{model.max_model_len} tokens at the {model.slo.itl_p95_seconds:g} s ITL objective after "
                          f"the {model.slo.ttft_p95_seconds:g} s TTFT objective take {planned} s", bound,
                          f">= {floor}, or unset")
        if (planning.routing_mode(config, model) is RoutingMode.INFERENCE_POOL
                and model.slo.ttft_p95_seconds < routing.PICKER_TTFT_BUCKETS[0]):
            # The edge's TTFT alerts count requests at a bucket boundary not above the objective.
            yield Problem(f"models[{model.name}].slo.ttftP95Seconds", "below the endpoint picker's smallest "
                          "time-to-first-token bucket: the edge cannot tell a first token within it from a slower "
                          "one", model.slo.ttft_p95_seconds, f">= {routing.PICKER_TTFT_BUCKETS[0]:g}")
        if edge.mode is EdgeMode.ALB and needed > ALB_MAX_IDLE_TIMEOUT_SECONDS:
            yield Problem(f"models[{model.name}].maxModelLen", f"a non-streamed response of {model.max_model_len} "
                          f"tokens at {edge.min_decode_tokens_per_second:g} tokens/s takes {needed} s, beyond the "
                          f"ALB's {ALB_MAX_IDLE_TIMEOUT_SECONDS} s idle timeout", model.max_model_len,
                          "a gateway edge, or a shorter maxModelLen")


def _by_model_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """`edge.routing: byModel`: Envoy AI Gateway's AIGatewayRoute over every model's InferencePool, which only an
    installed Envoy Gateway with AI Gateway runs (the stack installs AI Gateway with its own Envoy Gateway only)."""
    edge = config.edge
    if edge.mode is not EdgeMode.GATEWAY or edge.controller is not ControllerMode.INSTALL:
        yield Problem("edge.routing", "byModel needs Envoy AI Gateway, which the stack installs in gateway mode with "
                      "controller install only", f"mode {edge.mode.value}, controller {edge.controller.value}",
                      "perModel, or mode gateway with controller install")
    if edge.auth is not EdgeAuth.VLLM_API_KEY:
        # The gateway modes inject vLLM's key with an HTTPRouteFilter on each model's rule; AIGatewayRoute rules
        # take no filters (aigateway.envoyproxy.io v1beta1 AIGatewayRouteRule), and AI Gateway's own way for a
        # pool (BackendSecurityPolicy) is not verified end to end here.
        yield Problem("edge.auth", "byModel routing passes the client's key through to vLLM; the gateway cannot "
                      "inject vLLM's own key on an AIGatewayRoute", edge.auth.value, "vllm-api-key")
    if len(config.models) > MAX_MODELS:
        yield Problem("models", f"one AIGatewayRoute routes at most {MAX_MODELS} models (15 rules, one reserved)",
                      len(config.models), f"<= {MAX_MODELS} models, or edge.routing perModel")
    for model in config.models:
        if model.name == BY_MODEL_NOT_FOUND_RULE or model.name.endswith("-models-not-found"):
            # A rule named route-not-found is the controller's own (the AIGatewayRoute CRD's CEL refuses it at up);
            # <gateway>-models-not-found is the unknown-model 404's policy (edge/by_model.py), beside each model's
            # policy, which is named after the model.
            yield Problem(f"models[{model.name}]", "byModel names each model's rule and policy after the model, and "
                          "this name is the unknown-model rule's or its policy's", model.name, "another model name")
        if planning.routing_mode(config, model) is not RoutingMode.INFERENCE_POOL:
            yield Problem(f"models[{model.name}].route.routing", "byModel routing sends every model to its "
                          "InferencePool", planning.routing_mode(config, model).value, "inferencePool, or unset")
        if model.route.host is not None or model.route.path_prefix != "/":
            yield Problem(f"models[{model.name}].route", "byModel routing publishes every model at "
                          f"https://{edge.host}/v1", f"host {model.route.host}, pathPrefix {model.route.path_prefix}",
                          "host and pathPrefix unset")
        if model.route.priority is not None:
            # The picker reads the objective from a header only; an AIGatewayRoute rule cannot set one per model.
            yield Problem(f"models[{model.name}].route.priority", "byModel routing cannot tag a model's requests "
                          "with its InferenceObjective", model.route.priority, "unset, or edge.routing perModel")


def _load_balancer_controller_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """The AWS Load Balancer Controller: the one a created cluster needs, and one install at most."""
    edge, key = config.edge, "cluster.loadBalancerController"
    created = config.cluster.mode is ClusterMode.CREATE
    if created and config.cluster.load_balancer_controller is LoadBalancerControllerMode.EXISTING:
        yield Problem(key, "a cluster the stack creates runs no load balancer controller: the edge would get no "
                      "load balancer", "existing", "install, or unset")
    if created and edge.mode is EdgeMode.ALB:
        # An ALB's subnets are named by id (edge.loadBalancerSubnetIds, the serving pods' fence), and a
        # created VPC's subnets have ids only once the up made them.
        yield Problem("edge.mode", "alb is not supported with cluster.mode create (its subnets are named by id)",
                      "alb", "gateway")
    if edge.mode is not EdgeMode.ALB or not planning.installs_load_balancer_controller(config):
        return
    if edge.alb_controller_role_arn is not None:
        yield Problem("edge.albControllerRoleArn", "the program creates the controller's role when it installs the "
                      f"controller ({key} install)", edge.alb_controller_role_arn, "unset")
    if edge.controller is ControllerMode.EXISTING:
        yield Problem("edge.controller", f"alb mode's controller is the one {key} installs", "existing",
                      f"install, or {key} existing")
