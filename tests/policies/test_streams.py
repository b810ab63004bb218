"""The stream-bound audit over whole renders: every drain path passes on today's stacks, and each path set
back to the value it had before the stream bound (300 s against prod's 1,805 s bound, an unbounded route,
a 1,639 s picker drain) is refused with both numbers."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies.streams import stream_drain_problems
from stacks.config.files import PROJECT_DIR
from tests.conftest import render_file
from tests.support import stack_variants

MODEL = "llama-70b"
BOUND = 1805  # 16,384 tokens at the 0.1 s ITL objective after the 2 s TTFT objective, plus 10 %


def _resources(path: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(render_file(path).resources)


@pytest.fixture
def prod() -> list[dict[str, Any]]:
    return _resources(PROJECT_DIR / "Pulumi.prod.yaml")


@pytest.fixture(scope="module")
def alb_path(variants_dir) -> Path:
    return stack_variants.prod_behind_an_alb(variants_dir)


def _find(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in resources if r["type"].endswith(f":{kind}") and r["inputs"]["metadata"]["name"] == name]
    return found


def _set_arg(container: dict[str, Any], flag: str, value: str) -> None:
    args = container["args"]
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        (index,) = [i for i, a in enumerate(args) if a.startswith(f"{flag}=")]
        args[index] = f"{flag}={value}"


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_drain_path_of_every_stack_covers_its_stream_bound(stack):
    assert stream_drain_problems(_resources(PROJECT_DIR / f"Pulumi.{stack}.yaml")) == []


def test_refuses_an_unbounded_route_as_before(prod):
    _find(prod, "HTTPRoute", MODEL)["inputs"]["spec"]["rules"][0]["timeouts"] = {"request": "0s"}
    assert stream_drain_problems(prod) == [
        "HTTPRoute llama-70b: timeouts.request '0s' leaves streams unbounded, so no drain can cover them: bound it"]


def _vllm(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return _find(resources, "Deployment", MODEL)["inputs"]["spec"]["template"]["spec"]


def _picker(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return _find(resources, "Deployment", f"{MODEL}-epp")["inputs"]["spec"]["template"]["spec"]


def _envoy(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return _find(resources, "EnvoyProxy", "llm-serving-proxy")["inputs"]["spec"]


NLB = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"
PATHS: dict[str, tuple[Callable[[list[dict[str, Any]]], None], list[str]]] = {
    "vllm-shutdown": (
        lambda r: _set_arg(_vllm(r)["containers"][0], "--shutdown-timeout", "300"),
        [f"Deployment llama-70b: vLLM --shutdown-timeout 300 s is shorter than the stream bound {BOUND:,} s "
         "(HTTPRoute llama-70b timeouts.request): a rollout, scale-down or node drain cuts every longer stream"]),
    "vllm-grace": (
        lambda r: _vllm(r).update(terminationGracePeriodSeconds=345),
        [f"Deployment llama-70b: terminationGracePeriodSeconds 345 s does not exceed preStop {{pre_stop}} s + "
         f"--shutdown-timeout {BOUND:,} s: SIGKILL ends the drain early"]),
    "vllm-delete": (
        lambda r: _find(r, "Deployment", MODEL)["options"]["customTimeouts"].update(delete=""),
        ["Deployment llama-70b: Pulumi's delete timeout 600 s does not outlast the pods' grace period {grace:,} s: "
         "destroy fails while they drain"]),
    "picker-drain": (
        lambda r: _set_arg(_picker(r)["containers"][0], "--drain-timeout", "1639s"),
        [f"Deployment llama-70b-epp: endpoint picker --drain-timeout 1,639 s is shorter than the stream bound "
         f"{BOUND:,} s (HTTPRoute llama-70b timeouts.request): responses stream through it, so its rollout cuts "
         "them"]),
    "picker-grace": (
        lambda r: _picker(r).update(terminationGracePeriodSeconds=BOUND),
        [f"Deployment llama-70b-epp: terminationGracePeriodSeconds {BOUND:,} s does not exceed the picker's "
         f"--drain-timeout {BOUND:,} s"]),
    "picker-delete": (
        lambda r: _find(r, "Deployment", f"{MODEL}-epp")["options"]["customTimeouts"].update(delete=""),
        ["Deployment llama-70b-epp: Pulumi's delete timeout 600 s does not outlast the picker's grace period "
         "{picker_grace:,} s: a routing switch or destroy fails"]),
    "envoy-drain": (
        lambda r: _envoy(r)["shutdown"].update(drainTimeout="300s"),
        [f"EnvoyProxy llm-serving-proxy: shutdown.drainTimeout 300 s is shorter than the longest HTTPRoute "
         f"timeouts.request, {BOUND:,} s: an Envoy rollout or node drain cuts every longer stream"]),
    "nlb-deregistration": (
        lambda r: _envoy(r)["provider"]["kubernetes"]["envoyService"]["annotations"].update(
            {NLB: "deregistration_delay.timeout_seconds=300"}),
        [f"EnvoyProxy llm-serving-proxy: the NLB's deregistration delay 300 s is shorter than the longest "
         f"HTTPRoute timeouts.request, {BOUND:,} s: the NLB resets a removed Envoy's open flows when the delay "
         "ends"]),
}


def _pre_stop(spec: dict[str, Any]) -> int:
    return int(spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])


@pytest.mark.parametrize("path", sorted(PATHS))
def test_refuses_each_drain_path_at_its_value_before_the_stream_bound(prod, path):
    regress, expected = PATHS[path]
    # The figures the messages quote besides the regressed one are the render's own.
    figures = {"pre_stop": _pre_stop(_vllm(prod)), "grace": _vllm(prod)["terminationGracePeriodSeconds"],
               "picker_grace": _picker(prod)["terminationGracePeriodSeconds"]}
    regress(prod)
    assert stream_drain_problems(prod) == [line.format(**figures) for line in expected]


def test_leader_worker_set_leader_and_workers_drain_for_the_bound():
    resources = _resources(PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml")
    assert stream_drain_problems(resources) == []
    template = _find(resources, "LeaderWorkerSet", "llama-405b")["inputs"]["spec"]["leaderWorkerTemplate"]
    _set_arg(template["leaderTemplate"]["spec"]["containers"][0], "--shutdown-timeout", "300")
    # The worker waits on its leader for at most its bound (the command's fourth word): cut to 315 s.
    worker_wait = template["workerTemplate"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert worker_wait[:2] == ["python3", "-c"]
    worker_wait[3] = "315"
    problems = stream_drain_problems(resources)
    assert problems[:1] == [
        "LeaderWorkerSet llama-405b leader: vLLM --shutdown-timeout 300 s is shorter than the stream bound 1,807 s "
        "(HTTPRoute llama-405b timeouts.request): a rollout, scale-down or node drain cuts every longer stream"]
    # Back at 1,807 s on the leader, a worker that leaves after 315 s still ends the engine under its streams.
    _set_arg(template["leaderTemplate"]["spec"]["containers"][0], "--shutdown-timeout", "1807")
    leader_drain = _pre_stop(template["leaderTemplate"]["spec"]) + 1807
    assert stream_drain_problems(resources) == [
        f"LeaderWorkerSet llama-405b workers: worker preStop 315 s is shorter than the leader's drain "
        f"{leader_drain:,} s (preStop + --shutdown-timeout): a rank that exits first ends the engine under the "
        "leader's streams"]


def test_alb_deregistration_delay_covers_the_pods_drain(alb_path):
    resources = _resources(alb_path)
    assert stream_drain_problems(resources) == []
    (ingress,) = [r for r in resources if r["type"].endswith(":Ingress")]
    ingress["inputs"]["metadata"]["annotations"]["alb.ingress.kubernetes.io/target-group-attributes"] = (
        "deregistration_delay.timeout_seconds=300")
    assert stream_drain_problems(resources) == [
        f"Ingress {ingress['inputs']['metadata']['name']}: the ALB's deregistration delay 300 s is shorter than "
        f"Deployment llama-70b's --shutdown-timeout {BOUND:,} s: the ALB resets the streams a draining pod still "
        "serves"]
