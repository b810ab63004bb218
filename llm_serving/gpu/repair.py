"""How EKS node auto repair treats this project's GPU node groups (pure)."""

from __future__ import annotations

# EKS node auto repair: the node monitoring agent's conditions decide. Its defaults act on
# AcceleratedHardwareReady after 10 minutes (Reboot or Replace by Xid class) and on runtime, kernel,
# network and storage faults after 30 (awsdocs node-repair.adoc). Repairs stop when more than one
# node is unhealthy at once, so a fleet-wide fault (a bad AMI, a driver bug) pages instead of
# cycling every GPU node; one node at a time keeps the serving floor.
REPAIR_MAX_UNHEALTHY_NODES = 1
REPAIR_MAX_PARALLEL_NODES = 1
# Xid 13 and 31 (application faults: a CUDA kernel's illegal access) set no node condition with the pinned agent:
# eks-node-monitoring-agent dropped them from its well-known Xids in v1.6.4 (aws/eks-node-monitoring-agent #136,
# monitors/nvidia/dcgm/dcgm_policies.go) and reports them only as NvidiaXID13Warning / NvidiaXID31Warning events,
# so EKS repairs nothing for them and the node group needs no override (gpu/alerts.py AUTO_REPAIR_REBOOT_XIDS).
