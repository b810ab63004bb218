"""NodeDrainBarrier: a one-pod Deployment per node generation whose deletion holds back its node group's.

When a node update replaces the GPU node group, Pulumi deletes the old barrier before the old group
(the barrier depends on it), and the barrier's pod takes the longest vLLM grace period to go
(drain.py), so no replaced pod is still draining when EKS starts terminating the old nodes. Its pod
holds only while its Deployment is being deleted, which it reads with a ServiceAccount of its own;
drained off a CPU node, it goes at once.
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
    image: str  # any pinned image with `python` (the staging Job's, by digest)
    container_security: dict
    node_group: pulumi.Resource  # the aws.eks.NodeGroup whose deletion waits for this one


class NodeDrainBarrier(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeDrainBarrierArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:gpu:NodeDrainBarrier", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = drain.barrier_service_account(args.generation, args.namespace)
        service_account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account", metadata=account["metadata"],
            automount_service_account_token=account["automountServiceAccountToken"], opts=child)
        role_manifest = drain.barrier_role(args.generation, args.namespace)
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=role_manifest["metadata"], rules=role_manifest["rules"],
                                opts=child)
        binding_manifest = drain.barrier_role_binding(args.generation, args.namespace)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-role-binding", metadata=binding_manifest["metadata"], role_ref=binding_manifest["roleRef"],
            subjects=binding_manifest["subjects"], opts=child)
        policy = drain.barrier_network_policy(args.generation, args.namespace)
        network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-network-policy", metadata=policy["metadata"], spec=policy["spec"], opts=child)
        manifest = drain.barrier_manifest(args.generation, args.namespace, args.wait_seconds, args.image,
                                          args.container_security)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                # The dependency the engine orders deletions by: this Deployment goes before the group. And
                # what its pod's preStop reads its Deployment with (the account, its Role and binding, the
                # way out to the API server): created before the pod, deleted only after it has held and gone.
                depends_on=[args.node_group, service_account, role, binding, network_policy],
                custom_timeouts=pulumi.CustomTimeouts(delete=f"{drain.barrier_delete_timeout_seconds(args.wait_seconds)}s"),
            ),
        )
        self.register_outputs({"name": self.deployment.metadata.name})
