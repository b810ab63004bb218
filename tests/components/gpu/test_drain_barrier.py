"""The drain barrier: a replaced node group's deletion waits until its last replaced vLLM pod has drained.

On the real engine Pulumi deletes a resource only after every resource that depends on it (pulumi/pulumi
step_generator.go, ScheduleDeletes, over the previous state's dependencies), so what these renders must
show is the dependency, the barrier's own termination time and the delete timeout that lets it finish.
"""

from __future__ import annotations

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
    assert wiring["dependsOn"] == [NODE_GROUP_KEY, "kubernetes:core/v1:Namespace::serving-namespace"]
    # Its grace period (1,850 s + 30 s) and 5 minutes: the default 10 minutes would fail the update mid-wait.
    assert wiring["customTimeouts"] == {"create": "", "update": "", "delete": "2180s"}
    assert wiring["deleteBeforeReplace"] is False and wiring["retainOnDelete"] is False


def test_prods_barrier_pod_outlasts_the_longest_vllm_grace_period(rendered):
    result = rendered["prod"]
    manifest = result.manifest("Deployment", barrier(result)["inputs"]["metadata"]["name"])
    vllm = result.manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]
    spec = manifest["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert vllm["terminationGracePeriodSeconds"] == 1850
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "1850"]
    assert spec["terminationGracePeriodSeconds"] == 1880
    # Deleted in the foreground, so the Deployment is gone only once its pod is.
    assert manifest["metadata"]["annotations"] == {"pulumi.com/deletionPropagationPolicy": "foreground"}
    assert manifest["spec"]["replicas"] == 1
    # Off the GPU nodes: no GPU toleration, no node selector; no token, restricted security context.
    assert "tolerations" not in spec and "nodeSelector" not in spec
    assert spec["automountServiceAccountToken"] is False
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
    assert drain.barrier_grace_seconds(645) == 675
    assert drain.barrier_delete_timeout_seconds(645) == 975
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
    assert rows == [
        ("0:00", "`pulumi up` creates the new node group beside the old one and the new generation's drain barrier"),
        ("5:00", "the new nodes have joined; the Deployment rolls onto them"),
        ("19:00", "step 1 of 2: a new replica is available; an old one stops taking requests after its 15 s preStop "
                  "and drains its streams"),
        ("33:00", "step 2 of 2: a new replica is available; an old one stops taking requests after its 15 s preStop "
                  "and drains its streams; the rollout is complete, so Pulumi starts its deletions: the old "
                  "generation's drain barrier first, whose pod sleeps 1,850 s before it goes"),
        ("63:20", "the last stream the last old replica admitted ends at the latest (its preStop + the 1,805 s stream "
                  "bound)"),
        ("63:50", "the last old replica has exited at the latest (1,850 s grace)"),
        ("63:50", "the barrier is gone; Pulumi deletes the old node group, whose nodes host no replica"),
        ("68:50", "EKS has drained (at most 5 min) and terminated the old nodes; the update ends"),
    ]
    assert timing.node_drain_wait_seconds(config) == 1850


def test_prods_barrier_is_fenced_off_the_network(rendered):
    result = rendered["prod"]
    name = barrier(result)["inputs"]["metadata"]["name"]
    labels = result.manifest("Deployment", name)["spec"]["template"]["metadata"]["labels"]
    assert result.manifest("NetworkPolicy", name)["spec"] == {
        "podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"]}
