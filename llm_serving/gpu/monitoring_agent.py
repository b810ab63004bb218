"""The EKS node monitoring agent add-on, whose node conditions drive the GPU node group's auto repair.

One per cluster, beside the node group; its configuration is checked against the add-on's published
schema in the tests (tests/components/test_eks_addons.py).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from llm_serving.platform.addons import addon_settings

from . import scheduling

MONITORING_AGENT_ADDON = "eks-node-monitoring-agent"


def monitoring_agent_configuration() -> dict[str, object]:
    """The add-on's configurationValues, valid against its published schema (aws/eks-node-monitoring-agent
    charts/configuration.schema.json, chart 1.7.0: `global`, `nodeAgent`, `dcgmAgent`, `extraObjects`,
    `additionalProperties: false` at every level; EKS refuses CreateAddon on any other key).

    `nodeAgent` keeps its default, which already tolerates every taint. `dcgmAgent`, the DCGM host
    engine the agent's GPU checks query, defaults to `tolerations: []` with a required affinity to GPU
    instance types, so without the GPU taint's toleration it never runs on our tainted GPU nodes and the
    agent reports DCGM errors there instead of GPU health.
    """
    return {"dcgmAgent": {"tolerations": scheduling.gpu_tolerations()}}


def node_monitoring_agent(
    name: str, cluster_name: str, kubernetes_version: str, tags: dict[str, str], opts: pulumi.ResourceOptions
) -> aws.eks.Addon:
    """The EKS node monitoring agent add-on, whose node conditions drive auto repair.

    One per cluster, under a name that does not follow the node group's (a new group generation must
    not create a second add-on, which EKS refuses). Its version is pinned for the cluster's minor
    (llm_serving/platform/versions.py), never EKS's moving default.
    """
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        **addon_settings(MONITORING_AGENT_ADDON, kubernetes_version),
        configuration_values=json.dumps(monitoring_agent_configuration(), sort_keys=True),
        tags=tags,
        opts=opts,
    )
