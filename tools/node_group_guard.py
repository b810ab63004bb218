"""Refuse `pulumi up` while the stack has a pending node-group deletion whose nodes still host replicas.

A node update that failed after its new group was created leaves the old group marked for deletion
in the state, and the next `pulumi up` runs that deletion first, before anything else
(pulumi/pulumi#9979). If the vLLM replicas never moved (the rollout failed), that deletes the nodes
they run on. This reads the state (`pulumi stack export`) and the cluster's pods (`kubectl get pods
-A -o json`): every pod selecting a pending group's generation label is a replica that deletion
would kill. Without the pods it cannot tell, so it refuses.

    python -m tools.node_group_guard STATE.json [--pods PODS.json]   exit 0: safe, 1: refused, 2: bad input
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from components.gpu import NODE_GENERATION_LABEL

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


def verdict(state: dict[str, Any], pods: dict[str, Any] | None, stack: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    refused = False
    for urn, generation in pending_groups(state):
        if pods is None or generation is None:
            refused = True
            lines.append(f"refused: {urn} is pending deletion and the replicas it hosts are unknown "
                         f"({'no pods given' if pods is None else 'no generation label in the state'})")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.node_group_guard", description=__doc__.splitlines()[0])
    parser.add_argument("state", type=Path, help="`pulumi stack export` output")
    parser.add_argument("--pods", type=Path, help="`kubectl get pods -A -o json` output")
    parser.add_argument("--stack", default="<stack>", help="stack name, for the recovery recipe")
    args = parser.parse_args(argv)
    try:
        state = json.loads(args.state.read_text())
        pods = json.loads(args.pods.read_text()) if args.pods else None
    except (OSError, json.JSONDecodeError) as error:
        print(f"node-group guard: cannot read its input: {error}", file=sys.stderr)
        return 2
    code, lines = verdict(state, pods, args.stack)
    for line in lines:
        print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
