"""How EKS node auto repair treats this project's GPU node groups (pure)."""

from __future__ import annotations

from dataclasses import dataclass

# EKS node auto repair: the node monitoring agent's conditions decide. Its defaults act on
# AcceleratedHardwareReady after 10 minutes (Reboot or Replace by Xid class) and on runtime, kernel,
# network and storage faults after 30 (awsdocs node-repair.adoc). Repairs stop when more than one
# node is unhealthy at once, so a fleet-wide fault (a bad AMI, a driver bug) pages instead of
# cycling every GPU node; one node at a time keeps the serving floor.
REPAIR_MAX_UNHEALTHY_NODES = 1
REPAIR_MAX_PARALLEL_NODES = 1
# Xid 13 (graphics engine exception) and 31 (GPU memory page fault) are application faults: a CUDA kernel's
# illegal access kills its process, the container restarts and the GPU serves again (NVIDIA's Xid catalogue,
# docs.nvidia.com/deploy/xid-errors). EKS's default reboots the whole node after 10 minutes, killing the healthy
# replica beside it; NoAction leaves them to the pod's restart and the GpuXidError alert (docs/runbooks.md).
# The override matches the agent's condition and reason (eks-node-monitoring-agent: AcceleratedHardwareReady,
# NvidiaXID13Error / NvidiaXID31Error); the API needs every field set (EKS API reference,
# NodeRepairConfigOverrides: repairAction Replace | Reboot | NoAction, minRepairWaitTimeMins >= 1).
APPLICATION_XID_REASONS = ("NvidiaXID13Error", "NvidiaXID31Error")


@dataclass(frozen=True)
class RepairOverride:
    condition: str  # the node condition the agent sets
    reason: str  # the condition's reason
    wait_minutes: int
    action: str  # Replace, Reboot or NoAction


REPAIR_OVERRIDES = tuple(RepairOverride("AcceleratedHardwareReady", reason, 10, "NoAction")
                         for reason in APPLICATION_XID_REASONS)
