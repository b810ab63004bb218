"""The shared compile cache on S3, moved in and out of a pod: the producer Job's lock, upload and marker,
and the serving pods' seed (standard library only, run in the vLLM image, which carries boto3).

Shipped to the pods in a ConfigMap (compile_cache.sync_configmap) and called through a launcher that
passes a boto3 S3 client (compile_cache.SYNC_LAUNCHER), so the program itself never imports a cloud SDK.
Under the key's prefix `compile-cache/<key>/`: each file of vLLM's `torch_compile_cache/` under the writer's
own root `objects/<lock token>/`, uploaded with its SHA-256 (S3 checks it on receipt, ChecksumSHA256); then
the marker `.llm-serving-complete`, a JSON manifest naming that root and every file's size and SHA-256,
written last and only once (If-None-Match: *). A writer never overwrites objects another writer's manifest
names (its root is its own), so a late second writer cannot break a published cache. A prefix without
the marker is never seeded; a seed checks every file it downloads against the manifest and keeps nothing
when one differs.

Whether the marker or the lock exists is asked with ListObjectsV2 under its exact key, which the roles'
`s3:prefix`-conditioned s3:ListBucket allows, rather than inferred from a GetObject error: S3 answers a
missing key with 404 only to a caller it lets list the bucket (S3 API reference, GetObject
"Permissions"), and whether a prefix-conditioned grant counts is not documented.

One writer: the lock `.llm-serving-lock` is created with If-None-Match: * (S3 conditional writes: the
request fails with 412 Precondition Failed when the key exists, 409 ConditionalRequestConflict when a
concurrent write to it is in flight; docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html).
S3 answers 409 when a conflicting conditional write is in flight and asks for a retry (botocore's S3
model, PutObject IfNoneMatch/IfMatch): the marker's write is retried; a 409 on the lock counts as held.
A lock older than the stale age (the Job's deadline and a margin: no writer of the Job lives longer,
timing.producer_timeouts) is taken over by overwriting exactly that version (If-Match: its ETag), so two
writers that both find it stale cannot both win. The writer releases it with a conditional delete
(If-Match: its own ETag; conditional-deletes.html), never someone else's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

MARKER = ".llm-serving-complete"
LOCK = ".llm-serving-lock"
# PutObject takes at most 5 GiB in one request (S3 user guide, upload-objects.html); vLLM's compile
# artifacts are far smaller (source, Inductor kernels, an AOT-compiled graph per rank).
MAX_OBJECT_BYTES = 5 * 1024**3
CHUNK_BYTES = 8 * 1024**2
MISSING = ("NoSuchKey", "404", "NotFound")
PRECONDITION = ("PreconditionFailed", "412")
IN_FLIGHT = ("ConditionalRequestConflict", "409")
CONFLICT = (*PRECONDITION, *IN_FLIGHT)
MARKER_ATTEMPTS = 4
WRITER_ROOT = "objects/"
# The request members the producer's conditional writes need (botocore added them with S3's conditional
# writes in 2024; the vLLM image's boto3 is whatever runai-model-streamer-s3 pulled, unpinned).
CONDITIONAL_MEMBERS = {"PutObject": ("IfNoneMatch", "IfMatch"), "DeleteObject": ("IfMatch",)}


def error_code(error: BaseException) -> str | None:
    """The S3 error code of a botocore ClientError (read from its `response`, so botocore is not imported)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None
    return str(response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def file_digest(path: Path) -> tuple[str, str]:
    """(hex, base64) SHA-256 of a file: the manifest records the first, S3's ChecksumSHA256 takes the second."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest(), base64.b64encode(digest.digest()).decode()


def listed(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """The listing entry (Key, ETag, LastModified) of exactly `key`, or None when there is no such object."""
    found = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    return next((entry for entry in found.get("Contents", []) if entry["Key"] == key), None)


def manifest(s3: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    """The finished cache's manifest, or None when the marker is not there (not produced yet)."""
    if listed(s3, bucket, prefix + MARKER) is None:
        return None
    return json.loads(s3.get_object(Bucket=bucket, Key=prefix + MARKER)["Body"].read())


def check_conditional_writes(s3: Any) -> None:
    """Refuse, in one line, a botocore too old for the conditional requests the producer makes: it would
    fail inside the lock's release and leave the lock until it goes stale."""
    model = s3.meta.service_model
    for operation, members in CONDITIONAL_MEMBERS.items():
        missing = [m for m in members if m not in model.operation_model(operation).input_shape.members]
        if missing:
            raise SystemExit(f"this image's botocore has no {operation} {', '.join(missing)} (S3 conditional "
                             "writes): the compile cache cannot be produced safely; upgrade boto3 in the image")


def _safe(relative: str) -> PurePosixPath:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"refused manifest entry {relative!r}: not a path inside the cache")
    return path


def acquire(s3: Any, bucket: str, prefix: str, holder: str, stale_seconds: int, now: float,
            token: str | None = None) -> str | None:
    """Take the lock; its ETag (for the release, and the writer's root), or None when another writer holds
    it. The body carries a fresh token, so every lock write has its own ETag."""
    key = prefix + LOCK
    body = json.dumps({"holder": holder, "token": token or uuid.uuid4().hex}, sort_keys=True).encode()
    try:
        return s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")["ETag"]
    except Exception as error:
        if error_code(error) not in CONFLICT:
            raise
    held = listed(s3, bucket, key)
    if held is None:  # released meanwhile: the Job's next pod tries again
        _say(f"the lock on {prefix} was released while this writer asked for it")
        return None
    age = now - held["LastModified"].timestamp()
    if age <= stale_seconds:
        _say(f"another writer holds {prefix}{LOCK} (taken {age:.0f} s ago)")
        return None
    _say(f"breaking a stale lock on {prefix} ({age:.0f} s old: its writer is past its deadline)")
    try:
        return s3.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=held["ETag"])["ETag"]
    except Exception as error:
        if error_code(error) in CONFLICT:  # another writer broke it first (412), or is breaking it (409)
            _say(f"another writer took the stale lock on {prefix} first")
            return None
        raise


def writer_root(etag: str) -> str:
    """The writer's own root under the prefix, named after its lock's ETag (unique per lock write)."""
    token = etag.strip('"')
    if not token or not all(c.isalnum() or c == "-" for c in token):
        raise ValueError(f"refused lock ETag {etag!r} as a writer root")
    return f"{WRITER_ROOT}{token}/"


def release(s3: Any, bucket: str, prefix: str, etag: str) -> None:
    """Delete the lock only if it is still this writer's."""
    try:
        s3.delete_object(Bucket=bucket, Key=prefix + LOCK, IfMatch=etag)
    except Exception as error:
        if error_code(error) not in (*MISSING, *CONFLICT):
            raise


def publish(s3: Any, bucket: str, prefix: str, source: Path, etag: str, *,
            retry_seconds: float = 1.0) -> int:
    """Upload every file under `source` into this writer's root, then the manifest as the marker
    (If-None-Match: a finished cache is never overwritten; a 409, a write in flight, is retried). The
    number of files."""
    root = writer_root(etag)
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = path.relative_to(source).as_posix()
        size = path.stat().st_size
        if size > MAX_OBJECT_BYTES:
            raise ValueError(f"{relative} is {size} bytes, over the {MAX_OBJECT_BYTES} a single PutObject takes")
        hex_digest, b64_digest = file_digest(path)
        with path.open("rb") as body:
            s3.put_object(Bucket=bucket, Key=prefix + root + relative, Body=body, ChecksumSHA256=b64_digest)
        files[relative] = {"size": size, "sha256": hex_digest}
    if not files:
        raise ValueError(f"nothing to publish under {source}: vLLM wrote no compile artifacts")
    body = json.dumps({"files": files, "root": root}, sort_keys=True).encode()
    checksum = base64.b64encode(hashlib.sha256(body).digest()).decode()
    for attempt in range(1, MARKER_ATTEMPTS + 1):
        try:
            s3.put_object(Bucket=bucket, Key=prefix + MARKER, Body=body, IfNoneMatch="*", ChecksumSHA256=checksum)
            return len(files)
        except Exception as error:
            code = error_code(error)
            if code in PRECONDITION:
                _say(f"{prefix} was marked complete by another writer first; its copy stands ({root} is unused)")
                return len(files)
            if code not in IN_FLIGHT:
                raise
        if listed(s3, bucket, prefix + MARKER) is not None:
            _say(f"{prefix} was marked complete by another writer meanwhile; its copy stands ({root} is unused)")
            return len(files)
        if attempt < MARKER_ATTEMPTS:
            time.sleep(retry_seconds)
    raise RuntimeError(f"the marker of {prefix} met a conflicting write {MARKER_ATTEMPTS} times; not marked")


def seed(s3: Any, bucket: str, prefix: str, target: Path) -> bool:
    """Download a finished cache into `target`, each file checked against the manifest; on a miss or any
    difference nothing is kept (vLLM compiles). Whether it seeded."""
    found = manifest(s3, bucket, prefix)
    if found is None:
        _say(f"compile cache miss: {prefix} not produced yet; vLLM compiles")
        return False
    root = found.get("root", "")
    if root and writer_root(root.removeprefix(WRITER_ROOT).rstrip("/")) != root:
        raise ValueError(f"refused manifest root {root!r}: not a writer root")
    written: list[Path] = []
    try:
        for relative, want in sorted(found["files"].items()):
            path = target.joinpath(*_safe(relative).parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            written.append(path)
            digest = hashlib.sha256()
            body = s3.get_object(Bucket=bucket, Key=prefix + root + relative, ChecksumMode="ENABLED")["Body"]
            with path.open("wb") as out:
                for chunk in iter(lambda stream=body: stream.read(CHUNK_BYTES), b""):
                    digest.update(chunk)
                    out.write(chunk)
            if (path.stat().st_size, digest.hexdigest()) != (want["size"], want["sha256"]):
                raise ValueError(f"{relative} does not match the manifest")
    except Exception:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    _say(f"compile cache hit: seeded {len(written)} files from {prefix}")
    return True


# `lock`'s exit status when another writer holds the lock (the producer waits); any error exits 1 (it stops).
EXIT_HELD = 3


def main(argv: list[str], s3: Any, now: float | None = None) -> int:
    """`state|lock|unlock|publish|seed` as the producer's and the seed's scripts call them (compile_cache.py)."""
    command, bucket, prefix, *rest = argv
    if command == "state":
        print("produced" if manifest(s3, bucket, prefix) is not None else "absent")
        return 0
    if command in ("lock", "unlock", "publish"):
        check_conditional_writes(s3)
    if command == "lock":
        holder, stale_seconds = rest
        etag = acquire(s3, bucket, prefix, holder, int(stale_seconds), time.time() if now is None else now)
        if etag is None:
            return EXIT_HELD
        print(etag)
        return 0
    if command == "unlock":
        release(s3, bucket, prefix, rest[0])
        return 0
    if command == "publish":
        count = publish(s3, bucket, prefix, Path(rest[0]), rest[1])
        _say(f"compile cache produced: {count} files under {prefix}")
        return 0
    if command == "seed":
        try:
            seed(s3, bucket, prefix, Path(rest[0]))
        except Exception as error:  # a cache is an optimisation: a failed seed must never stop a replica
            _say(f"compile cache not seeded ({type(error).__name__}: {error_code(error) or error}); vLLM compiles")
        return 0
    raise SystemExit(f"unknown command {command!r}")
