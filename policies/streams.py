"""Stack rule: every drain on a model's path outlasts the longest stream its route admits (pure).

Reads a whole stack's resources (type, name, inputs, options), because the bound and the drains live
on different objects: the HTTPRoute's request timeout is the bound; the vLLM Deployment or
LeaderWorkerSet (leader and workers), the endpoint picker, the EnvoyProxy and the NLB annotation, or
the ALB Ingress, each must hold a stream that long through a rollout, scale-down or node drain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

RULE_NAME = "drains-cover-stream-bound"
NLB_ATTRIBUTES = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"
ALB_ATTRIBUTES = "alb.ingress.kubernetes.io/target-group-attributes"
_DEREGISTRATION = re.compile(r"deregistration_delay\.timeout_seconds=(\d+)")
_DURATION = re.compile(r"^(\d+)s$")
PICKER_SUFFIX = "-epp"  # llm_serving/routing/objects.py picker_name


def _kind(resource: Mapping[str, Any]) -> str:
    return resource["type"].rsplit(":", 1)[-1]


def _seconds(value: Any) -> int | None:
    match = _DURATION.match(str(value or ""))
    return int(match[1]) if match else None


def _flag(args: list[str], flag: str) -> int | None:
    """`--flag N`, `--flag=N` or `--flag=Ns` as seconds."""
    for index, arg in enumerate(args):
        value = None
        if arg == flag and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
        if value is not None:
            return int(value) if value.isdigit() else _seconds(value)
    return None


def _pre_stop_sleep(container: Mapping[str, Any]) -> int:
    """The most a preStop hook waits: `sleep N`, or a multi-node worker's wait on its leader
    (`python3 -c <script> <bound> <port> <poll>`, llm_serving/serving/multinode.py), whose bound is N."""
    command = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    if len(command) == 2 and command[0] == "sleep" and str(command[1]).isdigit():
        return int(command[1])
    if len(command) >= 4 and str(command[0]).startswith("python") and command[1] == "-c" and str(command[3]).isdigit():
        return int(command[3])
    return 0


def _delete_seconds(resource: Mapping[str, Any]) -> int:
    timeouts = (resource.get("options") or {}).get("customTimeouts") or {}
    return _seconds(timeouts.get("delete")) or 600  # pulumi-kubernetes' default: 10 minutes


def _pod_problems(subject: str, template: Mapping[str, Any], bound: int, where: str, *,
                  worker_of: int | None = None) -> list[str]:
    """A vLLM pod: --shutdown-timeout >= bound and a grace period longer than preStop + shutdown; a
    LeaderWorkerSet worker (worker_of = the leader's preStop + shutdown): its preStop outlasts the leader's."""
    spec = template.get("spec") or {}
    grace = int(spec.get("terminationGracePeriodSeconds", 30))
    problems = []
    for container in spec.get("containers") or []:
        args = [str(a) for a in container.get("args") or []]
        pre_stop = _pre_stop_sleep(container)
        if worker_of is not None:
            if pre_stop < worker_of:
                problems.append(f"{subject}: worker preStop {pre_stop} s is shorter than the leader's drain "
                                f"{worker_of:,} s (preStop + --shutdown-timeout): a rank that exits first ends the "
                                "engine under the leader's streams")
            if grace <= pre_stop:
                problems.append(f"{subject}: worker terminationGracePeriodSeconds {grace} s does not outlast its "
                                f"preStop {pre_stop} s")
            continue
        shutdown = _flag(args, "--shutdown-timeout")
        if shutdown is None:
            continue
        if shutdown < bound:
            problems.append(f"{subject}: vLLM --shutdown-timeout {shutdown:,} s is shorter than the stream bound "
                            f"{bound:,} s ({where}): a rollout, scale-down or node drain cuts every longer stream")
        if grace <= pre_stop + shutdown:
            problems.append(f"{subject}: terminationGracePeriodSeconds {grace:,} s does not exceed preStop "
                            f"{pre_stop} s + --shutdown-timeout {shutdown:,} s: SIGKILL ends the drain early")
    return problems


def stream_drain_problems(resources: Iterable[Mapping[str, Any]]) -> list[str]:
    """One message per drain shorter than the stream bound it must cover, with both numbers."""
    resources = list(resources)
    by_kind: dict[str, dict[str, Mapping[str, Any]]] = {}
    for resource in resources:
        name = ((resource.get("inputs") or {}).get("metadata") or {}).get("name")
        if name:
            by_kind.setdefault(_kind(resource), {})[name] = resource
    problems: list[str] = []
    bounds: list[int] = []
    # byModel routing's AIGatewayRoute names each model's pool in its rule, as a per-model HTTPRoute does.
    routes = [(f"{kind} {name}", route) for kind in ("HTTPRoute", "AIGatewayRoute")
              for name, route in sorted(by_kind.get(kind, {}).items())]
    for name, route in routes:
        for rule in route["inputs"]["spec"].get("rules") or []:
            if not rule.get("backendRefs"):
                continue  # a rule without a backend answers itself (a direct response): no stream to drain
            bound = _seconds((rule.get("timeouts") or {}).get("request"))
            backend = (rule.get("backendRefs") or [{}])[0]
            where = f"{name} timeouts.request"
            if not bound:
                problems.append(f"{name}: timeouts.request {(rule.get('timeouts') or {}).get('request')!r} "
                                "leaves streams unbounded, so no drain can cover them: bound it")
                continue
            bounds.append(bound)
            problems += _model_problems(by_kind, backend.get("name", ""), backend.get("kind") == "InferencePool",
                                        bound, where)
    for name, ingress in sorted(by_kind.get("Ingress", {}).items()):
        problems += _alb_problems(by_kind, name, ingress)
    if bounds:
        problems += _envoy_problems(by_kind, max(bounds))
    return problems


def _model_problems(by_kind: dict[str, dict[str, Mapping[str, Any]]], model: str, pooled: bool, bound: int,
                    where: str) -> list[str]:
    problems: list[str] = []
    deployment = by_kind.get("Deployment", {}).get(model)
    group = by_kind.get("LeaderWorkerSet", {}).get(model)
    grace = 0
    if deployment is not None:
        template = deployment["inputs"]["spec"]["template"]
        problems += _pod_problems(f"Deployment {model}", template, bound, where)
        grace = int(template["spec"].get("terminationGracePeriodSeconds", 30))
        workload = deployment
    elif group is not None:
        spec = group["inputs"]["spec"]["leaderWorkerTemplate"]
        leader = spec["leaderTemplate"]
        problems += _pod_problems(f"LeaderWorkerSet {model} leader", leader, bound, where)
        container = leader["spec"]["containers"][0]
        drain = _pre_stop_sleep(container) + (_flag([str(a) for a in container.get("args") or []],
                                                    "--shutdown-timeout") or 0)
        problems += _pod_problems(f"LeaderWorkerSet {model} workers", spec["workerTemplate"], bound, where,
                                  worker_of=drain)
        grace = int(leader["spec"].get("terminationGracePeriodSeconds", 30))
        workload = group
    else:
        return [f"{where}: no Deployment or LeaderWorkerSet named {model} to check its drain"]
    if deployment is not None and _delete_seconds(workload) <= grace:
        problems.append(f"Deployment {model}: Pulumi's delete timeout {_delete_seconds(workload):,} s does not "
                        f"outlast the pods' grace period {grace:,} s: destroy fails while they drain")
    if pooled:
        picker = by_kind.get("Deployment", {}).get(model + PICKER_SUFFIX)
        if picker is None:
            return [*problems, f"{where}: the InferencePool {model} has no picker Deployment {model}{PICKER_SUFFIX}"]
        spec = picker["inputs"]["spec"]["template"]["spec"]
        args = [str(a) for c in spec.get("containers") or [] for a in c.get("args") or []]
        drain = _flag(args, "--drain-timeout") or 0
        picker_grace = int(spec.get("terminationGracePeriodSeconds", 30))
        subject = f"Deployment {model}{PICKER_SUFFIX}"
        if drain < bound:
            problems.append(f"{subject}: endpoint picker --drain-timeout {drain:,} s is shorter than the stream bound "
                            f"{bound:,} s ({where}): responses stream through it, so its rollout cuts them")
        if picker_grace <= drain:
            problems.append(f"{subject}: terminationGracePeriodSeconds {picker_grace:,} s does not exceed the "
                            f"picker's --drain-timeout {drain:,} s")
        if _delete_seconds(picker) <= picker_grace:
            problems.append(f"{subject}: Pulumi's delete timeout {_delete_seconds(picker):,} s does not outlast the "
                            f"picker's grace period {picker_grace:,} s: a routing switch or destroy fails")
    return problems


def _envoy_problems(by_kind: dict[str, dict[str, Mapping[str, Any]]], bound: int) -> list[str]:
    problems: list[str] = []
    where = f"the longest HTTPRoute timeouts.request, {bound:,} s"
    for name, proxy in sorted(by_kind.get("EnvoyProxy", {}).items()):
        spec = proxy["inputs"]["spec"]
        drain = _seconds((spec.get("shutdown") or {}).get("drainTimeout")) or 60  # Envoy Gateway's default
        if drain < bound:
            problems.append(f"EnvoyProxy {name}: shutdown.drainTimeout {drain:,} s is shorter than {where}: an "
                            "Envoy rollout or node drain cuts every longer stream")
        service = (((spec.get("provider") or {}).get("kubernetes") or {}).get("envoyService") or {})
        attributes = (service.get("annotations") or {}).get(NLB_ATTRIBUTES, "")
        match = _DEREGISTRATION.search(attributes)
        delay = int(match[1]) if match else 300  # the ELB default
        if delay < bound:
            problems.append(f"EnvoyProxy {name}: the NLB's deregistration delay {delay:,} s is shorter than {where}: "
                            "the NLB resets a removed Envoy's open flows when the delay ends")
    return problems


def _alb_problems(by_kind: dict[str, dict[str, Mapping[str, Any]]], name: str,
                  ingress: Mapping[str, Any]) -> list[str]:
    """ALB ip targets are the vLLM pods: the target group must keep a draining pod as long as vLLM drains."""
    annotations = ingress["inputs"]["metadata"].get("annotations") or {}
    if "alb.ingress.kubernetes.io/scheme" not in annotations:
        return []
    match = _DEREGISTRATION.search(annotations.get(ALB_ATTRIBUTES, ""))
    delay = int(match[1]) if match else 300
    problems = []
    for rule in ingress["inputs"]["spec"].get("rules") or []:
        for path in (rule.get("http") or {}).get("paths") or []:
            model = path["backend"]["service"]["name"]
            deployment = by_kind.get("Deployment", {}).get(model)
            if deployment is None:
                continue
            args = [str(a) for c in deployment["inputs"]["spec"]["template"]["spec"]["containers"]
                    for a in c.get("args") or []]
            shutdown = _flag(args, "--shutdown-timeout") or 0
            if delay < shutdown:
                problems.append(f"Ingress {name}: the ALB's deregistration delay {delay:,} s is shorter than "
                                f"Deployment {model}'s --shutdown-timeout {shutdown:,} s: the ALB resets the streams a "
                                "draining pod still serves")
    return problems
