"""A multi-node model on the S3 backend: examples/Pulumi.prod-405b.yaml (Llama 3.1 405B BF16, TP 8 x PP 2
LeaderWorkerSet groups) with its weights in the program's bucket. Both ranks of a group stream the revision
from S3 with the same args and env as the group's one service account, whose Pod Identity association maps
it to the prefix's read-only role; the planner counts the whole checkpoint per stage's pod; and what still
cannot work is refused. One render for the module."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_serving.edge import network_policies
from llm_serving.gpu import lookup_instance_type
from llm_serving.platform.args import validate
from llm_serving.serving import engine, lookup_model
from llm_serving.serving.capacity import plan
from llm_serving.stack import planning
from policies import rules
from stacks import checks, environment
from stacks.config import ServingStackArgs
from stacks.config.files import PROJECT_DIR
from stacks.offline import render
from tests.conftest import render_file
from tests.support import reference
from tests.support.admission import denials, mutated

EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml"
MODEL = "llama-405b"
BUCKET = "llm-prod-weights-123456789012-us-east-1"
PREFIX = "meta-llama/Llama-3.1-405B-Instruct/0000000000000000000000000000000000000000/"
S3 = {"backend": "s3", "s3": {"readMibPerSecond": 2000, "streamerConcurrency": 32, "streamerMemoryLimitGib": 16}}
BASE_ARGS = [
    f"s3://{BUCKET}/{PREFIX}", "--served-model-name", MODEL, "--max-model-len", "16384",
    "--gpu-memory-utilization", "0.92", "--tensor-parallel-size", "8", "--kv-cache-dtype", "auto",
    "--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--enable-prefix-caching", "--port", "8000",
    "--shutdown-timeout", "1807", "--sse-keep-alive-interval", "15", "--pipeline-parallel-size", "2",
    "--load-format", "runai_streamer",
    # distributed: the 8 ranks of a pod split the files and broadcast, so each pod reads the checkpoint once.
    "--model-loader-extra-config", '{"concurrency":32,"distributed":true,"memory_limit":17179869184}',
    "--distributed-executor-backend", "mp", "--nnodes", "2",
]


def _s3_stack(raw: dict[str, Any]) -> dict[str, Any]:
    """The example's config with its weights on S3; its EFA image is the stock one plus libfabric, so it
    says it keeps the stock image's streamer."""
    config = {**raw, "llm-serving:weightsStorage": S3}
    (model,) = config["llm-serving:models"]
    config["llm-serving:models"] = [{**model, "image": {**model["image"], "s3Streamer": True}}]
    return config


@pytest.fixture(scope="module")
def stack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("s3-multinode") / "Pulumi.prod-405b-s3.yaml"
    path.write_text(yaml.safe_dump({"config": _s3_stack(yaml.safe_load(EXAMPLE.read_text())["config"])}))
    return path


@pytest.fixture(scope="module")
def example(stack_file: Path) -> render.RenderResult:
    return render_file(stack_file)


@pytest.fixture(scope="module")
def config(stack_file: Path) -> ServingStackArgs:
    return environment.load_stack_file(stack_file)[1]


def _templates(example: render.RenderResult) -> tuple[dict[str, Any], dict[str, Any]]:
    template = example.manifest("LeaderWorkerSet", MODEL)["spec"]["leaderWorkerTemplate"]
    return template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]


def test_the_example_on_s3_passes_the_preview(config):
    assert checks.check(config) == []


def test_leader_and_worker_stream_the_revision_with_the_same_args_but_their_rank(example):
    leader, worker = _templates(example)
    (leader_container,), (worker_container,) = leader["containers"], worker["containers"]
    assert leader_container["args"] == [*BASE_ARGS, "--node-rank", "0", "--master-addr", "$(LWS_LEADER_ADDRESS)",
                                        "--master-port", "29501"]
    assert worker_container["args"] == [*BASE_ARGS, "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr",
                                        "$(LWS_LEADER_ADDRESS)", "--master-port", "29501", "--headless"]


def test_leader_and_worker_get_the_same_env_with_the_region_and_no_weights_volume(example):
    leader, worker = _templates(example)
    env = leader["containers"][0]["env"]
    assert worker["containers"][0]["env"] == env
    by_name = {e["name"]: e.get("value") for e in env}
    # The streamer's S3 client takes the region from the env (Pod Identity gives credentials only); the
    # engine waits as long as the startup probe for a cold start that streams the whole checkpoint.
    assert [by_name[k] for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "VLLM_ENGINE_READY_TIMEOUT_S",
                                 "HF_HUB_OFFLINE")] == ["us-east-1", "us-east-1", "1260", "1"]
    for spec in (leader, worker):
        assert [v["name"] for v in spec["volumes"]] == ["shm", "cache", "tmp"]
        assert [m["name"] for m in spec["containers"][0]["volumeMounts"]] == ["cache", "shm", "tmp"]
    assert leader["containers"][0]["startupProbe"] == {"httpGet": {"path": "/health", "port": "http"},
                                                       "periodSeconds": 10, "failureThreshold": 126,
                                                       "timeoutSeconds": 5}


def test_both_ranks_run_as_the_models_reader_account_mapped_to_the_read_only_role(example):
    leader, worker = _templates(example)
    assert [(s["serviceAccountName"], s["automountServiceAccountToken"]) for s in (leader, worker)] == [
        ("llama-405b-vllm", False), ("llama-405b-vllm", False)]
    association = example.resource("aws:eks/podIdentityAssociation:PodIdentityAssociation",
                                   "weights-storage-llama-405b-read-pod-identity")
    assert association["inputs"] == {
        "clusterName": "llm-prod", "namespace": "llm-serving", "serviceAccount": "llama-405b-vllm",
        "roleArn": "arn:aws:iam::123456789012:role/weights-storage-llama-405b-read-role",
        "tags": {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod"}}
    policy = example.resource("aws:iam/rolePolicy:RolePolicy", "weights-storage-llama-405b-read-policy")
    assert json.loads(policy["inputs"]["policy"]) == {"Version": "2012-10-17", "Statement": [
        {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": [f"arn:aws:s3:::{BUCKET}/{PREFIX}*"]},
        {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}",
         "Condition": {"StringLike": {"s3:prefix": [f"{PREFIX}*"]}}}]}
    # The group starts only once its pods can get credentials (its association's guard, created after the
    # association), and after its revision is uploaded.
    group = example.resource("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", "llama-405b-leaderworkerset")
    assert {"kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding::"
            "weights-storage-llama-405b-read-admission-binding",
            "kubernetes:core/v1:ServiceAccount::llama-405b-serving-account",
            "kubernetes:batch/v1:Job::llama-405b-weights-stage"} <= set(group["options"]["dependsOn"])


def test_both_ranks_are_admitted_only_with_the_credentials_eks_injects(example):
    for spec in _templates(example):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": spec}
        # The leader's StatefulSet and the workers' retry a refused pod; one admitted without would never recover.
        (refused,) = denials(example.manifests, "llm-serving", pod)
        assert "llm-serving/llama-405b-vllm" in refused
        assert denials(example.manifests, "llm-serving", mutated(pod)) == []


def test_the_headless_workers_may_reach_the_pod_identity_agent_and_s3(example):
    # The serving fence selects the leaders only (component vllm); the group fence admits ranks and DNS.
    fence = example.manifest("NetworkPolicy", "vllm-worker-weights")
    assert fence["spec"] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "vllm-worker"}},
        "policyTypes": ["Egress"],
        "egress": [
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                     "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
             "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}, {"ipBlock": {"cidr": "fd00:ec2::23/128"}}],
             "ports": [{"protocol": "TCP", "port": 80}]},
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
             "ports": [{"protocol": "TCP", "port": 443}]},
        ],
    }
    worker_labels = example.manifest("LeaderWorkerSet", MODEL)["spec"]["leaderWorkerTemplate"][
        "workerTemplate"]["metadata"]["labels"]
    assert worker_labels["app.kubernetes.io/component"] == "vllm-worker"


def test_every_object_validates_and_the_policy_pack_passes(example):
    # What S3 changes against the EFS render (whose every object test_multinode_example validates).
    changed = [example.manifest("NetworkPolicy", "vllm-worker-weights"),
               example.manifest("ServiceAccount", "llama-405b-vllm")]
    assert [e for m in changed for e in reference.kubernetes_object_errors(m, "1.34")] == []
    assert reference.custom_resource_errors(example.manifest("LeaderWorkerSet", MODEL)) == []
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


def test_no_worker_fence_without_groups_or_without_s3():
    common = {"serving_namespace": "llm-serving", "model_selector": {"app.kubernetes.io/component": "vllm"},
              "port": 8000, "edge_namespace": "envoy-gateway-system", "edge_pod_selector": {"app": "envoy"},
              "prometheus_namespace": "monitoring", "prometheus_pod_selector": {"app": "prometheus"},
              "staging_job_selector": {"app.kubernetes.io/component": "stage-weights"}}
    workers = {"app.kubernetes.io/component": "vllm-worker"}
    names = [[p["metadata"]["name"] for p in network_policies(**common, **extra)] for extra in (
        {"weights_from_s3": True}, {"weights_from_s3": False, "worker_selector": workers},
        {"weights_from_s3": True, "worker_selector": workers})]
    assert names == [["vllm-serving", "weights-staging"], ["vllm-serving", "weights-staging"],
                     ["vllm-serving", "weights-staging", "vllm-worker-weights"]]


def test_the_planner_counts_the_whole_checkpoint_on_each_stages_pod(config):
    (model,) = config.models
    figures = planning.model_plan(config, model)
    checkpoint = lookup_model(model.model_id).weight_bytes
    assert checkpoint == 811_706_777_600
    # 756 GiB at 2,000 MiB/s on each of the two pods at once, not half of it (388 s, not 194 s).
    assert figures.weights_load_seconds == math.ceil(checkpoint / (2000 * 2**20)) == 388
    assert (figures.cold_start_seconds, figures.startup_budget_seconds) == (628, 1260)
    assert figures.notes[-1] == ("each of the 2 stages' pods reads the whole checkpoint, not its stage's share: "
                                 "the weights term is the checkpoint at the per-pod read speed")
    free, new = planning.cold_starts(config, model, figures)
    assert free.terms() == (("node", 0), ("image pull", 0), ("weights", 388), ("engine init", 173),
                            ("compile", 67), ("ready", 30))
    assert (free.total_seconds, new.total_seconds) == (658, 1258)
    assert planning.scale_down_window(config, model, figures) == 1258


def test_every_stage_reads_the_whole_checkpoint_on_every_backend():
    # vLLM keeps every file on every pipeline stage, with its default loader as with the streamer:
    # two stages take as long to read as one pod of the whole model, not half.
    model, instance = "meta-llama/Llama-3.1-405B-Instruct", lookup_instance_type("p5.48xlarge")
    grouped = plan(model, instance, 16384, tp=8, pp=2, storage_read_mib_per_second=2000)
    assert grouped.weights_load_seconds == 388
    assert grouped.notes[-1] == ("each of the 2 stages' pods reads the whole checkpoint, not its stage's share: "
                                 "the weights term is the checkpoint at the per-pod read speed")


def test_the_streamer_config_is_distributed_only_when_asked():
    assert engine.streamer_extra_config(16, 8) == '{"concurrency":16,"memory_limit":8589934592}'
    assert engine.streamer_extra_config(16, 8, distributed=True) == (
        '{"concurrency":16,"distributed":true,"memory_limit":8589934592}')


def _lines(edit) -> list[str]:
    raw = _s3_stack(yaml.safe_load(EXAMPLE.read_text())["config"])
    config = {k.removeprefix("llm-serving:"): v for k, v in raw.items() if k.startswith("llm-serving:")}
    config = {k: v for k, v in config.items() if k not in ("apiKey", "hfToken")}
    edit(config["models"][0])
    valid = validate(ServingStackArgs, {**config, "apiKey": "k" * 32, "hfToken": "hf_" + "t" * 34})
    return [p.line() for p in checks.check(valid)]


def test_refuses_the_efa_image_on_s3_until_it_says_it_keeps_the_streamer():
    assert _lines(lambda m: m["image"].pop("s3Streamer")) == [
        "llm-serving:models[llama-405b].image.s3Streamer: backend s3 streams weights with the Run:ai Model "
        "Streamer's S3 backend, which 123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-openai-efa:v0.33.0-efa1 "
        "is not known to carry (got null; expected true, with an image that has runai-model-streamer[s3] "
        "(vllm/vllm-openai does), or another weightsStorage.backend)"]


def test_refuses_the_sharded_load_format_no_job_here_stages():
    assert _lines(lambda m: m.update(extraArgs=["--load-format=runai_streamer_sharded"])) == [
        "llm-serving:models[llama-405b].extraArgs: sets flags that typed keys own (got "
        "[\"--load-format=runai_streamer_sharded\"]; expected only flags without a key of their own)"]


def test_refuses_a_checkpoint_the_streamer_cannot_read_on_a_group():
    assert _lines(lambda m: m.update(weightsFormat="pytorch")) == [
        "llm-serving:models[llama-405b].weightsFormat: the Run:ai Model Streamer loads safetensors checkpoints "
        "only (got \"pytorch\"; expected safetensors, or another weightsStorage.backend)"]
