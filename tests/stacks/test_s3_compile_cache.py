"""examples/Pulumi.prod-s3.yaml's shared compile cache: the producer Job with its own account, role, policy and
Pod Identity association, the seed init container reading the cache with the serving role, the transfer
script's ConfigMap and the fences, exactly; and the planner counting the hit on S3."""

from __future__ import annotations

import json

import pytest

from llm_serving.serving import cache_sync
from llm_serving.serving.compile_cache import SYNC_SOURCE, producer_script, seed_script, sync_configmap_name
from llm_serving.stack import planning
from llm_serving.stack import timing as stack_timing
from stacks import environment
from stacks.cli import plan as plan_cli
from stacks.config.files import PROJECT_DIR
from stacks.offline import render
from tests.conftest import render_file
from tests.stacks.test_s3_example import S3_PREFIX_LIST_BLOCKS

EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-s3.yaml"
BUCKET = "llm-prod-weights-123456789012-us-east-1"
ARN = f"arn:aws:s3:::{BUCKET}"
WEIGHTS = "meta-llama/Llama-3.1-70B-Instruct/1605565b47bb9346c5515c34102e054115b4f98b/"



def _key():
    from llm_serving.stack import planning
    from stacks.environment import load_stack_file

    config = load_stack_file(EXAMPLE)[1]
    key = planning.compile_cache_wiring(config, config.models[0])
    assert key is not None
    return key


# The model's own prefix, then a directory named after everything the cache depends on, the engine flags' digest
# last (compile_cache.CompileCacheKey).
CACHE = _key().object_prefix()
assert CACHE.startswith(f"compile-cache/llama-70b/{WEIGHTS}vllm-0.33.0/tp4-NVIDIA-H100-80GB-HBM3-")
JOB = _key().job_name("llama-70b")
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation::weights-storage-llama-70b-compile-pod-identity"
# The association's admission guard (policy, then binding), created after it: what the producer waits for.
GUARD_POLICY = ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy::"
                "weights-storage-llama-70b-compile-admission-policy")
GUARD = ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding::"
         "weights-storage-llama-70b-compile-admission-binding")
SYNC_CONFIGMAP = "kubernetes:core/v1:ConfigMap::compile-cache-sync"
SYNC_MOUNT = {"name": "compile-cache-sync", "mountPath": "/etc/llm-serving/compile-cache", "readOnly": True}
SYNC_VOLUME = {"name": "compile-cache-sync", "configMap": {"name": sync_configmap_name()}}
REGION_AND_BUCKET = [{"name": "AWS_REGION", "value": "us-east-1"}, {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"},
                     {"name": "LLM_SERVING_CACHE_BUCKET", "value": BUCKET}]


@pytest.fixture(scope="module")
def example() -> render.RenderResult:
    return render_file(EXAMPLE)


@pytest.fixture(scope="module")
def key():
    config = environment.load_stack_file(EXAMPLE)[1]
    return planning.compile_cache_wiring(config, config.models[0])


def test_auto_shares_the_cache_on_s3_under_the_keys_prefix(key):
    config = environment.load_stack_file(EXAMPLE)[1]
    assert planning.compile_cache_state(config, config.models[0]) == (True, "shared")
    assert (key.in_bucket, key.object_prefix(), key.claim_name) == (True, CACHE, None)


def test_the_producer_job_streams_and_uploads_with_its_own_account_on_a_gpu_node(example, key):
    spec = example.manifest("Job", JOB)["spec"]
    # A new node (300 s) and an image pull (300 s) at worst, then one start within the startup budget; a lock
    # outlives its writer by the kubelet's kill (60 s).
    config = environment.load_stack_file(EXAMPLE)[1]
    timeouts = stack_timing.producer_timeouts(config, config.models[0])
    budget = planning.model_plan(config, config.models[0]).startup_budget_seconds
    assert (timeouts.deadline_seconds, timeouts.stale_lock_seconds) == (600 + budget, 660 + budget)
    assert (spec["backoffLimit"], spec["podReplacementPolicy"], spec["activeDeadlineSeconds"]) == (
        2, "Failed", timeouts.deadline_seconds)
    pod = spec["template"]["spec"]
    (writer,) = pod["containers"]
    serving = example.manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]["containers"][0]
    assert pod["serviceAccountName"] == "llama-70b-compile-cache"
    assert writer["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert writer["command"] == ["/bin/sh", "-c", producer_script(key, serving["args"],
                                                                   stale_lock_seconds=timeouts.stale_lock_seconds)]
    assert f"vllm serve s3://{BUCKET}/{WEIGHTS} " in writer["command"][2]
    assert writer["env"][-3:] == REGION_AND_BUCKET
    assert "VLLM_API_KEY" not in [e["name"] for e in writer["env"]]
    assert writer["volumeMounts"] == [{"name": "cache", "mountPath": "/var/cache/vllm"},
                                      {"name": "shm", "mountPath": "/dev/shm"},
                                      {"name": "tmp", "mountPath": "/tmp"}, SYNC_MOUNT]
    assert [v["name"] for v in pod["volumes"]] == ["shm", "cache", "tmp", "compile-cache-sync"]
    assert pod["volumes"][-1] == SYNC_VOLUME
    # Credentials only once its guard is in force and then its association exists; the script only once its
    # ConfigMap does; fenced first.
    depends = example.wiring["kubernetes:batch/v1:Job::llama-70b-compile-cache"]["dependsOn"]
    assert GUARD_POLICY in example.wiring[ASSOCIATION]["dependsOn"]
    assert {GUARD, ASSOCIATION, SYNC_CONFIGMAP,
            "kubernetes:networking.k8s.io/v1:NetworkPolicy::compile-cache-network-policy",
            "kubernetes:core/v1:ServiceAccount::llama-70b-compile-cache-account"} <= set(depends)
    assert example.manifest("ServiceAccount", "llama-70b-compile-cache")["automountServiceAccountToken"] is False


def test_the_producer_role_writes_only_the_cache_prefix_and_is_bound_to_the_producer_alone(example):
    policy = json.loads(example.resource("aws:iam/rolePolicy:RolePolicy", "weights-storage-llama-70b-compile-policy")
                        ["inputs"]["policy"])
    assert policy == {"Version": "2012-10-17", "Statement": [
        {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject", "Resource": [f"{ARN}/{WEIGHTS}*"]},
        {"Sid": "WriteCompileCache", "Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"],
         "Resource": [f"{ARN}/{CACHE}*"]},
        {"Sid": "OnlyConditionalLockWrites", "Effect": "Deny", "Action": "s3:PutObject",
         "Resource": f"{ARN}/{CACHE}.llm-serving-lock",
         "Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}}},
        {"Sid": "OnlyCreateTheMarker", "Effect": "Deny", "Action": "s3:PutObject",
         "Resource": f"{ARN}/{CACHE}.llm-serving-complete", "Condition": {"Null": {"s3:if-none-match": "true"}}},
        {"Sid": "NeverOverwriteTheMarker", "Effect": "Deny", "Action": "s3:PutObject",
         "Resource": f"{ARN}/{CACHE}.llm-serving-complete", "Condition": {"Null": {"s3:if-match": "false"}}},
        {"Sid": "ReleaseOwnLock", "Effect": "Allow", "Action": "s3:DeleteObject",
         "Resource": f"{ARN}/{CACHE}.llm-serving-lock",
         "Condition": {"Null": {"s3:if-match": "false"}, "StringNotEquals": {"s3:if-match": "*"}}},
        {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": ARN,
         "Condition": {"StringLike": {"s3:prefix": [f"{CACHE}*", f"{WEIGHTS}*"]}}}]}
    association = example.resource("aws:eks/podIdentityAssociation:PodIdentityAssociation",
                                   "weights-storage-llama-70b-compile-pod-identity")
    assert association["inputs"]["serviceAccount"] == "llama-70b-compile-cache"
    assert association["inputs"]["roleArn"] == "arn:aws:iam::123456789012:role/weights-storage-llama-70b-compile-role"
    assert "aws:iam/rolePolicy:RolePolicy::weights-storage-llama-70b-compile-policy" in \
        association["options"]["dependsOn"]
    role = example.resource("aws:iam/role:Role", "weights-storage-llama-70b-compile-role")["inputs"]
    assert role["description"] == ("Produces the compile cache in the bucket for llm-serving/llama-70b-compile-cache "
                                   "of llm-prod")


def test_every_replica_seeds_from_the_bucket_with_the_read_only_role(example, key):
    pod = example.manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]
    (seed,) = pod["initContainers"]
    assert (seed["name"], seed["image"], pod["serviceAccountName"]) == (
        "compile-cache-seed", "vllm/vllm-openai:v0.33.0", "llama-70b-vllm")
    assert seed["command"] == ["/bin/sh", "-c", seed_script(key)]
    assert seed["volumeMounts"] == [SYNC_MOUNT, {"name": "cache", "mountPath": "/var/cache/vllm"},
                                    {"name": "tmp", "mountPath": "/tmp"}]  # no weights volume on S3
    assert seed["env"][-3:] == REGION_AND_BUCKET
    assert pod["volumes"][-1] == SYNC_VOLUME
    assert SYNC_CONFIGMAP in example.wiring["kubernetes:apps/v1:Deployment::llama-70b-deployment"]["dependsOn"]


def test_the_transfer_script_ships_immutable_and_named_by_its_content(example):
    configmap = example.manifest("ConfigMap", sync_configmap_name())
    assert configmap["data"] == {"cache_sync.py": SYNC_SOURCE}
    assert configmap["immutable"] is True
    assert SYNC_SOURCE == open(cache_sync.__file__).read()


def test_the_producer_reaches_the_pod_identity_agent_and_s3_and_nothing_in(example):
    spec = example.manifest("NetworkPolicy", "compile-cache")["spec"]
    assert "ingress" not in spec and spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"][1:] == [
        {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}, {"ipBlock": {"cidr": "fd00:ec2::23/128"}}],
         "ports": [{"protocol": "TCP", "port": 80}]},
        {"to": S3_PREFIX_LIST_BLOCKS, "ports": [{"protocol": "TCP", "port": 443}]}]
    # Fenced to S3 like the serving pods: the example's GPU subnets route S3 through a gateway endpoint.
    assert spec["egress"][-1] == example.manifest("NetworkPolicy", "vllm-serving")["spec"]["egress"][-1]


def test_the_planner_shows_the_cache_hit_on_s3(capsys):
    assert plan_cli.main(["--stack", str(EXAMPLE), "--model", "llama-70b"]) == 0
    out = capsys.readouterr().out
    assert "torch.compile               67 s cold; 10 s from the shared cache, 57 s saved per replica\n" in out
    assert ("compile-cache producer      1 Job(s), each one replica's GPUs while an `up` that changes its key "
            "compiles: 3 nodes at peak with the rollouts' surge replicas\n") in out
