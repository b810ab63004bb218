"""Each model's compile cache is its own, on a stack that serves two: on EFS (examples/Pulumi.multi-model.yaml, in the
example's one render, tests/conftest.py `multi_model`) an access point, volume and claim per model, which only that
model's producer Job mounts read-write and only its serving pods mount read-only; on S3 a prefix per model, which
only that model's producer role may write, even for two models whose caches would have the same key. vLLM loads
these artifacts with pickle (vllm/compilation/caching.py): one model's producer must not be able to rewrite another
model's cache."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_serving.platform.args import validate
from llm_serving.stack import parts, planning
from llm_serving.storage import objects
from stacks.config import ServingStackArgs
from stacks.environment import load_stack_file
from stacks.offline.render import RenderResult
from tests.stacks.checks.test_gpu_node_group_checks import BASE
from tests.stacks.checks.test_model_checks import LLAMA_70B, lines
from tests.support import iam_eval, reference, stack_variants

MODELS = ("llama-70b", "llama-8b")
AP = "aws:efs/accessPoint:AccessPoint"


def _pod(result: RenderResult, kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in result.manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found["spec"]["template"]["spec"]


def _producer(result: RenderResult, model: str) -> dict[str, Any]:
    (job,) = [m for m in result.manifests
              if m["kind"] == "Job" and m["metadata"]["name"].startswith(f"{model}-compile-")]
    return job["spec"]["template"]["spec"]


def _claims(pod: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """The pod's claims: volume name -> (claim, read-only)."""
    return {v["name"]: (v["persistentVolumeClaim"]["claimName"], v["persistentVolumeClaim"].get("readOnly", False))
            for v in pod["volumes"] if "persistentVolumeClaim" in v}


def test_each_model_has_its_own_cache_access_point_volume_and_claim(multi_model):
    points = {p["name"]: p["inputs"] for p in multi_model.by_type()[AP] if "-compile-cache-" in p["name"]}
    assert {name: point["rootDirectory"]["path"] for name, point in points.items()} == {
        f"weights-storage-compile-cache-{m}": f"/llm-serving-compile-cache/{m}" for m in MODELS}
    for model in MODELS:
        volume = multi_model.manifest("PersistentVolume", f"llm-serving-{model}-compile-cache")
        # Through the model's own access point, and bindable by the model's own claim only.
        assert volume["spec"]["csi"]["volumeHandle"] == (
            f"weights-storage-file-system-id::weights-storage-compile-cache-{model}-id")
        assert volume["spec"]["claimRef"] == {"namespace": "llm-serving", "name": f"{model}-compile-cache"}
        claim = multi_model.manifest("PersistentVolumeClaim", f"{model}-compile-cache")
        assert claim["spec"]["volumeName"] == f"llm-serving-{model}-compile-cache"
        for manifest in (volume, claim):
            assert reference.kubernetes_object_errors(manifest, "1.34") == [], manifest["kind"]
    # The old shared claim is gone: nothing mounts one cache for every model.
    assert not [m for m in multi_model.manifests if m["kind"] == "PersistentVolumeClaim"
                and m["metadata"]["name"] == "compile-cache"]


@pytest.mark.parametrize("model", MODELS)
def test_a_models_cache_volume_and_claim_go_with_its_cache_once_its_pods_are_gone(multi_model, model):
    # Not retained: a pair left in the cluster would fail the create of the next one of the same names (the cache
    # turned on again, the model added back) with AlreadyExists. They hold no data: the volume's reclaim policy is
    # Retain and the directory stays on the file system.
    volume = multi_model.resource("kubernetes:core/v1:PersistentVolume",
                                  f"weights-storage-compile-cache-{model}-volume")
    claim = multi_model.resource("kubernetes:core/v1:PersistentVolumeClaim",
                                f"weights-storage-compile-cache-{model}-claim")
    assert (volume["options"]["retainOnDelete"], claim["options"]["retainOnDelete"]) == (False, False)
    assert multi_model.manifest("PersistentVolume", f"llm-serving-{model}-compile-cache")["spec"][
        "persistentVolumeReclaimPolicy"] == "Retain"
    # The claim's delete waits for every pod that mounts it (pvc-protection): long enough for the slowest to stop.
    graces = [pod["terminationGracePeriodSeconds"] for pod in (_pod(multi_model, "Deployment", model),
                                                                _producer(multi_model, model))]
    assert int(claim["options"]["customTimeouts"]["delete"].removesuffix("s")) > max(graces)


def test_no_models_cache_volume_takes_the_name_the_old_shared_caches_volume_kept():
    # llm-serving-weights-compile-cache: the volume of the cache every model shared before, retained in the
    # cluster of a stack upgraded from then, where a model named `weights` would fail its create.
    assert lines(name="weights", compileCache="shared") == [
        "llm-serving:models[weights].compileCache: no shared compile cache: its cache volume would be named "
        "llm-serving-weights-compile-cache, as the shared cache's volume that a stack upgraded from a release before "
        "per-model caches may still hold (retained, CHANGELOG): give the model another name (got \"shared\"; "
        "expected auto or off, or pin the missing input)"]
    config = validate(ServingStackArgs, {**BASE, "models": [{**LLAMA_70B, "name": "weights"}]})
    assert planning.compile_cache_state(config, config.models[0]) == (False, (
        "its cache volume would be named llm-serving-weights-compile-cache, as the shared cache's volume that a stack "
        "upgraded from a release before per-model caches may still hold (retained, CHANGELOG): give the model "
        "another name"))


@pytest.mark.parametrize("model", MODELS)
def test_a_producer_mounts_only_its_own_models_cache_read_write(multi_model, model):
    pod = _producer(multi_model, model)
    claims = _claims(pod)
    assert claims["compile-cache"] == (f"{model}-compile-cache", False)
    assert claims["weights"] == (f"{model}-weights-ro", True)
    other = next(m for m in MODELS if m != model)
    assert not [c for c, _ in claims.values() if c.startswith(other)]
    (writer,) = pod["containers"]
    writable = [m["name"] for m in writer["volumeMounts"] if not m.get("readOnly")]
    assert sorted(writable) == ["cache", "compile-cache", "shm", "tmp"]  # emptyDirs, and its own cache claim


@pytest.mark.parametrize("model", MODELS)
def test_a_models_serving_pods_mount_only_its_own_cache_read_only(multi_model, model):
    pod = _pod(multi_model, "Deployment", model)
    assert _claims(pod) == {"weights": (f"{model}-weights-ro", True), "compile-cache": (f"{model}-compile-cache", True)}
    (seed,) = pod["initContainers"]
    assert {m["name"]: m.get("readOnly", False) for m in seed["volumeMounts"]} == {
        "compile-cache": True, "compile-cache-sync": True, "cache": False, "tmp": False}
    assert all(m["name"] != "compile-cache" for m in pod["containers"][0]["volumeMounts"])


def test_the_gpu_nodes_write_only_through_the_cache_access_points_and_staging_through_none(multi_model):
    (policy,) = multi_model.by_type()["aws:efs/fileSystemPolicy:FileSystemPolicy"]
    statements = {s["Sid"]: s for s in json.loads(policy["inputs"]["policy"])["Statement"]}
    points = "arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/weights-storage-compile-cache"
    caches = sorted(f"{points}-{m}-id" for m in MODELS)
    assert statements["CompileCacheWrites"]["Condition"]["StringEquals"] == {
        "elasticfilesystem:AccessPointArn": caches}
    assert statements["DenyServingWrites"]["Condition"] == {"StringNotEquals": {
        "elasticfilesystem:AccessPointArn": caches}}
    assert statements["DenyStagingCompileCacheWrites"]["Condition"] == {"StringEquals": {
        "elasticfilesystem:AccessPointArn": caches}}
    assert statements["DenyStagingWithoutAnAccessPoint"]["Principal"] == statements["StagingMountsAndWrites"][
        "Principal"]


# --- the file-system policy, as objects.file_system_policy writes it --------------------------------------------

CACHE_A = "arn:aws:elasticfilesystem:us-east-1:1:access-point/fsap-a"
CACHE_B = "arn:aws:elasticfilesystem:us-east-1:1:access-point/fsap-b"
SERVING_AP = "arn:aws:elasticfilesystem:us-east-1:1:access-point/fsap-s"


def test_gpu_nodes_may_write_only_through_the_cache_access_points():
    statements = {s["Sid"]: s for s in objects.file_system_policy(
        "arn:fs", reader_role_arns=["arn:gpu"], writer_role_arn="arn:staging", serving_access_point_arns=[SERVING_AP],
        compile_cache_access_point_arns=[CACHE_B, CACHE_A])["Statement"]}
    # The GPU nodes' writes are denied everywhere but through the caches' access points, and they mount only
    # through the serving access point or the caches'.
    assert statements["DenyServingWrites"]["Condition"] == {
        "StringNotEquals": {"elasticfilesystem:AccessPointArn": [CACHE_A, CACHE_B]}}
    assert statements["DenyServingOutsideItsAccessPoints"]["Condition"] == {
        "StringNotEquals": {"elasticfilesystem:AccessPointArn": [CACHE_A, CACHE_B, SERVING_AP]}}
    assert statements["CompileCacheWrites"] == {
        "Sid": "CompileCacheWrites", "Effect": "Allow", "Principal": {"AWS": ["arn:gpu"]},
        "Action": "elasticfilesystem:ClientWrite", "Resource": "arn:fs",
        "Condition": {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"},
                      "StringEquals": {"elasticfilesystem:AccessPointArn": [CACHE_A, CACHE_B]}}}
    plain = {s["Sid"]: s for s in objects.file_system_policy(
        "arn:fs", reader_role_arns=["arn:gpu"], writer_role_arn="arn:staging",
        serving_access_point_arns=[SERVING_AP])["Statement"]}
    assert "CompileCacheWrites" not in plain
    assert "Condition" not in plain["DenyServingWrites"]  # without a cache the GPU nodes never write


def test_the_staging_role_writes_no_cache_neither_through_its_access_points_nor_from_the_root():
    # Write access through a cache access point is the producer's identity's alone (the GPU nodes' role): the
    # staging role is denied writes through them, and any mount without an access point, which would otherwise
    # reach every cache's directory from the file system's root.
    statements = {s["Sid"]: s for s in objects.file_system_policy(
        "arn:fs", reader_role_arns=["arn:gpu"], writer_role_arn="arn:staging", serving_access_point_arns=[SERVING_AP],
        compile_cache_access_point_arns=[CACHE_A, CACHE_B])["Statement"]}
    assert statements["DenyStagingCompileCacheWrites"] == {
        "Sid": "DenyStagingCompileCacheWrites", "Effect": "Deny", "Principal": {"AWS": "arn:staging"},
        "Action": "elasticfilesystem:ClientWrite", "Resource": "arn:fs",
        "Condition": {"StringEquals": {"elasticfilesystem:AccessPointArn": [CACHE_A, CACHE_B]}}}
    assert statements["DenyStagingWithoutAnAccessPoint"] == {
        "Sid": "DenyStagingWithoutAnAccessPoint", "Effect": "Deny", "Principal": {"AWS": "arn:staging"},
        "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"], "Resource": "arn:fs",
        "Condition": {"Null": {"elasticfilesystem:AccessPointArn": "true"}}}
    # Its own claims still mount through the access points the driver provisions for them (efs-ap).
    assert statements["StagingMountsAndWrites"]["Effect"] == "Allow"
    assert objects.storage_class_parameters(file_system_id="fs", uid=1, gid=1, base_path="/b")[
        "provisioningMode"] == "efs-ap"


# --- on S3 --------------------------------------------------------------------------------------------------------

BUCKET_ARN = "arn:aws:s3:::llm-prod-weights-123456789012-us-east-1"
TWINS = ("llama-70b", "llama-70b-canary")


def _allowed(policy: dict[str, Any], action: str, arn: str) -> bool:
    """Whether `policy` allows `action` on `arn` for a request without conditional headers (tests/support/iam_eval)."""
    return iam_eval.allowed(policy, action, arn)


def test_twin_models_share_every_input_of_the_key_but_not_the_prefix(variants_dir):
    config = load_stack_file(stack_variants.prod_s3_with_twin_models(variants_dir))[1]
    keys = {m.name: planning.compile_cache_wiring(config, m) for m in config.models}
    assert tuple(keys) == TWINS
    assert keys[TWINS[0]].relative_dir() == keys[TWINS[1]].relative_dir()
    assert [keys[m].object_prefix() for m in TWINS] == [
        f"compile-cache/{m}/{keys[m].relative_dir()}/" for m in TWINS]


@pytest.mark.parametrize("model", TWINS)
def test_a_producer_role_writes_only_its_own_models_prefix(variants_dir, model):
    config = load_stack_file(stack_variants.prod_s3_with_twin_models(variants_dir))[1]
    access = {a.name: a for a in parts.weights_bucket(config).access}
    prefixes = {m: planning.compile_cache_wiring(config, next(x for x in config.models if x.name == m)).object_prefix()
                for m in TWINS}
    other = next(m for m in TWINS if m != model)
    producer = access[f"{model}-compile"].policy(BUCKET_ARN)
    reader = access[f"{model}-read"].policy(BUCKET_ARN)
    own, theirs = f"{BUCKET_ARN}/{prefixes[model]}", f"{BUCKET_ARN}/{prefixes[other]}"
    assert _allowed(producer, "s3:PutObject", own + "objects/e1/rank_0_0/model")
    for key in ("objects/e1/rank_0_0/model", ".llm-serving-complete", ".llm-serving-lock"):
        assert not _allowed(producer, "s3:PutObject", theirs + key), key
    assert not _allowed(producer, "s3:DeleteObject", theirs + ".llm-serving-lock")
    # The serving pods read their own model's cache, never write one, never read the other's.
    assert _allowed(reader, "s3:GetObject", own + ".llm-serving-complete")
    assert not _allowed(reader, "s3:GetObject", theirs + ".llm-serving-complete")
    assert not _allowed(reader, "s3:PutObject", own + "objects/e1/rank_0_0/model")
