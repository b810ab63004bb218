"""Edge and autoscaling settings that cannot work are rejected at preview, with the numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from llm_serving.platform.args import validate
from llm_serving.stack import planning
from stacks import checks
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_gpu_node_group_checks import BASE

ACM = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-0000-4000-8000-000000000000"
ALB_SUBNETS = ["subnet-0aaa1111", "subnet-0bbb2222"]


def config(edge: dict[str, Any] | None = None, models: list[dict[str, Any]] | None = None) -> ServingStackArgs:
    return validate(ServingStackArgs,
        {**BASE, "edge": {**BASE["edge"], **(edge or {})}, "models": models or BASE["models"]}
    )


def lines(**kwargs: Any) -> list[str]:
    return [p.line() for p in checks.check(config(**kwargs))]


def model(**fields: Any) -> dict[str, Any]:
    return {**BASE["models"][0], **fields}


def test_base_edge_is_valid():
    assert lines() == []


def test_rejects_unknown_mode():
    with pytest.raises(ValidationError) as caught:
        config(edge={"mode": "traefik"})
    assert caught.value.errors()[0]["loc"] == ("edge", "mode")


def test_rejects_tls_without_a_certificate_source():
    assert lines(edge={"tls": {}}) == [
        'llm-serving:edge.tls: gateway mode needs a certificate source (got "no secretName, certManagerIssuer or '
        'selfSigned"; expected tls.secretName, tls.certManagerIssuer or tls.selfSigned)'
    ]


def test_rejects_a_tls_secret_in_the_edge_namespace_the_program_creates():
    # Dev named one before: the namespace is created by the first up, so no Secret can be in it yet, and the
    # HTTPS listener would never be programmed.
    assert lines(edge={"tls": {"secretName": "llm-dev-tls"}}) == [
        'llm-serving:edge.tls.secretName: names a Secret in envoy-gateway-system, the edge namespace this program '
        'creates, so it cannot exist on a first up and nothing creates it (got "llm-dev-tls"; expected '
        "tls.selfSigned: true (dev), tls.certManagerIssuer, or edge.controller existing with the Secret in that "
        "controller's namespace)"
    ]
    # An existing controller's namespace is the operator's: the Secret can be there already.
    assert lines(edge={"tls": {"secretName": "llm-dev-tls"}, "controller": "existing"}) == []


def test_a_self_signed_certificate_is_for_dev_gateways_only():
    assert lines(edge={"tls": {"selfSigned": True}}) == [
        "llm-serving:edge.tls.selfSigned: prod clients cannot verify a self-signed certificate (got true; "
        "expected false, with tls.certManagerIssuer or tls.secretName)"
    ]
    assert lines(edge={"tls": {"selfSigned": True, "certManagerIssuer": "letsencrypt"}})[0] == (
        'llm-serving:edge.tls: two certificate sources (got "certManagerIssuer and selfSigned"; expected one of them)')


def test_rejects_alb_without_an_acm_certificate():
    assert lines(edge={"mode": "alb", "controller": "existing", "loadBalancerSubnetIds": ALB_SUBNETS}) == [
        "llm-serving:edge.tls.acmCertificateArn: HTTPS on an ALB needs an ACM certificate (got null; "
        "expected an ACM certificate ARN)"
    ]


def test_rejects_installing_the_alb_controller_without_its_role():
    assert lines(edge={"mode": "alb", "tls": {"acmCertificateArn": ACM}, "loadBalancerSubnetIds": ALB_SUBNETS}) == [
        "llm-serving:edge.albControllerRoleArn: installing the ALB controller needs its IAM role (got null; "
        "expected the ARN of a role with the controller's IAM policy)"
    ]


@pytest.mark.parametrize("subnets", [[], ["subnet-0aaa1111"], ["subnet-0aaa1111", "subnet-0aaa1111"]])
def test_rejects_alb_without_two_named_subnets(subnets):
    edge = {"mode": "alb", "controller": "existing", "tls": {"acmCertificateArn": ACM},
            "loadBalancerSubnetIds": subnets}
    assert lines(edge=edge) == [
        f"llm-serving:edge.loadBalancerSubnetIds: an ALB needs its subnets named (two or more zones) (got "
        f"{json.dumps(subnets)}; expected two or more subnet ids)"
    ]


def test_rejects_alb_subnets_that_the_gpu_nodes_use():
    # The fence admits the ALB's subnets by CIDR: one of the nodes' own would admit every pod on those nodes.
    node_subnet = BASE["gpuNodeGroup"]["subnets"][0]["id"]
    edge = {"mode": "alb", "controller": "existing", "tls": {"acmCertificateArn": ACM},
            "loadBalancerSubnetIds": [ALB_SUBNETS[0], node_subnet]}
    (problem,) = lines(edge=edge)
    assert problem.startswith("llm-serving:edge.loadBalancerSubnetIds: the ALB's subnets must not be the GPU "
                              "nodes' own")
    assert f'(got ["{node_subnet}"]; expected public or dedicated load balancer subnets' in problem


def test_rejects_a_hostname_that_is_not_a_dns_name():
    with pytest.raises(ValidationError) as caught:
        config(edge={"host": "LLM_example.com"})
    assert caught.value.errors()[0]["loc"] == ("edge", "host")


def test_rejects_two_models_on_the_same_host_and_path():
    second = model(name="qwen-7b-b")
    assert lines(models=[model(), second]) == [
        'llm-serving:models[qwen-7b-b].route: same host and path as model qwen-7b (got "llm.example.com/"; '
        "expected a distinct host or pathPrefix)"
    ]
    assert lines(models=[model(), model(name="qwen-7b-b", route={"pathPrefix": "/b"})]) == []


def test_by_model_routing_puts_two_models_on_one_host_and_path():
    pooled = {"routing": "inferencePool"}
    assert lines(edge={"routing": "byModel"}, models=[model(route=pooled), model(name="qwen-7b-b", route=pooled)]) == []


def test_by_model_routing_refuses_what_an_ai_gateway_route_cannot_carry():
    pooled = {"routing": "inferencePool"}
    assert lines(edge={"routing": "byModel", "auth": "gateway-api-key"},
                 models=[model(route={**pooled, "pathPrefix": "/b", "priority": 5}),
                         model(name="qwen-7b-b", route={"routing": "service"})]) == [
        'llm-serving:edge.auth: byModel routing passes the client\'s key through to vLLM; the gateway cannot inject '
        'vLLM\'s own key on an AIGatewayRoute (got "gateway-api-key"; expected vllm-api-key)',
        'llm-serving:models[qwen-7b].route: byModel routing publishes every model at https://llm.example.com/v1 '
        '(got "host None, pathPrefix /b"; expected host and pathPrefix unset)',
        'llm-serving:models[qwen-7b].route.priority: byModel routing cannot tag a model\'s requests with its '
        'InferenceObjective (got 5; expected unset, or edge.routing perModel)',
        'llm-serving:models[qwen-7b-b].route.routing: byModel routing sends every model to its InferencePool '
        '(got "service"; expected inferencePool, or unset)',
    ]


@pytest.mark.parametrize("name", ["route-not-found", "llm-serving-models-not-found"])
def test_by_model_refuses_a_model_named_like_the_unknown_model_rule_or_its_policy(name):
    pooled = {"routing": "inferencePool"}
    assert [line for line in lines(edge={"routing": "byModel"}, models=[model(name=name, route=pooled)])
            if "unknown-model rule's or its policy's" in line] != []


def test_by_model_routing_needs_the_installed_gateway():
    assert 'llm-serving:edge.routing: byModel needs Envoy AI Gateway' in "\n".join(
        lines(edge={"routing": "byModel", "mode": "alb", "tls": {"acmCertificateArn": ACM},
                    "loadBalancerSubnetIds": ALB_SUBNETS, "albControllerRoleArn": "arn:aws:iam::123456789012:role/a"},
              models=[model(route={"routing": "inferencePool"})]))


def test_rejects_a_stream_bound_shorter_than_a_max_length_generation():
    assert lines(models=[model(maxModelLen=16384, route={"maxStreamSeconds": 900})]) == [
        "llm-serving:models[qwen-7b].route.maxStreamSeconds: cuts generations short: 16384 tokens at the 0.1 s ITL "
        "objective after the 2 s TTFT objective take 1641 s (got 900; expected >= 1641, or unset)"
    ]
    assert lines(models=[model(maxModelLen=16384, route={"maxStreamSeconds": 1641})]) == []
    # 4,096 tokens take 412 s: the 600 s floor (the policy pack's) is the shortest bound.
    assert lines(models=[model(route={"maxStreamSeconds": 600})]) == []
    with pytest.raises(ValidationError) as caught:
        config(models=[model(route={"maxStreamSeconds": 599})])
    assert caught.value.errors()[0]["loc"] == ("models", 0, "route", "maxStreamSeconds")
    # Over an hour no load balancer's deregistration delay could hold it.
    with pytest.raises(ValidationError):
        config(models=[model(route={"maxStreamSeconds": 3601})])


def test_rejects_stream_idle_timeout_the_nlb_would_cut():
    assert lines(edge={"streamIdleTimeoutSeconds": 400}) == [
        "llm-serving:edge.streamIdleTimeoutSeconds: edge: stream idle timeout must be < the NLB's TCP idle timeout "
        "(350 s): the NLB drops a silent flow without telling Envoy (got 400; expected < 350)"
    ]


def test_rejects_a_vllm_shutdown_timeout_shorter_than_the_stream_bound():
    # Today's prod default, 300 s, against the 16,384-token model's bound: 16,384 x 0.1 s + 2 s, plus 10 %.
    assert lines(models=[model(maxModelLen=16384, shutdownTimeoutSeconds=300)]) == [
        "llm-serving:models[qwen-7b].shutdownTimeoutSeconds: qwen-7b: vLLM --shutdown-timeout must be >= stream "
        "bound (1,805 s): a planned disruption cuts every stream still running when it ends (got 300; "
        "expected >= 1805)"
    ]
    assert lines(models=[model(maxModelLen=16384, shutdownTimeoutSeconds=1805)]) == []


def test_rejects_generation_longer_than_the_alb_idle_limit():
    edge = {"mode": "alb", "controller": "existing", "tls": {"acmCertificateArn": ACM},
            "loadBalancerSubnetIds": ALB_SUBNETS}
    # 32,768 tokens at 10 tokens/s take 3,277 s: within the ALB's limit.
    assert lines(edge=edge, models=[model(maxModelLen=32768)]) == []
    assert lines(edge={**edge, "minDecodeTokensPerSecond": 5}, models=[model(maxModelLen=32768)]) == [
        "llm-serving:models[qwen-7b].maxModelLen: a non-streamed response of 32768 tokens at 5 tokens/s takes "
        "6554 s, beyond the ALB's 4000 s idle timeout (got 32768; expected a gateway edge, or a shorter maxModelLen)"
    ]


def test_rejects_path_prefix_an_ingress_cannot_strip():
    edge = {"mode": "ingress-nginx", "controller": "existing"}
    assert lines(edge=edge, models=[model(route={"pathPrefix": "/qwen"})]) == [
        'llm-serving:models[qwen-7b].route.pathPrefix: ingress-nginx mode cannot strip a path prefix; give each '
        'model its own host (got "/qwen"; expected /)'
    ]


def test_rejects_gateway_auth_outside_gateway_mode_and_jwt_without_provider():
    assert lines(edge={"mode": "ingress-nginx", "controller": "existing", "auth": "jwt"}) == [
        'llm-serving:edge.auth: gateway authentication needs mode gateway, not ingress-nginx (got "jwt"; '
        "expected vllm-api-key)",
        "llm-serving:edge.jwt: auth jwt needs an issuer, a JWKS URI and the accepted audiences (got null; expected "
        "jwt.issuer, jwt.jwksUri and jwt.audiences)",
    ]


def test_rejects_min_replicas_above_max():
    assert lines(models=[model(autoscaling={"minReplicas": 3, "maxReplicas": 2})]) == [
        "llm-serving:models[qwen-7b].autoscaling.minReplicas: must not exceed maxReplicas (got 3; expected "
        "<= maxReplicas (2))"
    ]


def test_zero_replicas_need_an_idle_policy():
    assert [line for line in lines(models=[model(autoscaling={"minReplicas": 0})])
            if "scaleToZero" in line][0].startswith(
        "llm-serving:models[qwen-7b].autoscaling.scaleToZero: required with minReplicas 0")


@pytest.mark.parametrize(("field", "value"), [("kvUsageTarget", 1.5), ("kvUsageTarget", 0),
                                               ("waitingPerReplicaTarget", 0), ("scaleDownWindowSeconds", 7200)])
def test_rejects_targets_out_of_range(field, value):
    with pytest.raises(ValidationError) as caught:
        config(models=[model(autoscaling={field: value})])
    assert caught.value.errors()[0]["loc"] == ("models", 0, "autoscaling", field)


def test_rejects_max_replicas_beyond_node_group_gpus():
    assert lines(models=[model(autoscaling={"maxReplicas": 20})]) == [
        "llm-serving:gpuNodeGroup.scaling.maxNodes: at peak the models need 3 nodes (qwen-7b 20 x TP1 = 20 GPUs, "
        "each replica on one node) but the node group supplies 2 x p5.48xlarge (8 GPUs each; maxNodes, with a node "
        "autoscaler) (got 2; expected >= 3)"
    ]


def test_rejects_prometheus_url_in_another_namespace_than_the_scrape_namespace():
    observability = {**BASE["observability"], "prometheus": {
        "mode": "existing", "namespace": "observability", "url": "http://prometheus-operated.monitoring.svc:9090"}}
    cfg = validate(ServingStackArgs, {**BASE, "observability": observability})
    assert [p.line() for p in checks.check(cfg)] == [
        'llm-serving:observability.prometheus.namespace: the URL points at namespace monitoring (got "observability"; '
        "expected monitoring)"
    ]


@pytest.mark.parametrize(("mode", "namespace"), [("gateway", "envoy-gateway-system"), ("alb", "kube-system"),
                                                 ("ingress-nginx", "ingress-nginx")])
def test_each_edge_mode_has_its_own_default_namespace(mode, namespace):
    assert planning.edge_namespace(config(edge={"mode": mode})) == namespace
    assert planning.edge_namespace(config(edge={"mode": mode, "namespace": "edge"})) == "edge"


def test_jwt_needs_the_audiences_the_gateway_accepts():
    # Without `aud` checks the gateway accepts any token its issuer signs for any application.
    jwt = {"issuer": "https://auth.example.com", "jwksUri": "https://auth.example.com/jwks.json"}
    for given, kind in ((jwt, "missing"), ({**jwt, "audiences": []}, "too_short")):
        with pytest.raises(ValidationError) as error:
            config(edge={"auth": "jwt", "jwt": given})
        assert [(e["loc"], e["type"]) for e in error.value.errors()] == [(("edge", "jwt", "audiences"), kind)]
    assert config(edge={"auth": "jwt", "jwt": {**jwt, "audiences": ["llm-serving"]}}).edge.jwt.audiences == [
        "llm-serving"]
