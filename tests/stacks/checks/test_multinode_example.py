"""examples/Pulumi.prod-405b.yaml: Llama 3.1 405B BF16 as TP 8 x PP 2 LeaderWorkerSet groups on
p5.48xlarge over EFA, rendered offline; and the preview's refusals of groups that cannot work."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from llm_serving import serving
from llm_serving.platform.args import validate
from llm_serving.stack import planning
from llm_serving.stack import timing as stack_timing
from policies import rules
from stacks import checks, environment
from stacks.config import ServingStackArgs
from stacks.config.files import PROJECT_DIR
from stacks.offline import render
from tests.conftest import render_file
from tests.support import reference

EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml"
MODEL = "llama-405b"


@pytest.fixture(scope="module")
def example() -> render.RenderResult:
    return render_file(EXAMPLE)


def _group(example: render.RenderResult) -> dict[str, Any]:
    return example.manifest("LeaderWorkerSet", MODEL)


def test_each_replica_is_one_leader_worker_set_group_of_two_nodes(example):
    group = _group(example)
    assert reference.custom_resource_errors(group) == []
    spec = group["spec"]
    assert group["metadata"]["annotations"] == {"pulumi.com/waitFor": "condition=Available"}
    assert {k: v for k, v in spec.items() if k != "leaderWorkerTemplate"} == {
        "replicas": 2,
        "startupPolicy": "LeaderCreated",
        # Room for one more group at peak (6 nodes for 2 groups of 2): surge a group, take none away.
        "rolloutStrategy": {"type": "RollingUpdate",
                            "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0}},
        "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
    }
    # LeaderWorkerSet makes one headless Service per group named after its leader pod (llama-405b-0,
    # llama-405b-1); with `Shared` it would want one named llama-405b, the model's own Service, and
    # skip it, leaving LWS_LEADER_ADDRESS unresolvable.
    services = {m["metadata"]["name"] for m in example.manifests if m["kind"] == "Service"}
    assert MODEL in services and not {f"{MODEL}-0", f"{MODEL}-1"} & services
    template = spec["leaderWorkerTemplate"]
    assert (template["size"], template["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    assert template["leaderTemplate"]["metadata"]["labels"]["app.kubernetes.io/component"] == "vllm"
    assert template["workerTemplate"]["metadata"]["labels"]["app.kubernetes.io/component"] == "vllm-worker"
    # No Deployment for the model: the group is its workload.
    assert [d["metadata"]["name"] for d in example.manifests if d["kind"] == "Deployment"
            and d["metadata"]["name"] == MODEL] == []


def test_the_leader_serves_and_the_worker_joins_headless(example):
    template = _group(example)["spec"]["leaderWorkerTemplate"]
    (leader,) = template["leaderTemplate"]["spec"]["containers"]
    (worker,) = template["workerTemplate"]["spec"]["containers"]
    engine = ["--tensor-parallel-size", "8"]
    assert " ".join(engine) in " ".join(leader["args"]) and " ".join(engine) in " ".join(worker["args"])
    assert leader["args"][-12:] == [
        "--pipeline-parallel-size", "2", "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0",
        "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", "29501"]
    assert worker["args"][-12:] == [
        "2", "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", "29501", "--headless"]
    assert reference.vllm_flag_errors(leader["args"]) == reference.vllm_flag_errors(worker["args"]) == []
    # Probes on the leader only: a worker answers no HTTP.
    assert {"startupProbe", "readinessProbe", "livenessProbe", "ports"} <= set(leader)
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(worker)
    # The group drains as one: the leader stops taking requests after its preStop and lets in-flight streams
    # run for its shutdown timeout, the stream bound; the worker waits while the leader's engine runs, at most
    # both, before it gets SIGTERM (tests/components/serving/test_worker_drain.py runs that wait).
    shutdown = int(leader["args"][leader["args"].index("--shutdown-timeout") + 1])
    (model,) = environment.load_stack_file(PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml")[1].models
    assert shutdown == stack_timing.stream_seconds(model)
    assert leader["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", str(serving.PRE_STOP_SECONDS)]}}}
    command = worker["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    assert command[3:5] == [str(serving.PRE_STOP_SECONDS + shutdown), str(serving.MASTER_PORT)]
    assert "--master-port" in worker["args"] and worker["args"][worker["args"].index("--master-port") + 1] == command[4]
    # The startup budget covers each stage's pod reading the whole ~811 GB checkpoint from EFS (500 MiB/s):
    # vLLM keeps every file on every pipeline stage (capacity.plan).
    assert leader["startupProbe"]["failureThreshold"] * leader["startupProbe"]["periodSeconds"] == 3580
    pods = (template["leaderTemplate"], template["workerTemplate"])
    grace = {t["spec"]["terminationGracePeriodSeconds"] for t in pods}
    assert grace == {serving.termination_grace_seconds(shutdown)}


def test_pulumi_waits_out_a_group_rollout_whose_every_step_drains_before_it_starts(example):
    """lws recreates a group under the same names only once its old leader has drained (issue #42): each in-place
    step is a whole drain plus a cold start, and Pulumi's wait on the LeaderWorkerSet covers them all."""
    config = environment.load_stack_file(EXAMPLE)[1]
    (model,) = config.models
    template = _group(example)["spec"]["leaderWorkerTemplate"]
    grace = template["leaderTemplate"]["spec"]["terminationGracePeriodSeconds"]
    startup = template["leaderTemplate"]["spec"]["containers"][0]["startupProbe"]
    (wiring,) = [w for key, w in example.wiring.items() if key.startswith("kubernetes:leaderworkerset.x-k8s.io/v1")]
    wait = int(wiring["customTimeouts"]["update"].removesuffix("s"))
    rollout = stack_timing.group_rollout(config, model)
    groups = _group(example)["spec"]["replicas"]
    strategy = _group(example)["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]
    assert rollout.surge_groups == strategy["maxSurge"] and rollout.in_place_steps == groups
    assert rollout.leader_grace_seconds == grace
    assert wait >= rollout.surge_seconds + groups * (grace + rollout.start_seconds)
    assert wiring["customTimeouts"]["create"] == wiring["customTimeouts"]["update"]
    # A recreated leader's startup probe outlasts the old workers' exit and its own cold start.
    assert startup["failureThreshold"] * startup["periodSeconds"] >= serving.WORKER_EXIT_SECONDS + (
        rollout.start_seconds - planning.timing(config).image_pull_seconds)
    rules = {r.path: r for r in stack_timing.relations(config) if r.path.startswith(MODEL)}
    assert rules[f"{MODEL}: Pulumi rollout await"].holds and rules[f"{MODEL}: leader startup probe budget"].holds


def test_every_rank_takes_its_nodes_efa_interfaces_with_huge_pages_and_nccl_over_libfabric(example):
    template = _group(example)["spec"]["leaderWorkerTemplate"]
    for pod in (template["leaderTemplate"], template["workerTemplate"]):
        (container,) = pod["spec"]["containers"]
        for side in ("requests", "limits"):
            assert container["resources"][side]["vpc.amazonaws.com/efa"] == "32"
            assert container["resources"][side]["hugepages-2Mi"] == "5120Mi"
            assert container["resources"][side]["nvidia.com/gpu"] == "8"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: env[k] for k in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "NCCL_DEBUG")} == {
            "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1", "NCCL_DEBUG": "INFO"}
        assert container["image"] == "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-openai-efa:v0.33.0-efa1"


def test_the_nodes_launch_with_every_efa_interface_and_the_plugin_and_operator_install(example):
    (template,) = example.by_type()["aws:ec2/launchTemplate:LaunchTemplate"]
    interfaces = template["inputs"]["networkInterfaces"]
    assert len(interfaces) == 32
    assert (interfaces[0]["interfaceType"], interfaces[0]["networkCardIndex"], interfaces[0]["deviceIndex"]) == (
        "efa", 0, 0)
    assert {(i["interfaceType"], i["deviceIndex"]) for i in interfaces[1:]} == {("efa-only", 1)}
    efa = example.resource("kubernetes:helm.sh/v3:Release", "efa-device-plugin-release")["inputs"]
    assert (efa["chart"], efa["version"], efa["namespace"]) == ("aws-efa-k8s-device-plugin", "v0.5.30", "kube-system")
    assert efa["values"] == {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    lws = example.resource("kubernetes:helm.sh/v3:Release", "leaderworkerset-release")["inputs"]
    assert (lws["chart"], lws["version"], lws["name"]) == ("oci://registry.k8s.io/lws/charts/lws", "v0.10.0", "lws")
    assert lws["values"] == {"replicaCount": 2,
                             "podSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    assert reference.helm_value_errors("lws", "0.10.0", lws["values"]) == []
    assert reference.helm_value_errors("aws-efa-k8s-device-plugin", "0.5.30", efa["values"]) == []
    group = example.resource("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", "llama-405b-leaderworkerset")
    # The group waits for its operator, the EFA plugin, its fence and its staged weights.
    assert {"kubernetes:helm.sh/v3:Release::efa-device-plugin-release",
            "kubernetes:helm.sh/v3:Release::leaderworkerset-release",
            "kubernetes:networking.k8s.io/v1:NetworkPolicy::llama-405b-group-netpol",
            "kubernetes:batch/v1:Job::llama-405b-weights-stage"} <= set(group["options"]["dependsOn"])


def test_ranks_reach_each_other_and_groups_scale_whole(example):
    fence = example.manifest("NetworkPolicy", f"{MODEL}-group")["spec"]
    same_group = {"podSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": MODEL}}}
    assert fence["podSelector"] == same_group["podSelector"]
    assert fence["ingress"] == [{"from": [same_group]}]
    assert fence["egress"][0] == {"to": [same_group]}
    scaled = example.manifest("ScaledObject", MODEL)["spec"]["scaleTargetRef"]
    assert scaled == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": MODEL}
    # One pod of any group at a time may be evicted: a group is down as soon as one of its pods is.
    assert example.manifest("PodDisruptionBudget", MODEL)["spec"] == {
        "maxUnavailable": 1, "selector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": MODEL}}}
    # The Service and the pool select the leaders only.
    assert example.manifest("Service", MODEL)["spec"]["selector"]["app.kubernetes.io/component"] == "vllm"


def test_the_policy_pack_reads_both_templates_and_passes(example):
    found = rules.violations(example, "prod")
    # Every mandatory rule passes but the digests, which only `pin-images` can give (no registry is reachable here):
    # the model's image wherever it runs, and the charts' images (their releases' values, the Envoy proxy).
    mandatory = [r.name for r in rules.RULES if r.enforcement == "mandatory" and r.name != "images-digest-pinned"]
    assert {rule: found[rule] for rule in mandatory} == {rule: [] for rule in mandatory}
    image = example.manifest("LeaderWorkerSet", "llama-405b")["spec"]["leaderWorkerTemplate"]["leaderTemplate"][
        "spec"]["containers"][0]["image"]
    charts = [m for m in found["images-digest-pinned"] if m.startswith(("Helm release ", "EnvoyProxy "))]
    assert charts and all("(chartImageDigests" in m for m in charts)
    pods = [m for m in found["images-digest-pinned"] if m not in charts]
    assert pods and all(f": image {image} has no digest;" in m for m in pods)
    group = copy.deepcopy(_group(example))
    del group["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["tolerations"]
    found = rules.check_gpu_pods_select_gpu_nodes(rules.LEADER_WORKER_SET, group, rules.RuleContext("prod", None))
    assert found[0].startswith(
        "LeaderWorkerSet llm-serving/llama-405b (worker pods) requests nvidia.com/gpu but does not tolerate")


def test_every_object_validates(example):
    assert [e for m in example.manifests for e in reference.kubernetes_object_errors(m, "1.34")] == []


# --- what the preview refuses -----------------------------------------------------------------------------


def _lines(edit) -> list[str]:
    raw = yaml.safe_load(EXAMPLE.read_text())["config"]
    config = {k.removeprefix("llm-serving:"): v for k, v in raw.items() if k.startswith("llm-serving:")}
    config = {k: v for k, v in config.items() if k not in ("apiKey", "hfToken")}
    edit(config)
    valid = validate(ServingStackArgs, {**config, "apiKey": "k" * 32, "hfToken": "hf_" + "t" * 34})
    return [p.line() for p in checks.check(valid)]


def test_the_example_itself_passes():
    assert _lines(lambda c: None) == []


def test_a_pipeline_size_that_does_not_divide_the_layers_is_refused():
    def edit(c):
        c["models"][0]["pipelineParallelSize"] = 4
    assert any("has 126 layers, which --pipeline-parallel-size 4 does not divide" in line for line in _lines(edit))


def test_groups_larger_than_the_node_group_are_refused():
    def edit(c):
        c["gpuNodeGroup"]["scaling"] = {"minNodes": 2, "maxNodes": 3, "desiredNodes": 2}
    assert any("at peak the models need 4 nodes (llama-405b 2 x TP8 x PP2 group" in line for line in _lines(edit))


def test_ranks_without_efa_or_an_image_that_can_use_it_are_refused():
    def no_efa(c):
        c["gpuNodeGroup"]["efaInterfaces"] = 0
    assert _lines(no_efa) == [
        "llm-serving:gpuNodeGroup.efaInterfaces: llama-405b spans 2 nodes and NCCL would fall back to TCP sockets "
        "without EFA interfaces (got 0; expected 32)"]

    def plain_image(c):
        c["models"][0]["image"] = {"repository": "vllm/vllm-openai", "tag": "v0.33.0"}
    assert _lines(plain_image) == [
        "llm-serving:models[llama-405b].image.efaCapable: NCCL uses EFA only through libfabric and aws-ofi-nccl in "
        "the image, which vllm/vllm-openai does not carry (it would silently use TCP) (got false; expected true, "
        "with an image that has them (e.g. AWS's vLLM Deep Learning Container))"]

    def spread(c):
        c["gpuNodeGroup"]["placement"] = "none"
    assert _lines(spread) == [
        "llm-serving:gpuNodeGroup.placement: the ranks of llama-405b's groups belong in one placement group and "
        "availability zone (got \"none\"; expected cluster)"]


def test_an_instance_type_without_efa_is_refused():
    def l40s(c):
        c["gpuNodeGroup"].update({"instanceType": "g6e.4xlarge", "efaInterfaces": 0})
        c["models"][0]["tensorParallelSize"] = 1
    assert (
        "llm-serving:gpuNodeGroup.instanceType: g6e.4xlarge has no EFA, so the ranks of llama-405b's multi-node "
        "replicas would exchange activations over TCP (got \"g6e.4xlarge\"; expected an EFA instance type (p4d, "
        "p4de, p5, p5e, p5en, p6-b200))"
    ) in _lines(l40s)
