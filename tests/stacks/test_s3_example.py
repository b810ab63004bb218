"""examples/Pulumi.prod-s3.yaml: prod with its weights in an S3 bucket, streamed by vLLM's Run:ai Model
Streamer. The bucket and its guards, the roles and Pod Identity associations, the staging Job, the
vLLM args and env, the fences and the planner's figures, exactly; and the preview's refusals."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llm_serving.serving import offload_init_seconds, weights
from llm_serving.stack import planning
from llm_serving.stack.rules import platform
from stacks import checks, environment
from stacks.config import ClusterMode, ServingStackArgs, StorageBackend
from stacks.config.files import PROJECT_DIR
from stacks.offline import mocks, render
from tests.conftest import render_file
from tests.support import reference

EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-s3.yaml"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "prod-s3"
BUCKET = "llm-prod-weights-123456789012-us-east-1"
BUCKET_ARN = f"arn:aws:s3:::{BUCKET}"
PREFIX = "meta-llama/Llama-3.1-70B-Instruct/1605565b47bb9346c5515c34102e054115b4f98b/"
# The render's S3 prefix list for us-east-1, in address order: what the streaming pods' 443 rule names.
S3_PREFIX_LIST_BLOCKS = [{"ipBlock": {"cidr": cidr}} for cidr in (
    "3.5.0.0/19", "16.15.176.0/20", "16.15.192.0/18", "16.182.0.0/16", "18.34.0.0/19", "18.34.232.0/21",
    "44.192.134.240/28", "44.192.140.64/28", "52.216.0.0/15", "54.231.0.0/16")]


def _cache_prefix() -> str:
    from llm_serving.stack import planning
    from stacks.environment import load_stack_file

    config = load_stack_file(EXAMPLE)[1]
    key = planning.compile_cache_wiring(config, config.models[0])
    assert key is not None
    return key.object_prefix()


# The model's shared compile cache prefix: its name, then the weights, engine, TP, GPU and the flags' digest.
CACHE_PREFIX = _cache_prefix()
assert CACHE_PREFIX.startswith(f"compile-cache/llama-70b/{PREFIX}vllm-0.33.0/tp4-NVIDIA-H100-80GB-HBM3-")
TAGS = {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod"}
GUARDS = ["aws:s3/bucketOwnershipControls:BucketOwnershipControls::weights-storage-ownership",
          "aws:s3/bucketPolicy:BucketPolicy::weights-storage-policy",
          "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock::weights-storage-public-access-block",
          "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration::"
          "weights-storage-encryption",
          "aws:s3/bucketVersioning:BucketVersioning::weights-storage-versioning"]


@pytest.fixture(scope="module")
def example() -> render.RenderResult:
    return render_file(EXAMPLE)


@pytest.fixture(scope="module")
def config() -> ServingStackArgs:
    return environment.load_stack_file(EXAMPLE)[1]


def _resource(result: render.RenderResult, type_: str, name: str) -> dict[str, Any]:
    return result.resource(type_, name)


def test_example_render_matches_its_golden(example, tmp_path):
    manifests, resources = render.write(example, tmp_path)
    assert manifests.read_text() == (GOLDEN / "manifests.yaml").read_text(), "run `make golden` after review"
    assert resources.read_text() == (GOLDEN / "resources.json").read_text(), "run `make golden` after review"


def test_the_bucket_is_encrypted_versioned_private_owner_enforced_retained_and_protected(example):
    bucket = _resource(example, "aws:s3/bucket:Bucket", "weights-storage-bucket")
    assert bucket["inputs"] == {"bucket": BUCKET, "tags": {**TAGS, "Name": "llm-prod-weights-storage"}}
    assert (bucket["options"]["protect"], bucket["options"]["retainOnDelete"]) == (True, True)
    inputs = {r["type"].split(":")[-1]: r["inputs"] for r in example.resources if r["type"].startswith("aws:s3/")}
    assert inputs["BucketPublicAccessBlock"] == {"bucket": BUCKET, "blockPublicAcls": True, "blockPublicPolicy": True,
                                                 "ignorePublicAcls": True, "restrictPublicBuckets": True}
    assert inputs["BucketOwnershipControls"] == {"bucket": BUCKET, "rule": {"objectOwnership": "BucketOwnerEnforced"}}
    assert inputs["BucketServerSideEncryptionConfiguration"] == {"bucket": BUCKET, "rules": [
        {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}, "bucketKeyEnabled": True}]}
    assert inputs["BucketVersioning"] == {"bucket": BUCKET, "versioningConfiguration": {"status": "Enabled"}}
    assert sorted(inputs) == ["Bucket", "BucketOwnershipControls", "BucketPolicy", "BucketPublicAccessBlock",
                              "BucketServerSideEncryptionConfiguration", "BucketVersioning"]


def test_the_bucket_policy_refuses_every_request_without_tls(example):
    policy = _resource(example, "aws:s3/bucketPolicy:BucketPolicy", "weights-storage-policy")
    assert json.loads(policy["inputs"]["policy"]) == {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [BUCKET_ARN, f"{BUCKET_ARN}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}
    # Applied only after the public access block and the other guards.
    assert policy["options"]["dependsOn"] == ["aws:s3/bucket:Bucket::weights-storage-bucket",
                                              *[g for g in GUARDS if "bucketPolicy" not in g]]


def test_the_staging_role_may_write_and_the_serving_role_only_read_the_revision_prefix(example):
    def policy(role: str) -> dict[str, Any]:
        return json.loads(_resource(example, "aws:iam/rolePolicy:RolePolicy",
                                    f"weights-storage-llama-70b-{role}-policy")["inputs"]["policy"])
    listing = {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": BUCKET_ARN,
               "Condition": {"StringLike": {"s3:prefix": [f"{PREFIX}*"]}}}
    # The serving role also reads (never writes) the model's shared compile cache.
    assert policy("read") == {"Version": "2012-10-17", "Statement": [
        {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject", "Resource": [f"{BUCKET_ARN}/{PREFIX}*"]},
        {"Sid": "ReadCompileCache", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": [f"{BUCKET_ARN}/{CACHE_PREFIX}*"]},
        {**listing, "Condition": {"StringLike": {"s3:prefix": [f"{CACHE_PREFIX}*", f"{PREFIX}*"]}}}]}
    assert policy("stage") == {"Version": "2012-10-17", "Statement": [
        {"Sid": "StageWeights", "Effect": "Allow",
         "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
         "Resource": [f"{BUCKET_ARN}/{PREFIX}*"]}, listing]}
    trust = json.loads(_resource(example, "aws:iam/role:Role", "weights-storage-llama-70b-read-role")["inputs"]
                       ["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Statement"][0]["Condition"] == {"StringEquals": {
        "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/llm-prod",
        "aws:RequestTag/kubernetes-namespace": "llm-serving",
        "aws:RequestTag/kubernetes-service-account": "llama-70b-vllm"}}


def test_each_role_is_bound_to_one_service_account_by_pod_identity_then_guarded(example):
    for role, account in (("read", "llama-70b-vllm"), ("stage", "llama-70b-stage-weights")):
        association = _resource(example, "aws:eks/podIdentityAssociation:PodIdentityAssociation",
                                f"weights-storage-llama-70b-{role}-pod-identity")
        assert association["inputs"] == {
            "clusterName": "llm-prod", "namespace": "llm-serving", "serviceAccount": account, "tags": TAGS,
            "roleArn": f"arn:aws:iam::123456789012:role/weights-storage-llama-70b-{role}-role"}
        # After the role's policy, the bucket's guards and the account's admission guard, which is then in force
        # before the association can take effect: no pod of the account is admitted without its credentials.
        admission = [f"kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy{kind}::"
                     f"weights-storage-llama-70b-{role}-admission-{name}"
                     for kind, name in (("", "policy"), ("Binding", "binding"))]
        assert association["options"]["dependsOn"] == sorted([
            f"aws:iam/role:Role::weights-storage-llama-70b-{role}-role",
            f"aws:iam/rolePolicy:RolePolicy::weights-storage-llama-70b-{role}-policy", *GUARDS, *admission])
        policy = _resource(example, "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
                           f"weights-storage-llama-70b-{role}-admission-policy")
        assert policy["options"]["dependsOn"] == [
            f"aws:iam/rolePolicy:RolePolicy::weights-storage-llama-70b-{role}-policy"]
        assert example.manifest("ServiceAccount", account)["automountServiceAccountToken"] is False


def test_the_staging_job_uploads_the_revision_with_its_own_account_and_no_volume(example):
    job = next(m for m in example.manifests if m["kind"] == "Job"
               and m["metadata"]["labels"]["app.kubernetes.io/component"] == "stage-weights")
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["/bin/sh", "-c", weights.STAGE_S3_SCRIPT]
    assert spec["serviceAccountName"] == "llama-70b-stage-weights"
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert [v["name"] for v in spec["volumes"]] == ["requirements", "scratch", "home", "tmp", "hf-token"]
    assert spec["volumes"][1] == {"name": "scratch", "emptyDir": {"sizeLimit": "64Gi"}}
    assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "68Gi"},
                                      "limits": {"memory": "8Gi", "ephemeral-storage": "68Gi"}}
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "MODEL_ID": "meta-llama/Llama-3.1-70B-Instruct", "REVISION": "1605565b47bb9346c5515c34102e054115b4f98b",
        "BUCKET": BUCKET, "PREFIX": PREFIX, "SCRATCH": "/var/stage", "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1", "HF_HUB_DISABLE_TELEMETRY": "1", "HOME": "/home/stage",
        "HF_HOME": "/home/stage/huggingface",
        "TMPDIR": "/tmp", "HF_TOKEN_PATH": "/var/run/secrets/huggingface/token"}
    options = _resource(example, "kubernetes:batch/v1:Job", "llama-70b-weights-stage")["options"]
    assert ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding::"
            "weights-storage-llama-70b-stage-admission-binding") in options["dependsOn"]
    assert not [m for m in example.manifests if m["kind"] == "PersistentVolumeClaim"]
    # EKS injects Pod Identity credentials at a pod's admission: a pod admitted before the association took
    # effect never gets them, so every retry is a new pod (never a restart in the same one).
    assert (spec["restartPolicy"], job["spec"]["podReplacementPolicy"]) == ("Never", "Failed")
    assert job["spec"]["backoffLimit"] >= 1


def test_vllm_streams_from_the_prefix_with_the_streamer_settings_and_mounts_no_weights(example, config):
    deployment = example.manifest("Deployment", "llama-70b")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == f"s3://{BUCKET}/{PREFIX}"
    assert args[args.index("--load-format") + 1] == "runai_streamer"
    # TP 4: the pod's ranks split the files and read the checkpoint once, not four times (engine.py).
    assert json.loads(args[args.index("--model-loader-extra-config") + 1]) == {
        "concurrency": 32, "distributed": True, "memory_limit": 16 * 1024**3}
    assert reference.vllm_flag_errors(args) == []
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["AWS_REGION"], env["AWS_DEFAULT_REGION"], env["HF_HUB_OFFLINE"]) == ("us-east-1", "us-east-1", "1")
    assert pod["serviceAccountName"] == "llama-70b-vllm"
    # No weights volume: only the pod's own disks and the compile cache's transfer script.
    assert [v["name"] for v in pod["volumes"]] == ["shm", "cache", "tmp", "compile-cache-sync"]
    assert "/models" not in [m["mountPath"] for m in container["volumeMounts"]]
    # The probe and the engine's own timeout follow the plan on S3's read figure.
    plan = planning.model_plan(config, config.models[0])
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == plan.startup_budget_seconds
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == str(plan.startup_budget_seconds)
    options = _resource(example, "kubernetes:apps/v1:Deployment", "llama-70b-deployment")["options"]
    assert ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding::"
            "weights-storage-llama-70b-read-admission-binding") in options["dependsOn"]


def test_serving_pods_and_the_job_reach_the_pod_identity_agent(example):
    agent = {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}, {"ipBlock": {"cidr": "fd00:ec2::23/128"}}],
             "ports": [{"protocol": "TCP", "port": 80}]}
    anywhere = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                "ports": [{"protocol": "TCP", "port": 443}]}
    serving_egress = example.manifest("NetworkPolicy", "vllm-serving")["spec"]["egress"]
    staging_egress = example.manifest("NetworkPolicy", "weights-staging")["spec"]["egress"]
    assert serving_egress[1:] == [agent, {"to": S3_PREFIX_LIST_BLOCKS, "ports": [{"protocol": "TCP", "port": 443}]}]
    # The staging Job also downloads from the Hub and its CDN: any address on 443.
    assert staging_egress[1:] == [anywhere, agent]


def test_with_the_gateway_endpoint_the_serving_pods_reach_only_s3s_prefix_list(example, config):
    assert config.weights_storage.s3.vpc_endpoint is True
    (https,) = [rule for rule in example.manifest("NetworkPolicy", "vllm-serving")["spec"]["egress"]
                if rule["ports"] == [{"protocol": "TCP", "port": 443}]]
    # Exactly the region's list as the preview read it (stacks/offline/mocks.py), each block once.
    assert sorted(block["ipBlock"]["cidr"] for block in https["to"]) == sorted(mocks.S3_PREFIX_LISTS["us-east-1"])
    assert not any(block["ipBlock"]["cidr"] in ("0.0.0.0/0", "::/0") for block in https["to"])


def test_without_the_gateway_endpoint_an_existing_clusters_pods_reach_any_address_on_443(config):
    for vpc_endpoint in (None, False):
        assert not planning.s3_through_gateway_endpoint(_with(config, s3={"vpc_endpoint": vpc_endpoint}))
    assert planning.s3_through_gateway_endpoint(config)


def test_a_created_vpc_has_the_endpoint_so_it_fences_by_default_and_refuses_false(config):
    created = replace(config, cluster=replace(config.cluster, mode=ClusterMode.CREATE))
    assert planning.s3_through_gateway_endpoint(_with(created, s3={"vpc_endpoint": None}))
    assert _lines(_with(created, s3={"vpc_endpoint": None})) == []
    assert _lines(_with(created, s3={"vpc_endpoint": False})) == [
        "llm-serving:weightsStorage.s3.vpcEndpoint: cluster.mode create builds the VPC with an S3 gateway endpoint on "
        "every private route table (got false; expected unset or true)"]


def test_the_planner_adds_a_replica_term_by_term_on_s3s_cited_read_figure(config):
    model = config.models[0]
    plan = planning.model_plan(config, model)
    # No readMibPerSecond: the streamer's S3 benchmark at concurrency 32 (15 GB in 4.88 s) binds, below
    # half of card 0's 100 Gbps (two TP4 replicas per p5) and a quarter of the prefix's 5,500 x 8 MiB GETs/s.
    estimate = planning.s3_read_estimate(config, model)
    assert [(t.name, round(t.mib_per_second, 1)) for t in estimate.terms] == [
        ("streamer", 2931.4), ("node bandwidth", 5960.5), ("prefix requests", 11000.0)]
    assert planning.storage_read_mib_per_second(config, model) == plan.storage_read_mib_per_second == 2931.4
    weights_bytes = planning.model_architecture(model).weight_bytes
    assert plan.weights_load_seconds == math.ceil(weights_bytes / (2931.4 * 2**20)) == 46
    free, new = planning.cold_starts(config, model, plan)
    # A free node holds the pre-pulled image; a replica added while the model serves seeds its compile
    # cache from the bucket (torch.compile 10 s instead of 67 s; CUDA graphs are captured in engine init, 173 s
    # with the filling of the planner's CPU KV tier on top).
    engine = 173 + offload_init_seconds(planning.kv_offload_gib(config, model))
    assert free.terms() == (("node", 0), ("image pull", 0), ("weights", 46), ("engine init", engine),
                            ("compile", 10), ("ready", 30))
    assert new.terms() == (("node", 300), ("image pull", 300), ("weights", 46), ("engine init", engine),
                           ("compile", 10), ("ready", 30))
    assert (free.total_seconds, new.total_seconds) == (86 + engine, 686 + engine)
    # The scale-down window waits as long as adding a replica on a new node takes.
    assert new.total_seconds == planning.replica_add_seconds(config, model, plan) == \
        planning.scale_down_window(config, model, plan)


def test_a_measured_read_figure_overrides_the_cited_one(config):
    measured = _with(config, s3={"read_mib_per_second": 1200.0})
    model = measured.models[0]
    assert planning.model_plan(measured, model).weights_load_seconds == 113
    assert planning.storage_backend_label(measured, model) == (
        "S3 (a bucket of its own) through the Run:ai Model Streamer at concurrency 32, 1,200 MiB/s per pod "
        "(operator's figure)")


def _with(config: ServingStackArgs, **changes: Any) -> ServingStackArgs:
    """The example with weightsStorage.s3 fields or the model's fields replaced (no re-validation: the
    preview's rules are what is under test)."""
    s3 = replace(config.weights_storage.s3, **changes.pop("s3", {}))
    model = replace(config.models[0], **changes.pop("model", {}))
    storage = replace(config.weights_storage, **{"s3": s3})
    return replace(config, **{"weights_storage": storage, "models": [model]})


def _lines(config: ServingStackArgs) -> list[str]:
    return [p.line() for p in checks.check(config) if "s3" in p.path.lower() or "weightsFormat" in p.path]


def test_the_example_passes_the_preview(config):
    assert checks.check(config) == []
    assert config.weights_storage.backend is StorageBackend.S3


def test_needs_a_read_figure_only_where_no_s3_bandwidth_is_cited(config):
    assert _lines(config) == []  # p5.48xlarge: cited
    group = replace(config.gpu_node_group, **{"instance_type": "p5en.48xlarge"})
    assert _lines(replace(config, **{"gpu_node_group": group})) == [
        "llm-serving:weightsStorage.s3.readMibPerSecond: backend s3 plans cold starts, probes and the "
        "scale-down window on the MiB/s one pod streams, and no cited S3 bandwidth of p5en.48xlarge is built in "
        "(got null; expected the measured MiB/s per pod (e.g. 2000), or an instance type of "
        "['p5.48xlarge', 'p5.4xlarge', 'p5e.48xlarge'])"]
    measured = _with(replace(config, **{"gpu_node_group": group}), s3={"read_mib_per_second": 2000.0})
    assert _lines(measured) == []


def test_refuses_an_image_without_the_streamers_s3_backend(config):
    other = replace(config.models[0].image, **{"repository": "registry.example.com/vllm"})
    assert _lines(_with(config, model={"image": other})) == [
        "llm-serving:models[llama-70b].image.s3Streamer: backend s3 streams weights with the Run:ai Model "
        "Streamer's S3 backend, which registry.example.com/vllm:v0.33.0 is not known to carry (got "
        "null; expected true, with an image that "
        "has runai-model-streamer[s3] (vllm/vllm-openai does), or another weightsStorage.backend)"]
    said = replace(other, **{"s3_streamer": True})
    assert _lines(_with(config, model={"image": said})) == []


def test_refuses_streamer_buffers_that_would_take_over_half_the_pods_memory(config):
    # p5.48xlarge, TP 4: the pod's limit is 921 GiB (2,048 GiB x 4/8 x 0.9); every rank holds its own buffer.
    assert _lines(_with(config, s3={"streamer_memory_limit_gib": 115})) == []
    assert _lines(_with(config, s3={"streamer_memory_limit_gib": 116})) == [
        "llm-serving:weightsStorage.s3.streamerMemoryLimitGib: each of the 4 ranks of models[llama-70b] holds this "
        "buffer: 4 x 116 GiB is over half the pod's 921 GiB memory limit, and the pod could be OOM-killed while it "
        "loads (got 116; expected <= 115)"]


def test_refuses_a_checkpoint_the_streamer_cannot_read(config):
    assert _lines(_with(config, model={"weights_format": "gguf"})) == [
        "llm-serving:models[llama-70b].weightsFormat: the Run:ai Model Streamer loads safetensors checkpoints only "
        "(got \"gguf\"; expected safetensors, or another weightsStorage.backend)"]


def test_refuses_a_bucket_in_another_region_than_the_cluster(config):
    elsewhere = _with(config, s3={"bucket_name": "team-weights", "bucket_region": "eu-west-1"})
    assert [p.line() for p in environment.bucket_region_problems(elsewhere, "us-east-1")] == [
        "llm-serving:weightsStorage.s3.bucketRegion: the bucket is in another region than the cluster "
        "(aws:region us-east-1): every cold start would stream across regions (got \"eu-west-1\"; "
        "expected a bucket in us-east-1)"]
    assert environment.bucket_region_problems(elsewhere, "eu-west-1") == []
    assert environment.bucket_region_problems(elsewhere, None) == []  # unknown: preflight's to check


def test_refuses_a_bucket_region_without_a_bucket(config):
    assert _lines(_with(config, s3={"bucket_region": "us-east-1"})) == [
        "llm-serving:weightsStorage.s3.bucketRegion: only describes an existing bucket; the program creates "
        "its bucket in the stack's region (got \"us-east-1\"; expected unset, or with bucketName)"]


def test_refuses_a_bucket_name_s3_would_not_accept(stack_dir):
    text = EXAMPLE.read_text().replace("      streamerConcurrency: 32\n",
                                       "      streamerConcurrency: 32\n      bucketName: Weights_Bucket\n")
    path = stack_dir / "Pulumi.prod-s3.yaml"
    path.write_text(text)
    with pytest.raises(environment.ConfigError) as error:
        environment.load_stack_file(path)
    assert [p.line() for p in error.value.problems] == [
        'llm-serving:weightsStorage.s3.bucketName: not a valid value (got "Weights_Bucket"; expected a string '
        "matching ^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$)"]


def test_refuses_a_missing_existing_bucket_and_one_in_another_region():
    assert [p.line() for p in platform.existing_bucket_problems("team-weights", None, "us-east-1")] == [
        "llm-serving:weightsStorage.s3.bucketName: no such bucket, or the deploying role cannot read it "
        "(got \"team-weights\"; expected an existing bucket in this account and region, or unset to create one)"]
    assert [p.line() for p in platform.existing_bucket_problems("team-weights", "eu-west-1", "us-east-1")] == [
        "llm-serving:weightsStorage.s3.bucketName: the bucket is in eu-west-1, the cluster in us-east-1: every cold "
        "start would stream across regions (got \"team-weights\"; expected a bucket in us-east-1)"]
    assert platform.existing_bucket_problems("team-weights", "us-east-1", "us-east-1") == []
