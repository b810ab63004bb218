"""Which security groups a GPU node carries, and where the launch template says so (pure).

EKS adds the cluster security group to a managed node group's instances only when the launch template
names none; naming our own drops it, so it is always named too (EKS user guide, launch-templates,
"Using custom security groups"). The group of their own is what the weights' mount targets admit.
"""

from __future__ import annotations

from typing import Any

# What the generation label hashes for the nodes' security groups: their roles, not their ids (a group
# the stack creates has no id at preview). A new role here is a new generation, so the nodes that
# carry the new groups come up in a new node group before the old one goes (node_group.generation).
SECURITY_GROUP_ROLES = ("cluster", "gpu-nodes")


def efa_interfaces(count: int, security_groups: list[Any]) -> list[dict[str, Any]] | None:
    """EFA interfaces: card 0 carries ENA+EFA for normal traffic, the rest EFA-only for NCCL (EC2 user
    guide, "Maximize network bandwidth on accelerated instances": the primary interface must be
    ENA-capable). Declared interfaces carry the security groups: a launch template may name them at the
    instance or on the interfaces, never both (EKS user guide, launch-templates)."""
    if count == 0:
        return None
    return [
        {
            "network_card_index": index,
            "device_index": 0 if index == 0 else 1,
            "interface_type": "efa" if index == 0 else "efa-only",
            "security_groups": list(security_groups),
            "delete_on_termination": "true",
        }
        for index in range(count)
    ]


def instance_security_groups(efa_interface_count: int, security_groups: list[Any]) -> list[Any] | None:
    """The launch template's instance-level groups: None when the EFA interfaces carry them."""
    return None if efa_interface_count else list(security_groups)
