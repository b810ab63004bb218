"""NodeDrainBarrier: a one-pod Deployment per node generation whose deletion holds back its node group's.

When a node update replaces the GPU node group, Pulumi deletes the old barrier before the old group
(the barrier depends on it), and the barrier's pod takes the longest vLLM grace period to go
(drain.py), so no replaced pod is still draining when EKS starts terminating the old nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from . import drain


@dataclass(frozen=True)
class NodeDrainBarrierArgs:
    generation: str  # the node group's generation label (scheduling.node_generation)
    namespace: pulumi.Input[str]
    wait_seconds: int  # the longest terminationGracePeriodSeconds of the pods on the group
    image: str  # any pinned image with `python` and `sleep` (the staging Job's, by digest)
    container_security: dict
    node_group: pulumi.Resource  # the aws.eks.NodeGroup whose deletion waits for this one


class NodeDrainBarrier(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeDrainBarrierArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:gpu:NodeDrainBarrier", name, None, opts)
        manifest = drain.barrier_manifest(args.generation, "-", args.wait_seconds, args.image, args.container_security)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={**manifest["metadata"], "namespace": args.namespace},
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                # The dependency the engine orders deletions by: this Deployment goes before the group.
                depends_on=[args.node_group],
                custom_timeouts=pulumi.CustomTimeouts(delete=f"{drain.barrier_delete_timeout_seconds(args.wait_seconds)}s"),
            ),
        )
        policy = drain.barrier_network_policy(args.generation, "-")
        k8s.networking.v1.NetworkPolicy(
            f"{name}-network-policy", metadata={**policy["metadata"], "namespace": args.namespace},
            spec=policy["spec"], opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"name": self.deployment.metadata.name})
