"""The shared compile cache on S3: cache_sync.py's requests against botocore's Stubber (the lock's conditional
writes, each artifact with its checksum, the manifest marker last, the seed's verified download). The
producer's shell, its role and its room: test_compile_cache_s3_producer.py.

Length: every request cache_sync.py makes on S3, lock, publish and seed, against one Stubber fixture and the helpers
that build its answers (listings, manifests, bodies); split by request, those helpers would be imported across
files."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json
from pathlib import Path

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from llm_serving.serving import CompileCacheKey, cache_sync
from llm_serving.storage import buckets

SHA = "1605565b47bb9346c5515c34102e054115b4f98b"
BUCKET = "llm-prod-weights-123456789012-us-east-1"
PREFIX = (f"compile-cache/llama-70b/meta-llama/Llama-3.1-70B-Instruct/{SHA}/vllm-0.33.0/"
          "tp4-NVIDIA-H100-80GB-HBM3-7fadb4be04ff/")
NOW = 1_800_000_000.0
ARTIFACTS = {"rank_0_0/abc/vllm_compile_cache.py": b"# compiled graph\n",
             "rank_0_0/abc/inductor_cache/k.so": b"\x7fELF"}


def key() -> CompileCacheKey:
    return CompileCacheKey(model_id="meta-llama/Llama-3.1-70B-Instruct", revision=SHA, image_tag="v0.33.0",
                           image_digest=None, tensor_parallel_size=4, pipeline_parallel_size=1,
                           gpu_product="NVIDIA-H100-80GB-HBM3", engine_flags=("16384", "0.92"), model_name="llama-70b",
                           in_bucket=True)


@pytest.fixture
def s3():
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _b64(content: bytes) -> str:
    return base64.b64encode(hashlib.sha256(content).digest()).decode()


def _body(content: bytes) -> StreamingBody:
    import io

    return StreamingBody(io.BytesIO(content), len(content))


ROOT = "objects/e1/"  # the writer's own root, after its lock's ETag "e1"


def _manifest() -> bytes:
    files = {name: {"size": len(c), "sha256": hashlib.sha256(c).hexdigest()} for name, c in ARTIFACTS.items()}
    return json.dumps({"files": files, "root": ROOT}, sort_keys=True).encode()


def _listing(key: str, etag: str = '"m1"', modified: datetime.datetime | None = None) -> dict:
    """ListObjectsV2's answer holding exactly `key`."""
    return {"Contents": [{"Key": key, "ETag": etag, "LastModified": modified or _at(0)}], "KeyCount": 1}


def _marker_listed(stub: Stubber, present: bool = True) -> None:
    stub.add_response("list_objects_v2", _listing(PREFIX + ".llm-serving-complete") if present else {"KeyCount": 0},
                      {"Bucket": BUCKET, "Prefix": PREFIX + ".llm-serving-complete", "MaxKeys": 1})


def _at(seconds_ago: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(NOW - seconds_ago, tz=datetime.UTC)


def test_the_key_is_an_object_prefix_of_the_models_own_beside_the_revisions():
    assert key().object_prefix() == PREFIX
    assert (buckets.CACHE_LOCK, buckets.CACHE_MARKER) == (cache_sync.LOCK, cache_sync.MARKER)
    # Two models with every input of the key alike still write two prefixes: each producer's role has its own.
    twin = dataclasses.replace(key(), model_name="llama-70b-canary")
    assert twin.relative_dir() == key().relative_dir()
    assert not twin.object_prefix().startswith(PREFIX) and not PREFIX.startswith(twin.object_prefix())
    with pytest.raises(ValueError, match="needs the model's name"):
        dataclasses.replace(key(), model_name="").object_prefix()


# --- the lock --------------------------------------------------------------------------------------------------


def test_the_lock_is_a_conditional_create(s3):
    client, stub = s3
    stub.add_response("put_object", {"ETag": '"e1"'}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-lock",
                                                       "Body": b'{"holder": "pod-a", "token": "t1"}',
                                                       "IfNoneMatch": "*"})
    assert cache_sync.acquire(client, BUCKET, PREFIX, "pod-a", 1280, NOW, token="t1") == '"e1"'


def test_a_fresh_lock_keeps_a_second_writer_out(s3, capsys):
    client, stub = s3
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
    stub.add_response("list_objects_v2", _listing(PREFIX + ".llm-serving-lock", '"e1"', _at(600)),
                      {"Bucket": BUCKET, "Prefix": PREFIX + ".llm-serving-lock", "MaxKeys": 1})
    assert cache_sync.acquire(client, BUCKET, PREFIX, "pod-b", 1280, NOW) is None
    assert capsys.readouterr().err == f"another writer holds {PREFIX}.llm-serving-lock (taken 600 s ago)\n"


def test_a_held_lock_has_its_own_exit_status_which_the_producer_waits_on(s3, capsys):
    client, stub = s3
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
    stub.add_response("list_objects_v2", _listing(PREFIX + ".llm-serving-lock", '"e1"', _at(600)),
                      {"Bucket": BUCKET, "Prefix": PREFIX + ".llm-serving-lock", "MaxKeys": 1})
    assert cache_sync.main(["lock", BUCKET, PREFIX, "pod-b", "1280"], client, now=NOW) == cache_sync.EXIT_HELD != 1


def test_a_concurrent_create_counts_as_held(s3):
    client, stub = s3
    stub.add_client_error("put_object", service_error_code="ConditionalRequestConflict", http_status_code=409)
    stub.add_response("list_objects_v2", _listing(PREFIX + ".llm-serving-lock", '"e1"', _at(1)),
                      {"Bucket": BUCKET, "Prefix": PREFIX + ".llm-serving-lock", "MaxKeys": 1})
    assert cache_sync.acquire(client, BUCKET, PREFIX, "pod-b", 1280, NOW) is None


def test_a_stale_lock_is_taken_over_by_its_etag_only(s3, capsys):
    client, stub = s3
    lock = PREFIX + ".llm-serving-lock"
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
    stub.add_response("list_objects_v2", _listing(lock, '"old"', _at(1281)),
                      {"Bucket": BUCKET, "Prefix": lock, "MaxKeys": 1})
    stub.add_response("put_object", {"ETag": '"e2"'},
                      {"Bucket": BUCKET, "Key": lock, "Body": b'{"holder": "pod-c", "token": "t3"}',
                       "IfMatch": '"old"'})
    assert cache_sync.acquire(client, BUCKET, PREFIX, "pod-c", 1280, NOW, token="t3") == '"e2"'
    assert "breaking a stale lock" in capsys.readouterr().err


def test_two_writers_breaking_the_same_stale_lock_cannot_both_win(s3):
    client, stub = s3
    lock = PREFIX + ".llm-serving-lock"
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
    stub.add_response("list_objects_v2", _listing(lock, '"old"', _at(5000)),
                      {"Bucket": BUCKET, "Prefix": lock, "MaxKeys": 1})
    # The other writer's takeover changed the ETag first.
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412,
                          expected_params={"Bucket": BUCKET, "Key": lock, "Body": ANY, "IfMatch": '"old"'})
    assert cache_sync.acquire(client, BUCKET, PREFIX, "pod-d", 1280, NOW) is None


def test_a_lock_released_while_asked_for_counts_as_held_this_time(s3, capsys):
    client, stub = s3
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
    stub.add_response("list_objects_v2", {"KeyCount": 0},
                      {"Bucket": BUCKET, "Prefix": PREFIX + ".llm-serving-lock", "MaxKeys": 1})
    assert cache_sync.acquire(client, BUCKET, PREFIX, "pod-b", 1280, NOW) is None
    assert capsys.readouterr().err == f"the lock on {PREFIX} was released while this writer asked for it\n"


def test_a_botocore_without_conditional_writes_is_refused_before_the_lock():
    # A botocore from before S3's conditional writes: PutObject and DeleteObject know no If* members.
    class Shape:
        members = {"Bucket": None, "Key": None, "Body": None}

    class Operation:
        input_shape = Shape()

    class Model:
        def operation_model(self, name):
            return Operation()

    class Meta:
        service_model = Model()

    class OldClient:
        meta = Meta()

    with pytest.raises(SystemExit, match="this image's botocore has no PutObject IfNoneMatch, IfMatch"):
        cache_sync.main(["lock", BUCKET, PREFIX, "pod-a", "1280"], OldClient())


def test_this_botocore_has_the_conditional_writes(s3):
    cache_sync.check_conditional_writes(s3[0])  # raises SystemExit otherwise


def test_the_writer_releases_only_its_own_lock(s3):
    client, stub = s3
    stub.add_response("delete_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-lock", "IfMatch": '"e1"'})
    cache_sync.release(client, BUCKET, PREFIX, '"e1"')
    stub.add_client_error("delete_object", service_error_code="PreconditionFailed", http_status_code=412)
    cache_sync.release(client, BUCKET, PREFIX, '"e1"')  # taken over meanwhile: left to its new writer


def test_an_access_error_is_not_mistaken_for_a_held_lock(s3):
    client, stub = s3
    stub.add_client_error("put_object", service_error_code="AccessDenied", http_status_code=403)
    with pytest.raises(Exception, match="AccessDenied"):
        cache_sync.acquire(client, BUCKET, PREFIX, "pod-a", 1280, NOW)


# --- publish and seed ------------------------------------------------------------------------------------------


def _artifacts(root: Path) -> Path:
    for name, content in ARTIFACTS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def test_publish_uploads_each_artifact_with_its_checksum_then_the_manifest_marker_once(s3, tmp_path):
    client, stub = s3
    for name in sorted(ARTIFACTS):
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ROOT + name, "Body": ANY,
                                             "ChecksumSHA256": _b64(ARTIFACTS[name])})
    stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete",
                                         "Body": _manifest(), "IfNoneMatch": "*", "ChecksumSHA256": _b64(_manifest())})
    assert cache_sync.publish(client, BUCKET, PREFIX, _artifacts(tmp_path), '"e1"') == 2


def test_publish_never_follows_a_symlink_out_of_the_cache(s3, tmp_path, capsys):
    # A symlink (to a file, or to a directory) under vLLM's cache points at whatever the pod may read: neither it
    # nor what it reaches is uploaded or named in the manifest, as publish_dir on a file system.
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "token").write_bytes(b"not compile output")
    source = _artifacts(tmp_path / "cache")
    (source / "rank_0_0" / "token").symlink_to(secret / "token")
    (source / "linked").symlink_to(secret, target_is_directory=True)
    client, stub = s3
    for name in sorted(ARTIFACTS):
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ROOT + name, "Body": ANY,
                                             "ChecksumSHA256": _b64(ARTIFACTS[name])})
    stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete",
                                         "Body": _manifest(), "IfNoneMatch": "*", "ChecksumSHA256": _b64(_manifest())})
    assert cache_sync.publish(client, BUCKET, PREFIX, source, '"e1"') == 2
    assert capsys.readouterr().err == "not published (not regular files): linked, rank_0_0/token\n"


def test_a_marker_write_in_flight_is_retried_until_it_lands(s3, tmp_path):
    client, stub = s3
    for name in sorted(ARTIFACTS):
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ROOT + name, "Body": ANY,
                                             "ChecksumSHA256": ANY})
    stub.add_client_error("put_object", service_error_code="ConditionalRequestConflict", http_status_code=409)
    _marker_listed(stub, present=False)
    stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete",
                                         "Body": _manifest(), "IfNoneMatch": "*", "ChecksumSHA256": _b64(_manifest())})
    assert cache_sync.publish(client, BUCKET, PREFIX, _artifacts(tmp_path), '"e1"', retry_seconds=0) == 2


def test_a_marker_that_never_lands_fails_the_producer(s3, tmp_path):
    client, stub = s3
    for name in sorted(ARTIFACTS):
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + ROOT + name, "Body": ANY,
                                             "ChecksumSHA256": ANY})
    for _ in range(cache_sync.MARKER_ATTEMPTS):
        stub.add_client_error("put_object", service_error_code="ConditionalRequestConflict", http_status_code=409)
        _marker_listed(stub, present=False)
    with pytest.raises(RuntimeError, match="met a conflicting write 4 times; not marked"):
        cache_sync.publish(client, BUCKET, PREFIX, _artifacts(tmp_path), '"e1"', retry_seconds=0)


def test_a_second_writer_never_touches_the_objects_a_manifest_names(s3, tmp_path, capsys):
    # Its own root (its lock's ETag "e9"); the first writer's marker stands and names objects/e1/.
    client, stub = s3
    for name in sorted(ARTIFACTS):
        stub.add_response("put_object", {}, {"Bucket": BUCKET, "Key": PREFIX + "objects/e9/" + name, "Body": ANY,
                                             "ChecksumSHA256": ANY})
    stub.add_client_error("put_object", service_error_code="PreconditionFailed", http_status_code=412)
    assert cache_sync.publish(client, BUCKET, PREFIX, _artifacts(tmp_path), '"e9"') == 2
    assert capsys.readouterr().err == (f"{PREFIX} was marked complete by another writer first; its copy stands "
                                       "(objects/e9/ is unused)\n")


def test_a_lock_etag_that_is_not_a_plain_token_is_refused_as_a_root():
    multipart = "3858f62230ac3c915f300c664312c63f-2"
    assert cache_sync.writer_root(f'"{multipart}"') == f"objects/{multipart}/"
    with pytest.raises(ValueError, match="refused lock ETag"):
        cache_sync.writer_root('"../x"')


def test_publish_refuses_an_empty_cache_without_marking_it(s3, tmp_path):
    client, _ = s3
    with pytest.raises(ValueError, match="vLLM wrote no compile artifacts"):
        cache_sync.publish(client, BUCKET, PREFIX, tmp_path, '"e1"')


def _manifest_read(stub: Stubber, manifest: bytes | None = None) -> None:
    _marker_listed(stub)
    stub.add_response("get_object", {"Body": _body(_manifest() if manifest is None else manifest)},
                      {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete"})


def _root_listed(stub: Stubber, names: list[str]) -> None:
    """The writer's root as ListObjectsV2 lists it: `names` under it, one page."""
    stub.add_response("list_objects_v2", {"Contents": [{"Key": PREFIX + ROOT + n} for n in names],
                                          "KeyCount": len(names), "IsTruncated": False},
                      {"Bucket": BUCKET, "Prefix": PREFIX + ROOT})


def _downloads(stub: Stubber, bodies: dict[str, bytes]) -> None:
    for name in sorted(bodies):
        stub.add_response("get_object", {"Body": _body(bodies[name])},
                          {"Bucket": BUCKET, "Key": PREFIX + ROOT + name, "ChecksumMode": "ENABLED"})


def _seeded(target: Path) -> dict[str, bytes]:
    return {p.relative_to(target).as_posix(): p.read_bytes() for p in target.rglob("*") if p.is_file()}


def test_seed_downloads_a_good_cache_and_checks_every_file(s3, tmp_path, capsys):
    client, stub = s3
    _manifest_read(stub)
    _root_listed(stub, sorted(ARTIFACTS))
    _downloads(stub, ARTIFACTS)
    target = tmp_path / "vllm" / "torch_compile_cache"
    assert cache_sync.main(["seed", BUCKET, PREFIX, str(target)], client) == 0
    assert _seeded(target) == ARTIFACTS
    assert capsys.readouterr().err == (f"compile cache hit: seeded 2 files from {PREFIX}, each checked against its "
                                       "manifest\n")
    assert sorted(p.name for p in target.parent.iterdir()) == ["torch_compile_cache"]  # no staging left behind


def test_a_seed_over_the_pods_own_cache_keeps_what_vllm_wrote_there(s3, tmp_path):
    # A restarted pod's cache volume survives: the seed adds the checked files beside what is there.
    client, stub = s3
    target = tmp_path / "torch_compile_cache"
    (target / "rank_0_0").mkdir(parents=True)
    (target / "rank_0_0" / "own").write_bytes(b"vLLM's own")
    _manifest_read(stub)
    _root_listed(stub, sorted(ARTIFACTS))
    _downloads(stub, ARTIFACTS)
    assert cache_sync.seed(client, BUCKET, PREFIX, target) is True
    assert _seeded(target) == {**ARTIFACTS, "rank_0_0/own": b"vLLM's own"}


def test_a_miss_seeds_nothing_and_vllm_compiles(s3, tmp_path, capsys):
    client, stub = s3
    _marker_listed(stub, present=False)
    assert cache_sync.main(["seed", BUCKET, PREFIX, str(tmp_path)], client) == 0
    assert capsys.readouterr().err == f"compile cache miss: {PREFIX} not produced yet; vLLM compiles\n"
    assert list(tmp_path.iterdir()) == []


def test_a_tampered_file_leaves_no_cache_and_the_pod_starts(s3, tmp_path, capsys):
    client, stub = s3
    _manifest_read(stub)
    _root_listed(stub, sorted(ARTIFACTS))
    first, second = sorted(ARTIFACTS)
    _downloads(stub, {first: ARTIFACTS[first], second: b"tampered"})
    target = tmp_path / "torch_compile_cache"
    assert cache_sync.main(["seed", BUCKET, PREFIX, str(target)], client) == 0
    assert capsys.readouterr().err == (f"compile cache not seeded (ValueError: {second} does not match the "
                                       "manifest); vLLM compiles\n")
    assert [p for p in tmp_path.rglob("*")] == []  # the first file, already checked, was not kept either


def test_an_object_the_manifest_does_not_name_refuses_the_cache_before_any_download(s3, tmp_path, capsys):
    client, stub = s3
    _manifest_read(stub)
    _root_listed(stub, [*sorted(ARTIFACTS), "rank_0_0/abc/extra.py"])  # no get_object is stubbed: none is made
    assert cache_sync.main(["seed", BUCKET, PREFIX, str(tmp_path / "torch_compile_cache")], client) == 0
    assert capsys.readouterr().err == (f"compile cache not seeded (ValueError: {PREFIX}{ROOT} does not match its "
                                       "manifest: not in it rank_0_0/abc/extra.py); vLLM compiles\n")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_object_refuses_the_cache_before_any_download(s3, tmp_path, capsys):
    client, stub = s3
    _manifest_read(stub)
    first, second = sorted(ARTIFACTS)
    _root_listed(stub, [first])
    assert cache_sync.main(["seed", BUCKET, PREFIX, str(tmp_path / "torch_compile_cache")], client) == 0
    assert capsys.readouterr().err == (f"compile cache not seeded (ValueError: {PREFIX}{ROOT} does not match its "
                                       f"manifest: missing {second}); vLLM compiles\n")
    assert list(tmp_path.iterdir()) == []


def test_the_seed_reads_every_page_of_the_writers_root(s3, tmp_path):
    client, stub = s3
    first, second = sorted(ARTIFACTS)
    _manifest_read(stub)
    stub.add_response("list_objects_v2", {"Contents": [{"Key": PREFIX + ROOT + first}], "IsTruncated": True,
                                          "NextContinuationToken": "page-2"},
                      {"Bucket": BUCKET, "Prefix": PREFIX + ROOT})
    stub.add_response("list_objects_v2", {"Contents": [{"Key": PREFIX + ROOT + second}], "IsTruncated": False},
                      {"Bucket": BUCKET, "Prefix": PREFIX + ROOT, "ContinuationToken": "page-2"})
    _downloads(stub, ARTIFACTS)
    assert cache_sync.seed(client, BUCKET, PREFIX, tmp_path / "torch_compile_cache") is True


@pytest.mark.parametrize(("manifest", "refusal"), [
    ({"files": {"../../etc/passwd": {"size": 1, "sha256": "0" * 64}}, "root": ROOT}, "not a path inside the cache"),
    ({"files": {"a": {"size": 1, "sha256": "0" * 64}}, "root": "../weights/"}, "refused"),  # a root not a writer's
    ({"files": {}, "root": ROOT}, "it names no files"),
    ({"files": {"a": {"size": 1}}, "root": ROOT}, "no size and SHA-256"),
], ids=["entry-outside-the-cache", "root-not-a-writer-root", "no-files", "no-digest"])
def test_a_manifest_pointing_outside_the_cache_or_without_digests_is_refused(s3, tmp_path, manifest, refusal):
    client, stub = s3
    _manifest_read(stub, json.dumps(manifest).encode())
    with pytest.raises(ValueError, match=refusal):
        cache_sync.seed(client, BUCKET, PREFIX, tmp_path)


def test_state_says_whether_the_marker_is_there(s3, capsys):
    client, stub = s3
    _marker_listed(stub)
    stub.add_response("get_object", {"Body": _body(_manifest())},
                      {"Bucket": BUCKET, "Key": PREFIX + ".llm-serving-complete"})
    _marker_listed(stub, present=False)
    assert cache_sync.main(["state", BUCKET, PREFIX], client) == 0
    assert cache_sync.main(["state", BUCKET, PREFIX], client) == 0
    assert capsys.readouterr().out == "produced\nabsent\n"
