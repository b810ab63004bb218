"""Scale to zero: an idle model gives its GPUs back, and its first request waits at the edge while it wakes.

dev scales to zero: its render carries the ScaledObject that wakes on the picker's held requests, the picker's
hold at least the planned wake, and every timeout on the waiting request's path above the hold. The rules refuse
what cannot wake (no picker, an HPA, a multi-node group, production without asking), the timing refuses edge
timeouts shorter than the wake, and the deploy gate's `wake` check times the first token against the plan.
"""

from __future__ import annotations

import re

import pytest

from llm_serving.serving import ModelArgs
from llm_serving.stack import planning, rules
from llm_serving.stack import timing as stack_timing
from llm_serving.verification import Settings, Target, probe
from llm_serving.verification.probe import FAIL, PASS
from stacks.config.files import stack_file_path
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from tests.support.components import committed_args
from tests.support.openai_server import KEY, Behaviour, OpenAIServer

MODEL = "llama-8b"
IDLE = {"minReplicas": 0, "maxReplicas": 1, "scaleToZero": {"idleSeconds": 1800}}


def dev_model():
    config = load_stack_file(stack_file_path("dev"))[1]
    (model,) = config.models
    return config, model


def seconds(duration: str) -> int:
    return int(re.fullmatch(r"(\d+)s", duration).group(1))  # type: ignore[union-attr]


def test_dev_wakes_on_the_requests_its_picker_holds(rendered):
    config, model = dev_model()
    assert planning.scales_to_zero(model)
    dev = rendered["dev"]
    scaled = dev.manifest("ScaledObject", MODEL)["spec"]
    assert scaled["minReplicaCount"] == 0
    assert scaled["cooldownPeriod"] == model.autoscaling.scale_to_zero.idle_seconds
    (held,) = [t for t in scaled["triggers"] if t["name"] == "held_requests"]
    # The one trigger that exists at zero replicas: the picker's queue, active on the first held request.
    assert "llm_d_epp_flow_control_queue_size" in held["metadata"]["query"]
    assert held["metadata"]["activationThreshold"] == "0"
    # vLLM's own triggers read series that vanish at zero: `or vector(0)` keeps them answering 0.
    assert all(re.search(r"or vector\(0\)\)?$", t["metadata"]["query"]) for t in scaled["triggers"])


def test_every_timeout_on_the_waiting_requests_path_outlasts_the_wake(rendered):
    config, model = dev_model()
    wake = planning.wake(config, model).total_seconds
    dev = rendered["dev"]
    # The route goes to the pool, whose picker holds requests at zero replicas for at least the wake.
    rule = dev.manifest("HTTPRoute", MODEL)["spec"]["rules"][0]
    assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": MODEL}]
    picker = dev.manifest("ConfigMap", f"{MODEL}-epp")["data"]["config.yaml"]
    hold = seconds(re.search(r"defaultRequestTTL: (\S+)", picker).group(1))  # type: ignore[union-attr]
    assert hold >= wake
    # Envoy sends nothing while the picker holds: its stream idle timeout, then the NLB's, must outlast the hold.
    stream_idle = seconds(dev.manifest("ClientTrafficPolicy", "llm-serving")["spec"]["timeout"]["http"][
        "streamIdleTimeout"])
    nlb = dev.manifest("EnvoyProxy", "llm-serving-proxy")["spec"]["provider"]["kubernetes"]["envoyService"][
        "annotations"]["service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-443"]
    assert stream_idle > hold
    assert int(nlb.removeprefix("tcp.idle_timeout.seconds=")) > stream_idle
    assert [r for r in stack_timing.relations(config) if not r.holds] == []


def test_the_gpu_nodes_go_to_zero_and_can_come_back(rendered):
    config, _ = dev_model()
    assert planning.node_counts(config).min_nodes == 0
    dev = rendered["dev"]
    group = dev.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group")["inputs"]
    assert group["scalingConfig"]["minSize"] == 0
    # From zero nodes Cluster Autoscaler reads what a node would offer from the group's tags.
    tags = {r["inputs"]["tag"]["key"]: r["inputs"]["tag"]["value"] for r in dev.by_type()["aws:autoscaling/tag:Tag"]}
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "1"
    # A replica pins its node (never consolidated under it); with no replica nothing does: the DaemonSets'
    # pods do not count for Cluster Autoscaler and the drain barrier runs on CPU nodes.
    pod = dev.manifest("Deployment", MODEL)["spec"]["template"]
    assert pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    barrier = [m for m in dev.manifests if m["kind"] == "Deployment" and m["metadata"]["name"].startswith(
        "node-drain-barrier")]
    assert all("nodeSelector" not in m["spec"]["template"]["spec"] for m in barrier)


def test_zero_ready_replicas_pages_only_when_the_wake_runs_late(rendered):
    config, model = dev_model()
    wake_minutes = -(-planning.wake(config, model).total_seconds // 60)
    alerts = {r["alert"]: r for m in rendered["dev"].manifests if m["kind"] == "PrometheusRule"
              for g in m["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert "InferencePoolNoReadyEndpoints" not in alerts  # zero is the idle state
    assert alerts["ModelWakeSlow"]["for"] == f"{wake_minutes}m"
    assert "llm_d_epp_flow_control_queue_size" in alerts["ModelWakeSlow"]["expr"]
    assert "ModelDroppedWhileWaking" in alerts
    assert int(alerts["VllmNoReadyReplica"]["for"].removesuffix("m")) >= wake_minutes


def problems(args) -> list[str]:
    return [p.line() for p in rules.check(args)]


def test_production_asks_for_scale_to_zero_by_name():
    prod = committed_args("prod", models=[{"name": "llama-70b", "autoscaling": IDLE}])
    assert ("llm-serving:models[llama-70b].autoscaling.minReplicas: a prod model at zero makes its first request "
            "after an idle spell wait for a cold start (got 0; expected >= 1, or models[llama-70b].autoscaling."
            "scaleToZero.inProduction: true)") in problems(prod)
    asked = committed_args("prod", models=[{"name": "llama-70b", "autoscaling": {
        **IDLE, "scaleToZero": {"idleSeconds": 1800, "inProduction": True}}}])
    assert not [line for line in problems(asked) if "scaleToZero.inProduction" in line]


def test_a_model_that_cannot_be_held_or_woken_is_refused():
    no_picker = committed_args("dev", models=[{"name": MODEL, "route": {"routing": "service"}}])
    assert [line for line in problems(no_picker) if line.startswith(
        f"llm-serving:models[{MODEL}].route.routing: scale to zero needs the endpoint picker")]
    hpa = committed_args("dev", autoscaling={"mode": "prometheus-adapter"})
    assert [line for line in problems(hpa) if line.startswith("llm-serving:autoscaling.mode: llama-8b scales to zero")]
    unheld = committed_args("dev", edge={"inferenceRouting": {"overload": {"flowControl": False}}})
    assert [line for line in problems(unheld) if "flowControl" in line and "holding them" in line]
    no_policy = committed_args("dev", models=[{"name": MODEL, "autoscaling": {"scaleToZero": None}}])
    assert [line for line in problems(no_policy) if "scaleToZero: required with minReplicas 0" in line]


def test_a_multi_node_group_does_not_scale_to_zero():
    group = committed_args("prod-405b", models=[{"name": "llama-405b", "autoscaling": {
        **IDLE, "scaleToZero": {"idleSeconds": 1800, "inProduction": True}}}])
    assert [line for line in problems(group) if "multi-node group (LeaderWorkerSet) does not scale to zero" in line]


def test_an_edge_timeout_shorter_than_the_wake_is_refused_naming_the_key(tmp_path):
    text = stack_file_path("dev").read_text().replace("streamIdleTimeoutSeconds: 960", "streamIdleTimeoutSeconds: 300")
    (tmp_path / "Pulumi.dev.yaml").write_text(text)
    config, model = dev_model()
    hold = planning.wake(config, model).total_seconds
    with pytest.raises(ConfigError) as refused:
        load_stack_file(tmp_path / "Pulumi.dev.yaml")
    assert [p.line() for p in refused.value.problems] == [
        f"llm-serving:edge.streamIdleTimeoutSeconds: edge: Envoy stream idle timeout must be > llama-8b's picker "
        f"hold while waking ({hold:,} s): the first request after an idle spell is cut with a 504 while the model "
        f"wakes (got 300; expected > {hold})"]


def test_the_wake_is_the_planners_cold_start_with_a_node_when_the_group_can_be_empty():
    config, model = dev_model()
    wake = planning.wake(config, model)
    free, new_node = planning.cold_starts(config, model, planning.model_plan(config, model))
    assert wake == new_node and wake.node_seconds > 0 and wake.total_seconds > free.total_seconds
    kept = committed_args("dev", gpuNodeGroup={"scaling": {"minNodes": 1}})
    assert planning.wake(kept, kept.models[0]) == free
    # An idle hour saves the GPUs of the replica it would keep.
    assert planning.idle_usd_per_hour(config, model) == planning.usd_per_replica_hour(
        planning.model_plan(config, model))


def test_the_gates_wake_check_times_the_first_token_against_the_plan():
    # A server whose first token takes 0.15 s: well inside a 5 s wake, three times a 0.05 s one.
    waking = Behaviour(ttft_seconds=0.15)
    with OpenAIServer(waking) as url:
        fast = probe.check_wake(Target("edge", url), MODEL, KEY, wake_seconds=5, timeout=5)
        slow = probe.check_wake(Target("edge", url), MODEL, KEY, wake_seconds=waking.ttft_seconds / 3, timeout=5)
    assert fast.verdict == PASS and fast.measured["first_token_seconds"] >= waking.ttft_seconds
    assert slow.verdict == FAIL and slow.message.startswith("first token after ")
    settings = Settings.from_json(Settings(MODEL, (Target("edge", "http://x/v1"),), wake_seconds=901).to_json())
    assert settings.wake_seconds == 901


def test_the_stacks_gate_waits_for_a_wake_first(rendered):
    from llm_serving.stack import verification

    config, model = dev_model()
    checked = verification.settings(config, model)
    assert checked.wake_seconds == planning.wake(config, model).total_seconds
    assert verification.deadline_seconds(checked) > checked.wake_seconds + checked.request_timeout_seconds
    prod = load_stack_file(stack_file_path("prod"))[1]
    assert verification.settings(prod, prod.models[0]).wake_seconds is None


def test_the_model_args_docstring_says_what_zero_needs():
    from llm_serving.platform.args import fields_of
    from llm_serving.serving import ModelScalingArgs

    assert "scaleToZero" in (fields_of(ModelScalingArgs)["min_replicas"].description or "")
    assert ModelArgs  # the type the field belongs to
