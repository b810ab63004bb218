"""The rendered deploy gate in the dev and prod stacks: the Job after its workload and route, its
await and deadline, restricted pod, pinned image, the fence around it and the mode per environment."""

from __future__ import annotations

import json

import pytest

from llm_serving.platform import versions
from llm_serving.verification import AWAIT_SLACK_SECONDS, PROBE_SOURCE, network_policy

JOB = "kubernetes:batch/v1:Job"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"


def _job(rendered, stack: str, model: str) -> dict:
    return rendered[stack].resource(JOB, f"{model}-verify-job")


@pytest.mark.parametrize(("stack", "model", "mode"), [("prod", "llama-70b", "gate"), ("dev", "llama-8b", "report")])
def test_prod_gates_and_dev_reports(rendered, stack, model, mode):
    container = _job(rendered, stack, model)["inputs"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == [
        "python3", "/etc/verify/probe.py", "--settings", "/etc/verify/settings.json",
        "--api-key-file", "/var/run/secrets/llm-serving/api-key", "--mode", mode,
        "--termination-log", "/dev/termination-log"]
    assert container["image"] == versions.VERIFY_IMAGE
    assert container["image"].startswith("python:3.12.8-slim-bookworm@sha256:")


def test_the_prod_job_waits_for_the_deployment_and_its_pool_route(rendered):
    depends = _job(rendered, "prod", "llama-70b")["options"]["dependsOn"]
    assert "kubernetes:apps/v1:Deployment::llama-70b-deployment" in depends
    assert "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute::edge-httproute-llama-70b" in depends
    assert "kubernetes:networking.k8s.io/v1:NetworkPolicy::serving-netpol-verification" in depends
    assert "kubernetes:core/v1:Secret::vllm-api-key" in depends


@pytest.mark.parametrize(("stack", "model"), [("prod", "llama-70b"), ("dev", "llama-8b")])
def test_pulumi_awaits_the_job_past_its_deadline(rendered, stack, model):
    from llm_serving.stack import verification
    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_file_path(stack))[1]
    (found,) = [m for m in config.models if m.name == model]
    checked = verification.settings(config, found)
    # The smoke checks per target, the ramp and the load, one request's timeout, and (dev, which scales to
    # zero) a whole wake before them.
    deadline = verification.deadline_seconds(checked)
    assert deadline > checked.request_timeout_seconds + (checked.load.duration_seconds if checked.load else 0)
    assert (checked.wake_seconds is not None) == (stack == "dev")
    if checked.wake_seconds is not None:
        assert deadline > checked.wake_seconds
    job = _job(rendered, stack, model)
    spec = job["inputs"]["spec"]
    assert (spec["activeDeadlineSeconds"], spec["backoffLimit"]) == (deadline, 0)
    timeout = f"{deadline + AWAIT_SLACK_SECONDS}s"
    assert job["options"]["customTimeouts"] == {"create": timeout, "update": timeout, "delete": ""}
    # A failed gate is replaced by the next up instead of blocking it.
    assert job["inputs"]["metadata"]["annotations"] == {"pulumi.com/replaceUnready": "true"}


def test_the_job_pod_is_restricted_and_holds_the_key_only_as_a_file(rendered):
    pod = _job(rendered, "prod", "llama-70b")["inputs"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                      "fsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
    container = pod["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "privileged": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True}
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert "api-key" not in json.dumps(container["env"])
    assert pod["volumes"][1] == {"name": "api-key", "secret": {
        "secretName": "vllm-api-key", "items": [{"key": "api-key", "path": "api-key"}], "defaultMode": 0o440}}


def test_the_configmap_carries_the_probe_and_the_prod_plan(rendered):
    job = _job(rendered, "prod", "llama-70b")
    name = job["inputs"]["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    assert name == job["inputs"]["metadata"]["name"]
    data = rendered["prod"].resource(CONFIGMAP, "llama-70b-verify-probe")["inputs"]["data"]
    assert data["probe.py"] == PROBE_SOURCE
    settings = json.loads(data["settings.json"])
    assert settings["targets"] == [
        {"name": "edge", "base_url": "https://llm.example.com/v1", "check_auth": True,
         "connect_to": "llm-serving-internal.envoy-gateway-system.svc.cluster.local:443", "lists": [],
         "aliases": True, "headers": {}},
        {"name": "service", "base_url": "http://llama-70b.llm-serving.svc:8000/v1", "check_auth": True,
         "connect_to": None, "lists": [], "aliases": False, "headers": {}}]
    assert (settings["adapters"], settings["aliases"], settings["revision"]) == ([], [], None)
    # The Job runs against the pods that serve users. Prod plans each replica at its whole batch (256 requests
    # at the ITL objective = --max-num-seqs 256): nothing to spare, so no load test, and the report says why.
    assert settings["load"] is None
    assert settings["note"].startswith("load on pods that serve users: at most one replica's spare batch (0 = "
                                       "--max-num-seqs 256 - 256 at the SLOs), not 512;")
    assert settings["load_target"] == "service"


def _prod_with(**model_changes):
    from dataclasses import replace

    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_file_path("prod"))[1]
    model = replace(config.models[0], **model_changes)
    return replace(config, models=(model,)), model


@pytest.mark.parametrize("asked", [None, 64, 4096])
def test_the_gate_never_sends_live_pods_more_than_one_replicas_spare_batch(asked):
    from dataclasses import replace

    from llm_serving.stack import planning, verification

    # A batch above the SLO-bound concurrency leaves room the users' planned load does not take.
    config, model = _prod_with(max_num_seqs=384)
    minimum = planning.replica_bounds(model)[0]
    slo_bound = verification.planned_load(config, model).plan.concurrency // minimum
    spare = verification.spare_batch(config, model)
    assert spare == planning.model_plan(config, model).max_num_seqs - slo_bound > 0
    config = replace(config, verification=replace(config.verification, concurrency=asked))
    checked = verification.settings(config, model)
    # All of it could land on one pod (the Service spreads at random): that pod still runs within its batch.
    assert checked.load is not None and checked.load.concurrency == min(asked or spare, spare)
    assert checked.load.objectives == {}  # users share the batch: latency is reported, not gated
    assert "at most one replica's spare batch" in checked.note
    # `verify` aimed by hand (not live) keeps the planned SLO load and its objectives.
    by_hand = verification.planned_load(config, model, concurrency=slo_bound * minimum).plan
    assert by_hand.concurrency > spare and by_hand.objectives


def test_a_gate_with_no_spare_batch_runs_its_smoke_checks_and_a_shorter_deadline():
    from llm_serving.stack import verification

    config, model = _prod_with()
    checked = verification.settings(config, model)
    assert verification.spare_batch(config, model) == 0 and checked.load is None
    assert verification.deadline_seconds(checked) == (
        verification.SMOKE_SECONDS * len(checked.targets) + checked.request_timeout_seconds)


def test_the_fence_admits_only_dns_the_edge_and_the_vllm_port():
    policy = network_policy(namespace="llm-serving", edge_namespace="envoy-gateway-system",
                            model_selector={"app.kubernetes.io/component": "vllm"}, port=8000)
    spec = policy["spec"]
    assert spec["ingress"] == [] and spec["policyTypes"] == ["Ingress", "Egress"]
    assert [rule["ports"] for rule in spec["egress"]] == [
        [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        [{"protocol": "TCP", "port": 443}],
        [{"protocol": "TCP", "port": 8000}]]
    assert spec["egress"][2]["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "vllm"}}}]


def test_the_serving_fence_admits_the_verification_pods(rendered):
    policy = rendered["prod"].manifest("NetworkPolicy", "vllm-serving")
    sources = policy["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "verify"}}} in sources


def test_the_prod_gate_reaches_the_edge_without_dns_through_the_proxies_own_service(rendered):
    # The `up` that creates the NLB cannot have pointed DNS at it: the Job connects to a ClusterIP Service on the
    # Gateway's proxies, while TLS and the Host header still name the public host.
    settings = json.loads(rendered["prod"].resource(CONFIGMAP, "llama-70b-verify-probe")["inputs"]["data"][
        "settings.json"])
    (edge,) = [t for t in settings["targets"] if t["name"] == "edge"]
    host, port = edge["connect_to"].rsplit(":", 1)
    name, namespace = host.split(".")[:2]
    service = rendered["prod"].manifest("Service", name)
    assert service["metadata"]["namespace"] == namespace and service["spec"]["type"] == "ClusterIP"
    (listener,) = service["spec"]["ports"]
    assert listener["port"] == int(port) == 443
    monitor = rendered["prod"].manifest("PodMonitor", "llm-serving-envoy")
    # The proxies of this Gateway, and only Envoy Gateway's proxy pods among them.
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["spec"]["selector"].items()
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "proxy"
    # The fence lets the Job reach the proxies' own port (Envoy Gateway runs 443 on 10443) in that namespace only.
    fence = rendered["prod"].manifest("NetworkPolicy", "verification")
    inside = [rule for rule in fence["spec"]["egress"] if rule["ports"] == [
        {"protocol": "TCP", "port": listener["targetPort"]}]]
    assert inside == [{"to": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}}], "ports": [{"protocol": "TCP", "port": 10443}]}]


def test_an_edge_the_stack_does_not_own_is_checked_at_its_own_address():
    from dataclasses import replace

    from llm_serving.stack import verification
    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_file_path("prod"))[1]
    assert verification.edge_connect_to(config) is not None
    pinned = replace(config, verification=replace(config.verification, edge_url="https://llm.example.com/v1"))
    assert verification.edge_connect_to(pinned) is None  # the stack names the address to check


def test_the_component_writes_every_name_one_endpoint_routes_to_a_model():
    """A byModel stack with adapters (the multi-model example: two models, llama-8b's three adapters and an alias):
    the settings the VerificationJob writes name what the model's Job checks through the one endpoint, derived from
    the models' `served_names` as the edge's routes are; each name asked adds to the Job's deadline."""
    from dataclasses import replace

    from llm_serving.stack import verification
    from llm_serving.verification import VerificationJob, VerificationJobArgs, VerificationMode, probe
    from stacks.environment import load_stack_file
    from tests.conftest import MULTI_MODEL_EXAMPLE
    from tests.support.components import run

    config = load_stack_file(MULTI_MODEL_EXAMPLE)[1]
    big, small = config.models
    assert small.lora is not None
    adapters = [a.name for a in small.lora.adapters]
    checks = verification.settings(config, small)

    def build() -> None:
        VerificationJob("llama-8b-verify", VerificationJobArgs(
            namespace="llm-serving", model_name="llama-8b", settings=checks, mode=VerificationMode.GATE,
            image="python@sha256:" + "0" * 64, api_key_secret="vllm-api-key",
            deadline_seconds=verification.deadline_seconds(checks), deployed="d"))

    (configmap,) = [r for r in run(build).resources if r["type"] == CONFIGMAP]
    written = json.loads(configmap["inputs"]["data"]["settings.json"])
    assert probe.Settings.from_json(written) == checks
    edge, service = written["targets"]
    assert edge["lists"] == [big.name, *adapters, "sql"] and edge["aliases"] is True
    assert (service["lists"], service["aliases"]) == ([], False)
    assert (written["adapters"], written["aliases"]) == (adapters, [{"name": "sql", "targets": ["sql-v1", "sql-v2"]}])
    # Through the edge every adapter and the alias, through the Service every adapter.
    without = verification.deadline_seconds(replace(checks, adapters=(), aliases=()))
    assert verification.deadline_seconds(checks) == without + (2 * len(adapters) + 1) * verification.ROUTE_SECONDS
