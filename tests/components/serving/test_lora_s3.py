"""LoRA adapters from an S3 prefix pinned by its SHA256SUMS manifest's SHA-256: the config's one-of and its refusals,
the staging Job's program against S3 answered by botocore's Stubber (the repository has no local S3 server; the
weights' S3 staging is tested the same way, test_stage_s3.py), the Job and the role that reads the prefix at the
component tier. The dev variant that renders one such adapter is tests/stacks/test_lora_render.py."""

from __future__ import annotations

import hashlib
import io
import json
import runpy
import sys
import types
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import boto3
import pydantic
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from llm_serving import serving
from llm_serving.edge import object_storage_egress
from llm_serving.serving import engine, stage_adapter, stage_scripts, stage_verify, weights
from llm_serving.storage import AdapterSources, AdapterSourcesArgs, buckets
from tests.components import test_iam_documents as iam_documents
from tests.support import iam_eval
from tests.support.components import find, run

BUCKET = "example-adapters"
PREFIX = "llama-3.1-8b/support-v1/"
BASE = {"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "r": 16,
        "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"], "bias": "none"}
FILES = {"adapter_config.json": json.dumps(BASE).encode(), "adapter_model.safetensors": b"\x01" * 4096}


def sums(files: dict[str, bytes]) -> bytes:
    """The manifest as `sha256sum` writes it."""
    return "".join(f"{hashlib.sha256(c).hexdigest()}  {n}\n" for n, c in sorted(files.items())).encode()


MANIFEST = sums(FILES)
PIN = hashlib.sha256(MANIFEST).hexdigest()


# --- config ------------------------------------------------------------------------------------------------------


def adapter(**values: Any) -> serving.LoraAdapterArgs:
    return pydantic.TypeAdapter(serving.LoraAdapterArgs).validate_python({"name": "support-v1", **values})


def test_an_adapter_from_s3_is_staged_by_its_manifests_digest():
    found = adapter(s3={"uri": f"s3://{BUCKET}/{PREFIX}", "manifestSha256": PIN})
    assert found.s3 is not None and (found.s3.bucket, found.s3.prefix) == (BUCKET, PREFIX)
    assert serving.staged_adapter_path(found) == f"/models/.lora/.s3/{PIN}"


@pytest.mark.parametrize(("values", "reason"), [
    ({"modelId": "org/sql-lora", "revision": "a" * 40, "s3": {"uri": f"s3://{BUCKET}/{PREFIX}", "manifestSha256": PIN}},
     "names two sources"),
    ({}, "names no source"),
    ({"modelId": "org/sql-lora"}, "modelId needs revision"),
    ({"revision": "a" * 40}, "revision needs modelId"),
    ({"s3": {"uri": f"https://{BUCKET}/{PREFIX}", "manifestSha256": PIN}}, "must be s3://<bucket>/<prefix>/"),
    ({"s3": {"uri": f"s3://{BUCKET}/", "manifestSha256": PIN}}, "names a whole bucket"),
    ({"s3": {"uri": f"s3://{BUCKET}/llama/support-v1", "manifestSha256": PIN}}, "must end with '/'"),
    ({"s3": {"uri": f"s3://Example_Adapters/{PREFIX}", "manifestSha256": PIN}}, "is not an S3 bucket name"),
    ({"s3": {"uri": f"s3://{BUCKET}/llama/*/", "manifestSha256": PIN}}, "IAM wildcards"),
    ({"s3": {"uri": f"s3://{BUCKET}/llama/../other/", "manifestSha256": PIN}}, "'..' segment"),
    ({"s3": {"uri": f"s3://{BUCKET}/llama//x/", "manifestSha256": PIN}}, "an empty"),
    ({"s3": {"uri": f"s3://{BUCKET}/{PREFIX}", "manifestSha256": PIN.upper()}}, "64 lowercase hex digits"),
    ({"s3": {"uri": f"s3://{BUCKET}/{PREFIX}", "manifestSha256": PIN[:40]}}, "64 lowercase hex digits"),
])
def test_each_mistake_in_an_adapters_source_is_refused_with_its_own_reason(values, reason):
    with pytest.raises(pydantic.ValidationError) as raised:
        adapter(**values)
    (error,) = raised.value.errors()
    assert reason in error["msg"]


def test_a_new_manifest_is_a_new_job_and_a_hub_adapters_job_keeps_its_name():
    hub = weights.StagedAdapter(target="/models/.lora/org/sql-lora/" + "a" * 40, model_id="org/sql-lora",
                                revision="a" * 40)
    one = weights.StagedAdapter(target=f"/models/.lora/.s3/{PIN}", bucket=BUCKET, prefix=PREFIX, manifest_sha256=PIN)
    two = weights.StagedAdapter(target=f"/models/.lora/.s3/{'4' * 64}", bucket=BUCKET, prefix=PREFIX,
                                manifest_sha256="4" * 64)
    key = f"{'b' * 40}//org/sql-lora@{'a' * 40}/r16"
    commit = "b" * 40
    assert weights.job_name("m", commit, None, (hub,), 16) == "m-stage-" + hashlib.sha256(key.encode()).hexdigest()[:10]
    assert weights.job_name("m", commit, None, (hub, one), 16) != weights.job_name("m", commit, None, (hub, two), 16)


# --- the staging Job's program -------------------------------------------------------------------------------------


def _body(content: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(content), len(content))


def _expect(stub: Stubber, manifest: bytes, listed: dict[str, bytes], served: dict[str, bytes]) -> None:
    """The requests stage_s3 makes: the listing, the manifest, then each file the manifest names, in order."""
    contents = [{"Key": PREFIX + n, "Size": len(c)} for n, c in sorted({**listed, "SHA256SUMS": manifest}.items())]
    stub.add_response("list_objects_v2", {"Contents": contents, "KeyCount": len(contents), "IsTruncated": False},
                      {"Bucket": BUCKET, "Prefix": PREFIX})
    stub.add_response("get_object", {"Body": _body(manifest), "ContentLength": len(manifest)},
                      {"Bucket": BUCKET, "Key": PREFIX + "SHA256SUMS"})
    if hashlib.sha256(manifest).hexdigest() != PIN or set(listed) != set(FILES):
        return
    for name in sorted(FILES):
        stub.add_response("get_object", {"Body": _body(served[name]), "ContentLength": len(served[name])},
                          {"Bucket": BUCKET, "Key": PREFIX + name})


def _client() -> Any:
    return boto3.client("s3", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")


def _run_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: bytes = MANIFEST,
             listed: dict[str, bytes] | None = None, served: dict[str, bytes] | None = None) -> tuple[int, str, Path]:
    """The Job's adapter program (stage_scripts.ADAPTER_PROGRAM), in-process, with its S3 client stubbed."""
    client = _client()
    stub = Stubber(client)
    _expect(stub, manifest, FILES if listed is None else listed, FILES if served is None else served)
    monkeypatch.setattr(boto3, "client", lambda service: client)
    hub = types.ModuleType("huggingface_hub")  # the program imports it; an S3 adapter never calls it
    hub.HfApi = hub.snapshot_download = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    monkeypatch.setitem(sys.modules, "stage_verify", stage_verify)
    monkeypatch.setitem(sys.modules, "stage_adapter", stage_adapter)
    target = tmp_path / ".lora" / ".s3" / PIN
    entry = weights.StagedAdapter(target=str(target), bucket=BUCKET, prefix=PREFIX, manifest_sha256=PIN)
    monkeypatch.setenv("ADAPTERS", json.dumps([entry.job_entry()]))
    monkeypatch.setenv("MODEL_ID", "meta-llama/Llama-3.1-8B-Instruct")
    monkeypatch.setenv("MAX_LORA_RANK", "16")
    program = tmp_path / "program.py"
    program.write_text(stage_scripts.ADAPTER_PROGRAM)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with stub, redirect_stdout(out), redirect_stderr(err):
        try:
            runpy.run_path(str(program), run_name="__main__")
        except SystemExit as exit_:
            code = 1 if exit_.code else 0
            err.write(str(exit_.code))
    return code, out.getvalue() + err.getvalue(), target


def test_a_good_prefix_is_staged_file_by_file_and_marked(tmp_path, monkeypatch):
    code, output, target = _run_job(tmp_path, monkeypatch)
    assert code == 0, output
    assert (target / ".llm-serving-complete").is_file()
    assert {p.name: p.read_bytes() for p in target.iterdir() if p.name in FILES} == FILES
    assert sorted(p.name for p in target.iterdir()) == [".llm-serving-complete", *sorted(FILES)]  # nothing else


def test_a_file_with_another_digest_is_never_kept_and_no_marker_is_written(tmp_path, monkeypatch):
    code, output, target = _run_job(tmp_path, monkeypatch,
                                     served={**FILES, "adapter_model.safetensors": b"\x02" * 4096})
    assert code == 1 and "adapter_model.safetensors: sha256" in output and "the manifest records" in output
    assert not (target / ".llm-serving-complete").exists()
    assert not (target / "adapter_model.safetensors").exists()
    assert not (target / "adapter_model.safetensors.partial").exists()


def test_an_object_the_manifest_does_not_list_fails_the_job_before_any_download(tmp_path, monkeypatch):
    code, output, target = _run_job(tmp_path, monkeypatch, listed={**FILES, "adapter_model.bin": b"\x80"})
    assert code == 1 and f"s3://{BUCKET}/{PREFIX}adapter_model.bin: not in the manifest" in output
    assert not target.exists()


def test_a_listed_file_missing_from_the_prefix_fails_the_job(tmp_path, monkeypatch):
    code, output, target = _run_job(tmp_path, monkeypatch,
                                     listed={"adapter_config.json": FILES["adapter_config.json"]})
    assert code == 1 and "adapter_model.safetensors: listed in the manifest, not in the prefix" in output
    assert not target.exists()


def test_a_manifest_other_than_the_pinned_one_fails_the_job(tmp_path, monkeypatch):
    changed = sums({**FILES, "adapter_model.safetensors": b"\x02" * 4096})
    code, output, target = _run_job(tmp_path, monkeypatch, manifest=changed)
    assert code == 1 and f"has sha256 {hashlib.sha256(changed).hexdigest()}, the stack pins {PIN}" in output
    assert not target.exists()


def test_an_adapter_for_another_base_model_is_refused_after_its_files_match(tmp_path, monkeypatch):
    other = {**FILES, "adapter_config.json": json.dumps(
        {**BASE, "base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}).encode()}
    monkeypatch.setattr(sys.modules[__name__], "PIN", hashlib.sha256(sums(other)).hexdigest())
    monkeypatch.setattr(sys.modules[__name__], "FILES", other)
    code, output, target = _run_job(tmp_path, monkeypatch, manifest=sums(other))
    assert code == 1 and "is not meta-llama/Llama-3.1-8B-Instruct" in output
    assert not (target / ".llm-serving-complete").exists()


@pytest.mark.parametrize(("line", "reason"), [
    ("../adapter_model.safetensors", "'..' segment"),
    ("/etc/passwd", "is absolute"),
    ("sub//x.json", "empty"),
    ("adapter_model.bin", "pickled weights"),
    ("SHA256SUMS", "the manifest or the completion marker"),
])
def test_a_manifest_path_that_could_leave_the_adapters_directory_is_refused(line, reason):
    _, problems = stage_adapter.parse_manifest(MANIFEST.decode() + f"{'0' * 64}  {line}\n")
    assert len(problems) == 1 and reason in problems[0]


def test_a_manifest_sha256sum_did_not_write_is_refused_line_by_line():
    _, problems = stage_adapter.parse_manifest(f"SHA256 (adapter_config.json) = {'0' * 64}\n\\{'0' * 64}  a\\nb\n")
    assert problems[0].startswith("line 1 is not") and "escaped" in problems[1]
    assert [p for p in problems if "is not listed" in p] == [
        "adapter_config.json is not listed (vLLM needs it)", "adapter_model.safetensors is not listed (vLLM needs it)"]


def test_a_symbolic_link_in_the_adapters_directory_is_refused(tmp_path):
    target = tmp_path / "adapter"
    target.mkdir()
    (target / "adapter_model.safetensors").symlink_to(tmp_path / "elsewhere")
    client = _client()
    with Stubber(client) as stub:
        _expect(stub, MANIFEST, FILES, FILES)
        problems = stage_adapter.stage_s3(client, BUCKET, PREFIX, PIN, target)
    assert problems == [f"{target}: symbolic link adapter_model.safetensors"]
    assert not (tmp_path / "elsewhere").exists()


def test_a_retry_keeps_the_files_an_earlier_attempt_verified_and_skips_the_consoles_folder(tmp_path):
    target = tmp_path / "adapter"
    target.mkdir()
    (target / "adapter_config.json").write_bytes(FILES["adapter_config.json"])
    client = _client()
    with Stubber(client) as stub:
        objects = sorted({**FILES, "SHA256SUMS": MANIFEST}.items())
        contents = [{"Key": PREFIX, "Size": 0},  # the folder the S3 console creates
                    *({"Key": PREFIX + n, "Size": len(c)} for n, c in objects)]
        stub.add_response("list_objects_v2", {"Contents": contents}, {"Bucket": BUCKET, "Prefix": PREFIX})
        stub.add_response("get_object", {"Body": _body(MANIFEST), "ContentLength": len(MANIFEST)},
                          {"Bucket": BUCKET, "Key": PREFIX + "SHA256SUMS"})
        # Only the file not yet in place is requested: the Stubber refuses any other request.
        stub.add_response("get_object", {"Body": _body(FILES["adapter_model.safetensors"])},
                          {"Bucket": BUCKET, "Key": PREFIX + "adapter_model.safetensors"})
        assert stage_adapter.stage_s3(client, BUCKET, PREFIX, PIN, target) == []
        stub.assert_no_pending_responses()


def test_a_prefix_without_its_manifest_is_named_from_the_listing_before_any_read(tmp_path):
    # The role's listing grant does not cover GetObject, so a missing manifest would answer 403 AccessDenied: the
    # listing says it is missing instead, and nothing is read.
    client = _client()
    with Stubber(client) as stub:
        contents = [{"Key": PREFIX + n, "Size": len(c)} for n, c in sorted(FILES.items())]
        stub.add_response("list_objects_v2", {"Contents": contents}, {"Bucket": BUCKET, "Prefix": PREFIX})
        assert stage_adapter.stage_s3(client, BUCKET, PREFIX, PIN, tmp_path / "adapter") == [
            f"s3://{BUCKET}/{PREFIX}SHA256SUMS: not in the prefix "
            "(write it with `sha256sum` beside the adapter's files)"]
        stub.assert_no_pending_responses()


def test_a_file_listed_as_another_files_directory_is_refused():
    text = f"{'a' * 64}  adapter_config.json\n{'b' * 64}  adapter_model.safetensors\n{'c' * 64}  extra\n" \
           f"{'d' * 64}  extra/inner.json\n"
    _, problems = stage_adapter.parse_manifest(text)
    assert problems == ["'extra' is also the directory of 'extra/inner.json'"]


def test_the_marker_name_is_the_engines():
    assert stage_adapter.MARKER == engine.COMPLETE_MARKER


# --- the Job and its role ----------------------------------------------------------------------------------------


def _weights(adapters: tuple[weights.StagedAdapter, ...], **values: Any) -> weights.ModelWeights:
    return weights.ModelWeights("llama-8b-weights", weights.ModelWeightsArgs(
        namespace="llm-serving", model_name="llama-8b", model_id="meta-llama/Llama-3.1-8B-Instruct",
        revision="0e9e39f249a16976918f6564b8830bc894c89659", tokenizer_revision=None, stage_image="python@sha256:0",
        storage_class="efs", access_mode="ReadWriteMany", size_gib=40, download_deadline_seconds=3600,
        hf_token_secret=None, protect=False, adapters=adapters, max_lora_rank=16, **values))


S3_ADAPTER = weights.StagedAdapter(target=f"/models/.lora/.s3/{PIN}", bucket=BUCKET, prefix=PREFIX,
                                   manifest_sha256=PIN)
HUB_ADAPTER = weights.StagedAdapter(target="/models/.lora/org/sql-lora/" + "a" * 40, model_id="org/sql-lora",
                                    revision="a" * 40)


def test_the_volume_job_reads_s3_adapters_as_its_own_account_through_its_own_fence():
    result = run(lambda: _weights((HUB_ADAPTER, S3_ADAPTER), service_account="llama-8b-stage-weights",
                                  region="us-east-1", adapter_egress=tuple(object_storage_egress())))
    (job,) = [m for m in result.manifests if m["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "llama-8b-stage-weights" and pod["automountServiceAccountToken"] is False
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert json.loads(env["ADAPTERS"]) == [HUB_ADAPTER.job_entry(), {
        "bucket": BUCKET, "prefix": PREFIX, "manifest_sha256": PIN, "target": f"/models/.lora/.s3/{PIN}"}]
    # botocore reads AWS_DEFAULT_REGION only (configprovider.py); AWS_REGION for the CLI and other SDKs.
    assert (env["AWS_REGION"], env["AWS_DEFAULT_REGION"]) == ("us-east-1", "us-east-1")
    account = result.manifest("ServiceAccount", "llama-8b-stage-weights")
    assert account["automountServiceAccountToken"] is False
    fence = result.manifest("NetworkPolicy", "llama-8b-stage-adapter-sources")
    assert fence["spec"]["podSelector"]["matchLabels"] == job["spec"]["template"]["metadata"]["labels"]
    assert fence["spec"]["egress"] == object_storage_egress()
    depends = result.wiring["kubernetes:batch/v1:Job::llama-8b-weights-stage"]["dependsOn"]
    assert "kubernetes:core/v1:ServiceAccount::llama-8b-weights-stage-account" in depends
    assert "kubernetes:networking.k8s.io/v1:NetworkPolicy::llama-8b-weights-stage-adapter-sources" in depends


def test_hub_adapters_alone_keep_the_job_without_an_account_or_a_fence():
    result = run(lambda: _weights((HUB_ADAPTER,)))
    (job,) = [m for m in result.manifests if m["kind"] == "Job"]
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]
    assert [m["kind"] for m in result.manifests if m["kind"] in ("ServiceAccount", "NetworkPolicy")] == []


def test_an_s3_adapter_without_its_account_is_refused():
    with pytest.raises(ValueError, match="need the staging service account"):
        run(lambda: _weights((S3_ADAPTER,)))


def _role_policy(sources: tuple[tuple[str, str], ...]) -> tuple[dict[str, Any], Any]:
    result = run(lambda: AdapterSources("llama-8b-adapter-sources", AdapterSourcesArgs(
        cluster_name="llm", namespace="llm-serving", service_account="llama-8b-stage-weights", sources=sources,
        tags={})))
    (policy,) = find(result, "aws:iam/rolePolicy:RolePolicy")
    return json.loads(policy["inputs"]["policy"]), result


def test_the_role_reads_and_lists_exactly_the_adapters_prefix():
    policy, result = _role_policy(((BUCKET, PREFIX), (BUCKET, "llama-3.1-8b/sql-v3/")))
    objects = f"arn:aws:s3:::{BUCKET}/"
    assert iam_eval.allowed(policy, "s3:GetObject", objects + PREFIX + "adapter_model.safetensors")
    assert iam_eval.allowed(policy, "s3:GetObject", objects + "llama-3.1-8b/sql-v3/SHA256SUMS")
    assert not iam_eval.allowed(policy, "s3:GetObject", objects + "llama-3.1-8b/support-v1-old/SHA256SUMS")
    assert not iam_eval.allowed(policy, "s3:GetObject", objects + "llama-3.1-8b/other")
    assert not iam_eval.allowed(policy, "s3:PutObject", objects + PREFIX + "adapter_model.safetensors")
    bucket = f"arn:aws:s3:::{BUCKET}"
    assert iam_eval.allowed(policy, "s3:ListBucket", bucket, {"s3:prefix": PREFIX})
    assert not iam_eval.allowed(policy, "s3:ListBucket", bucket, {"s3:prefix": "llama-3.1-8b/"})
    assert not iam_eval.allowed(policy, "s3:ListBucket", bucket)
    assert not iam_eval.allowed(policy, "s3:ListBucket", "arn:aws:s3:::other-bucket", {"s3:prefix": PREFIX})
    # Its trust, its association with the Job's account, and the admission guard before it.
    (association,) = find(result, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert association["inputs"]["serviceAccount"] == "llama-8b-stage-weights"
    assert [m["kind"] for m in result.manifests] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def test_the_roles_actions_and_condition_keys_are_the_service_authorization_references():
    # tests/fixtures/upstream/iam-actions.json: s3:GetObject, and s3:ListBucket with its s3:prefix key.
    policy, _ = _role_policy(((BUCKET, PREFIX), ("other-bucket", "a/")))
    iam_documents.test_every_action_exists_and_every_condition_key_applies_to_its_actions("adapter sources", policy)
    assert [s["Resource"] for s in policy["Statement"] if s["Action"] == "s3:ListBucket"] == [
        f"arn:aws:s3:::{BUCKET}", "arn:aws:s3:::other-bucket"]


def test_a_prefix_without_its_slash_is_refused_by_the_policy_too():
    with pytest.raises(ValueError, match="ending in /"):
        buckets.adapter_source_policy("aws", [(BUCKET, "llama-3.1-8b/support-v1")])

