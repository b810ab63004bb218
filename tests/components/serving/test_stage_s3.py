"""The S3 staging Job's program, run in-process: S3 answered by botocore's Stubber, the Hub by a local
directory standing in for huggingface_hub's two calls (model_info's listing, hf_hub_download). It uploads
each verified file with its Hub digest, writes the marker last, resumes past objects already verified,
and refuses a file that does not match the Hub's record without uploading it or writing the marker."""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from llm_serving.serving import stage_verify, weights

BUCKET = "llm-prod-weights-123456789012-us-east-1"
PREFIX = "org/model/0123456789abcdef0123456789abcdef01234567/"
FILES = {"config.json": b'{"architectures": ["LlamaForCausalLM"]}', "model.safetensors": b"\x00" * 4096}
LFS = {"model.safetensors"}
PROGRAM = weights.STAGE_S3_SCRIPT.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]


def _sibling(name: str, content: bytes) -> types.SimpleNamespace:
    blob = hashlib.sha1(f"blob {len(content)}\0".encode() + content, usedforsecurity=False).hexdigest()
    lfs = types.SimpleNamespace(sha256=hashlib.sha256(content).hexdigest(), size=len(content)) \
        if name in LFS else None
    return types.SimpleNamespace(rfilename=name, size=len(content), blob_id=blob, lfs=lfs)


def _hub(served: dict[str, bytes]) -> types.ModuleType:
    """huggingface_hub's two calls the program makes: the Hub records FILES, and downloads serve `served`."""
    hub = types.ModuleType("huggingface_hub")

    class HfApi:
        def model_info(self, repo_id: str, revision: str, files_metadata: bool, token: Any) -> Any:
            assert files_metadata
            return types.SimpleNamespace(siblings=[_sibling(n, c) for n, c in FILES.items()])

    def hf_hub_download(repo_id: str, filename: str, revision: str, local_dir: Path, token: Any) -> str:
        path = Path(local_dir) / filename
        path.write_bytes(served[filename])
        return str(path)

    hub.HfApi = HfApi  # type: ignore[attr-defined]
    hub.hf_hub_download = hf_hub_download  # type: ignore[attr-defined]
    return hub


def _digest(name: str) -> str:
    """What the Job records on the object: the Hub's sha256 for LFS files, the git blob id otherwise."""
    sibling = _sibling(name, FILES[name])
    return f"sha256:{sibling.lfs.sha256}" if sibling.lfs else f"git-blob:{sibling.blob_id}"


def _missing(stub: Stubber, key: str) -> None:
    stub.add_client_error("head_object", service_error_code="404", http_status_code=404,
                          expected_params={"Bucket": BUCKET, "Key": key})


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, served: dict[str, bytes],
         program_stub: Any) -> tuple[int | str | None, Stubber]:
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    stub = Stubber(client)
    program_stub(stub)
    monkeypatch.setattr(boto3, "client", lambda service: client)
    monkeypatch.setitem(sys.modules, "huggingface_hub", _hub(served))
    monkeypatch.setitem(sys.modules, "stage_verify", stage_verify)
    for key, value in {"BUCKET": BUCKET, "PREFIX": PREFIX, "SCRATCH": str(tmp_path), "MODEL_ID": "org/model",
                       "REVISION": PREFIX.split("/")[2]}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TOKENIZER_PREFIX", raising=False)
    # The program's patterns are the Job's; these test files match them.
    code: int | str | None = 0
    with stub:
        try:
            exec(compile(PROGRAM, "stage-s3", "exec"), {"__name__": "__main__"})
        except SystemExit as done:
            code = done.code
    return code, stub


def test_uploads_every_verified_file_with_its_digest_then_the_marker(monkeypatch, tmp_path):
    def expect(stub: Stubber) -> None:
        _missing(stub, PREFIX + ".llm-serving-complete")
        stub.add_response("list_objects_v2", {"KeyCount": 0}, {"Bucket": BUCKET, "Prefix": PREFIX})
        for name in sorted(FILES):
            stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + name, "Body": ANY,
                                                 "Metadata": {"llm-serving-digest": _digest(name)},
                                                 "ChecksumAlgorithm": "SHA256"})
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete",
                                             "Body": b"complete\n", "ChecksumAlgorithm": "SHA256"})
    code, stub = _run(monkeypatch, tmp_path, FILES, expect)
    assert code == 0
    stub.assert_no_pending_responses()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # each file deleted once uploaded


def test_a_rerun_skips_objects_already_verified_and_uploads_only_the_rest(monkeypatch, tmp_path):
    def expect(stub: Stubber) -> None:
        _missing(stub, PREFIX + ".llm-serving-complete")
        stub.add_response("list_objects_v2", {"KeyCount": 1, "Contents": [
            {"Key": PREFIX + "config.json", "Size": len(FILES["config.json"])}]}, {"Bucket": BUCKET, "Prefix": PREFIX})
        stub.add_response("head_object", {"ContentLength": len(FILES["config.json"]),
                                          "Metadata": {"llm-serving-digest": _digest("config.json")}},
                          {"Bucket": BUCKET, "Key": PREFIX + "config.json"})
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + "model.safetensors", "Body": ANY,
                                             "Metadata": {"llm-serving-digest": _digest("model.safetensors")},
                                             "ChecksumAlgorithm": "SHA256"})
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete",
                                             "Body": b"complete\n", "ChecksumAlgorithm": "SHA256"})
    code, stub = _run(monkeypatch, tmp_path, FILES, expect)
    assert code == 0
    stub.assert_no_pending_responses()


def test_a_staged_revision_is_left_alone(monkeypatch, tmp_path):
    def expect(stub: Stubber) -> None:
        stub.add_response("head_object", {"ContentLength": 9},
                          {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete"})
    code, stub = _run(monkeypatch, tmp_path, FILES, expect)
    assert code == 0
    stub.assert_no_pending_responses()


def test_a_tampered_shard_is_refused_before_upload_and_no_marker_is_written(monkeypatch, tmp_path):
    tampered = {**FILES, "model.safetensors": b"\x01" * 4096}

    def expect(stub: Stubber) -> None:
        _missing(stub, PREFIX + ".llm-serving-complete")
        stub.add_response("list_objects_v2", {"KeyCount": 0}, {"Bucket": BUCKET, "Prefix": PREFIX})
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + "config.json", "Body": ANY,
                                             "Metadata": {"llm-serving-digest": _digest("config.json")},
                                             "ChecksumAlgorithm": "SHA256"})
    code, stub = _run(monkeypatch, tmp_path, tampered, expect)
    expected_sha = hashlib.sha256(tampered["model.safetensors"]).hexdigest()
    assert code == (f"refused model.safetensors: sha256 {expected_sha}, the Hub records "
                    f"{hashlib.sha256(FILES['model.safetensors']).hexdigest()}; nothing uploaded for it, "
                    "no marker written")
    stub.assert_no_pending_responses()
    assert not (tmp_path / "model.safetensors").exists()


def test_objects_the_hub_does_not_list_fail_the_job(monkeypatch, tmp_path):
    def expect(stub: Stubber) -> None:
        _missing(stub, PREFIX + ".llm-serving-complete")
        stub.add_response("list_objects_v2", {"KeyCount": 1, "Contents": [{"Key": PREFIX + "extra.bin", "Size": 3}]},
                          {"Bucket": BUCKET, "Prefix": PREFIX})
    code, stub = _run(monkeypatch, tmp_path, FILES, expect)
    assert code == (f"s3://{BUCKET}/{PREFIX} holds objects the Hub does not list for "
                    f"{PREFIX.split('/')[2]}: ['extra.bin']")
    stub.assert_no_pending_responses()
