"""The drain barrier: a replaced node group's deletion waits until its last replaced vLLM pod has drained.

On the real engine Pulumi deletes a resource only after every resource that depends on it (pulumi/pulumi
step_generator.go, ScheduleDeletes, over the previous state's dependencies), so what these renders must
show is the dependency, the barrier's own termination time and the delete timeout that lets it finish.
"""

from __future__ import annotations

import pytest

from llm_serving import gpu, serving
from llm_serving.gpu import drain
from llm_serving.stack import timing
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file

GROUP = "gpu-p5-48xlarge-node-group"
NODE_GROUP_KEY = f"aws:eks/nodeGroup:NodeGroup::{GROUP}"


def barrier(result):
    (found,) = [r for r in result.resources
                if r["type"] == "kubernetes:apps/v1:Deployment" and r["name"].startswith("node-drain-barrier-")]
    return found


def test_prods_barrier_is_named_for_the_generation_and_depends_on_its_node_group(rendered):
    result = rendered["prod"]
    found = barrier(result)
    generation = result.resource("aws:eks/nodeGroup:NodeGroup", GROUP)["inputs"]["labels"][gpu.NODE_GENERATION_LABEL]
    assert found["name"] == f"node-drain-barrier-{generation}-deployment"
    wiring = result.wiring[f"kubernetes:apps/v1:Deployment::{found['name']}"]
    # Its node group (deleted after it), and what its preStop reads its Deployment with: created before the pod,
    # deleted only once it has gone.
    barrier_name = found["name"].removesuffix("-deployment")
    assert wiring["dependsOn"] == [
        NODE_GROUP_KEY, "kubernetes:core/v1:Namespace::serving-namespace",
        f"kubernetes:core/v1:ServiceAccount::{barrier_name}-service-account",
        f"kubernetes:networking.k8s.io/v1:NetworkPolicy::{barrier_name}-network-policy",
        f"kubernetes:rbac.authorization.k8s.io/v1:Role::{barrier_name}-role",
        f"kubernetes:rbac.authorization.k8s.io/v1:RoleBinding::{barrier_name}-role-binding",
    ]
    # Its grace period and a margin: the default 10 minutes would fail the update mid-wait.
    _, config = load_stack_file(stack_file_path("prod"))
    delete = drain.barrier_delete_timeout_seconds(timing.node_drain_wait_seconds(config))
    assert wiring["customTimeouts"] == {"create": "", "update": "", "delete": f"{delete}s"}
    assert delete > drain.barrier_grace_seconds(timing.node_drain_wait_seconds(config))
    assert wiring["deleteBeforeReplace"] is False and wiring["retainOnDelete"] is False


def test_prods_barrier_pod_outlasts_the_longest_vllm_grace_period(rendered):
    result = rendered["prod"]
    manifest = result.manifest("Deployment", barrier(result)["inputs"]["metadata"]["name"])
    vllm = result.manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]
    spec = manifest["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    # The barrier's pod holds as long as a vLLM pod may take to exit, and is given time to do so
    # (test_drain_barrier_prestop.py runs the preStop: it holds only while its Deployment is being deleted).
    python, _, _, wait, deployment = container["lifecycle"]["preStop"]["exec"]["command"]
    assert python == "python" and deployment == manifest["metadata"]["name"]
    assert int(wait) == vllm["terminationGracePeriodSeconds"]
    assert spec["terminationGracePeriodSeconds"] > int(wait)
    # Deleted in the foreground, so the Deployment is gone only once its pod is.
    assert manifest["metadata"]["annotations"] == {"pulumi.com/deletionPropagationPolicy": "foreground"}
    assert manifest["spec"]["replicas"] == 1
    # Off the GPU nodes: no GPU toleration, no node selector; a token of its own, restricted security context.
    assert "tolerations" not in spec and "nodeSelector" not in spec
    assert spec["serviceAccountName"] == manifest["metadata"]["name"] and spec["automountServiceAccountToken"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["image"] == vllm_stage_image(result)


def vllm_stage_image(result) -> str:
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and m["metadata"]["name"].startswith("llama-70b-stage")]
    return job["spec"]["template"]["spec"]["containers"][0]["image"]


def test_the_node_group_guard_does_not_count_the_barrier_as_a_replica(rendered):
    from tools import node_group_guard

    result = rendered["prod"]
    manifest = result.manifest("Deployment", barrier(result)["inputs"]["metadata"]["name"])
    pod = {"metadata": {"namespace": "llm-serving", "name": "barrier-0"}, "spec": manifest["spec"]["template"]["spec"],
           "status": {"phase": "Running"}}
    generation = manifest["metadata"]["labels"][gpu.NODE_GENERATION_LABEL]
    assert node_group_guard.hosted_replicas({"items": [pod]}, generation) == []


def test_barrier_numbers_follow_the_wait():
    assert drain.barrier_grace_seconds(645) > 645
    assert drain.barrier_delete_timeout_seconds(645) > drain.barrier_grace_seconds(645)
    manifest = drain.barrier_manifest("0da3900dc4", "llm-serving", 645, "python@sha256:x", {})
    assert manifest["metadata"]["name"] == "node-drain-barrier-0da3900dc4"
    assert manifest["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/component": "node-drain-barrier",
                                                            gpu.NODE_GENERATION_LABEL: "0da3900dc4"}


def test_the_node_update_relation_refuses_a_barrier_shorter_than_a_grace_period():
    assert serving.node_update_relation(1850, 1850).holds
    short = serving.node_update_relation(300, 1850)
    assert not short.holds
    assert short.text() == ("node update: drain barrier before the old group's deletion 300 s >= longest vLLM "
                            "terminationGracePeriodSeconds 1,850 s")


def test_prods_node_update_cuts_no_stream_within_the_bound():
    _, config = load_stack_file(stack_file_path("prod"))
    rows = timing.node_update_timeline(config)

    def at(text: str) -> int:
        (clock,) = [when for when, what in rows if what.startswith(text)]
        minutes, seconds = clock.split(":")
        return int(minutes) * 60 + int(seconds)

    (model,) = config.models
    drains = timing.model_drains(config, model)
    rolled = at("step 2 of 2")
    # The last stream an old replica admitted ends before it is killed, and the barrier outlives the replica.
    assert at("the last stream") == rolled + serving.PRE_STOP_SECONDS + drains.stream_seconds
    assert at("the last stream") <= at("the last old replica has exited") == rolled + drains.vllm_grace_seconds
    assert at("the last old replica has exited") <= at("the barrier is gone") < at("EKS has drained")
    assert [when for when, _ in rows] == sorted((when for when, _ in rows), key=lambda c: tuple(map(int, c.split(":"))))
    assert timing.node_drain_wait_seconds(config) == drains.vllm_grace_seconds


def test_prods_barrier_is_fenced_off_the_network_but_for_the_api_server(rendered):
    result = rendered["prod"]
    name = barrier(result)["inputs"]["metadata"]["name"]
    labels = result.manifest("Deployment", name)["spec"]["template"]["metadata"]["labels"]
    # Nothing in; out only on the API server's port (no DNS: the preStop connects to KUBERNETES_SERVICE_HOST).
    assert result.manifest("NetworkPolicy", name)["spec"] == {
        "podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                    "ports": [{"protocol": "TCP", "port": 443}]}]}


def test_prods_barrier_may_read_its_own_deployment_and_nothing_else(rendered):
    result = rendered["prod"]
    name = barrier(result)["inputs"]["metadata"]["name"]
    pod = result.manifest("Deployment", name)["spec"]["template"]["spec"]
    account = result.manifest("ServiceAccount", pod["serviceAccountName"])
    # The token is mounted where a pod asks for it (the barrier's does), not in every pod that names the account.
    assert account["automountServiceAccountToken"] is False and pod["automountServiceAccountToken"] is True
    binding = result.manifest("RoleBinding", name)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert result.manifest("Role", binding["roleRef"]["name"])["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [name], "verbs": ["get"]}]
    # Nothing else in the namespace is bound to it.
    bound = [m["metadata"]["name"] for m in result.manifests if m["kind"] == "RoleBinding"
             and any(s.get("name") == account["metadata"]["name"] for s in m["subjects"])]
    assert bound == [name]


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_no_disruption_budget_holds_the_barriers_eviction(rendered, stack):
    # A CPU node's drain evicts the barrier's pod through the Eviction API, which a PodDisruptionBudget selecting it
    # could refuse (https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/); none does.
    result = rendered[stack]
    labels = result.manifest("Deployment", barrier(result)["inputs"]["metadata"]["name"])["spec"]["template"][
        "metadata"]["labels"]
    budgets = [m for m in result.manifests if m["kind"] == "PodDisruptionBudget"]
    assert budgets  # the vLLM and picker budgets are there, and select other pods
    assert [b["metadata"]["name"] for b in budgets if b["metadata"]["namespace"] == "llm-serving"
            and all(labels.get(k) == v for k, v in b["spec"]["selector"]["matchLabels"].items())] == []
