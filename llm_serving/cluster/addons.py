"""The EKS add-ons a created cluster runs, at the versions pinned per Kubernetes minor (pure).

Order matters twice. On create, coredns is a Deployment that stays DEGRADED (and its create times
out) until a node exists, while vpc-cni, kube-proxy and the Pod Identity agent are DaemonSets the
first node needs before it turns Ready (EKS user guide, "Create a cluster": add the networking
add-ons before nodes). On a minor upgrade, EKS documents the same sequence: control plane, then the
add-ons, then the nodes ("Update existing cluster to new Kubernetes version").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from llm_serving.platform import versions


@dataclass(frozen=True)
class AddonSpec:
    name: str
    version: str
    configuration: dict | None
    before_nodes: bool

    def configuration_values(self) -> str | None:
        return json.dumps(self.configuration, sort_keys=True) if self.configuration is not None else None


# vpc-cni: turn on the network policy agent, so the NetworkPolicies this stack applies (serving,
# pickers, multi-node groups) are enforced instead of silently ignored (EKS user guide,
# cni-network-policy-configure: `enableNetworkPolicy` is a string, "true").
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}

ADDONS: tuple[tuple[str, dict | None, bool], ...] = (
    ("vpc-cni", VPC_CNI_CONFIGURATION, True),
    ("kube-proxy", None, True),
    ("eks-pod-identity-agent", None, True),
    ("coredns", None, False),
)


def pinned_minors() -> set[str]:
    """Minors every add-on has a pin for: the only ones a created cluster may run."""
    return set.intersection(*(set(versions.ADDON_VERSIONS[name]) for name, _, _ in ADDONS))


def addon_plan(minor: str) -> tuple[AddonSpec, ...]:
    """Every add-on at its pin for `minor`; KeyError when a pin is missing (checked at preview)."""
    return tuple(AddonSpec(name, versions.ADDON_VERSIONS[name][minor], configuration, before)
                 for name, configuration, before in ADDONS)
