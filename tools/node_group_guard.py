"""Refuse `pulumi up` while the stack has a pending node-group deletion whose nodes still host replicas.

A node update that failed after its new group was created leaves the old group marked for deletion
in the state, and the next `pulumi up` runs that deletion first, before anything else
(pulumi/pulumi#9979). If the vLLM replicas never moved (the rollout failed), that deletes the nodes
they run on. This reads the state (`pulumi stack export`) and the cluster's pods: every pod selecting
a pending group's generation label is a replica that deletion would kill, a pod still draining there
(Terminating keeps phase Running) included. The pods come from `--pods` (`kubectl get pods -A -o
json`) or, when a group is pending, from the stack file's cluster through the program's own
kubeconfig (`aws eks get-token`, the same reader preflight uses), never from whatever cluster the
caller's kubectl context points at. Without the pods it cannot tell, so it refuses.

    python -m tools.node_group_guard STATE.json --stack STACK [--pods PODS.json]
    exit 0: safe, 1: refused, 2: bad input
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from llm_serving.gpu import NODE_GENERATION_LABEL
from stacks.config.problems import ConfigError

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
RECOVERY = (
    "Recovery, keeping the replicas: 1) `pulumi refresh --stack {stack}`. 2) `pulumi stack export --stack {stack} "
    "> state.json`, delete the old node group's entry (the one with \"delete\": true) and `pulumi stack import "
    "--stack {stack} --file state.json`: Pulumi forgets that group, which stays in AWS with its nodes and pods. "
    "3) `make up STACK={stack}`: the replicas roll onto the new group. 4) When `kubectl get pods -A -l "
    "app.kubernetes.io/component=vllm -o wide` shows none on the old group's nodes, delete it by hand: `aws eks "
    "delete-nodegroup --cluster-name <cluster> --nodegroup-name <old group>`"
)


def pending_groups(state: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(URN, generation label) of every node group the state will delete on the next update."""
    resources = (state.get("deployment") or {}).get("resources") or []
    found = []
    for resource in resources:
        if resource.get("type") == NODE_GROUP and resource.get("delete"):
            labels = (resource.get("outputs") or {}).get("labels") or (resource.get("inputs") or {}).get("labels") or {}
            found.append((resource["urn"], labels.get(NODE_GENERATION_LABEL)))
    return found


def hosted_replicas(pods: dict[str, Any], generation: str) -> list[str]:
    """namespace/name of every live pod that selects the generation (the vLLM pods select it)."""
    hosted = []
    for pod in pods.get("items") or []:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        phase = (pod.get("status") or {}).get("phase")
        if selector.get(NODE_GENERATION_LABEL) == generation and phase in ("Pending", "Running"):
            meta = pod.get("metadata") or {}
            hosted.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(hosted)


def verdict(state: dict[str, Any], pods: dict[str, Any] | None, stack: str,
            unknown_reason: str = "no pods given") -> tuple[int, list[str]]:
    """(exit code, lines); `unknown_reason` says why `pods` is None."""
    lines: list[str] = []
    refused = False
    for urn, generation in pending_groups(state):
        if pods is None or generation is None:
            refused = True
            lines.append(f"refused: {urn} is pending deletion and the replicas it hosts are unknown "
                         f"({unknown_reason if pods is None else 'no generation label in the state'})")
            continue
        hosted = hosted_replicas(pods, generation)
        if hosted:
            refused = True
            lines.append(f"refused: {urn} (generation {generation}) is pending deletion and still hosts "
                         f"{len(hosted)} replica pod(s): {', '.join(hosted)}")
        else:
            lines.append(f"ok: {urn} (generation {generation}) is pending deletion and hosts no replica")
    if refused:
        lines.append(RECOVERY.format(stack=stack))
    return (1 if refused else 0), lines


def live_pods(stack: str) -> tuple[dict[str, Any] | None, str]:
    """The pods of the stack's cluster (cluster.name and aws:region of its stack file, or $AWS_REGION),
    or None and why not: any failure to read them refuses, it never passes."""
    from stacks import environment
    from stacks.config.files import stack_file_path
    from stacks.preflight import session

    try:
        resolved, config = environment.load_stack_file(stack_file_path(stack))
    except (OSError, ConfigError) as error:
        return None, f"cannot read the stack file of {stack!r}: {error}"
    region = resolved.other.get("aws:region") or os.environ.get("AWS_REGION")
    if not region:
        return None, f"no AWS region for {stack}: set aws:region in its stack file or export AWS_REGION"
    try:
        return session.cluster_pods(config.cluster.name, region), ""
    except Exception as error:  # noqa: BLE001 - credentials, EKS, the API server: each one refuses
        return None, f"cannot list the pods of cluster {config.cluster.name} in {region}: {error}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.node_group_guard", description=__doc__.splitlines()[0])
    parser.add_argument("state", type=Path, help="`pulumi stack export` output")
    parser.add_argument("--pods", type=Path,
                        help="`kubectl get pods -A -o json` output (default: read the stack's cluster)")
    parser.add_argument("--stack", help="stack name: its cluster's pods are read, and the recovery recipe names it")
    args = parser.parse_args(argv)
    try:
        state = json.loads(args.state.read_text())
        pods = json.loads(args.pods.read_text()) if args.pods else None
    except (OSError, json.JSONDecodeError) as error:
        print(f"node-group guard: cannot read its input: {error}", file=sys.stderr)
        return 2
    reason = "no pods given and no --stack to read them from"
    if pods is None and args.stack and pending_groups(state):
        pods, reason = live_pods(args.stack)
    code, lines = verdict(state, pods, args.stack or "<stack>", reason)
    for line in lines:
        print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
