"""The shared compile cache moved in and out of a pod, checked file by file against a manifest of SHA-256
digests: the producer Job's publish (and on S3 its lock) and the serving pods' seed, on a file system (EFS,
FSx for Lustre, an existing class) and on S3 (standard library only, run in the vLLM image, which carries
Python and, for S3, boto3).

vLLM 0.33.0 loads its torch.compile artifacts with `pickle.loads` (vllm/compilation/caching.py), so whoever
can change a cache can run code in every pod seeded from it. The seed therefore copies nothing unless every
file under the cache's root is one the manifest names, with the size and SHA-256 it records, and nothing else
is there: a missing, extra or different file (or a symlink or other non-regular entry) refuses the whole cache.
A refusal is logged on the init container's stderr (`kubectl logs <pod> -c compile-cache-seed`) and never stops
the pod: vLLM compiles for itself, as on a miss. Files are copied and hashed in one read into a staging
directory beside the pod's own cache and moved into place only once all of them match, so a refusal leaves the
pod's cache as it was.

What the check proves is that the files are the ones the manifest's writer published; it cannot tell a good
writer from a bad one. On S3 the manifest is the marker, written once with If-None-Match: * (the producer's
role may only create it: a write without If-None-Match, or with If-Match, is denied, and it may never delete
it, buckets.compile_cache_writer_policy): a writer who comes later, even with the producer's role, cannot
replace it, so a file changed after publication is refused. On a file system the manifest sits in the same
directory as the files, and whoever can write one can rewrite the other: the check catches a torn or corrupted
copy, a file added or changed by something that did not also rewrite the manifest, never a writer of the cache
who does (README, threat model).

Shipped to the pods in a ConfigMap (compile_cache.sync_configmap) and called through a launcher
(compile_cache.sync_function) that passes a boto3 S3 client on S3 and None on a file system, so the program
itself never imports a cloud SDK.

On a file system, under the key's directory: `torch_compile_cache/` (FILES_ROOT), then the manifest
`.llm-serving-manifest.json` (MANIFEST, written last and renamed into place), the directory renamed into
place by the producer's shell, then the marker `.llm-serving-complete` (compile_cache.producer_script).

On S3, under the key's prefix `compile-cache/<model>/<key>/`: each file of vLLM's `torch_compile_cache/` under
the writer's own root `objects/<lock token>/`, uploaded with its SHA-256 (S3 checks it on receipt,
ChecksumSHA256); then the marker `.llm-serving-complete`, a JSON manifest naming that root and every file's
size and SHA-256, written last and only once (If-None-Match: *). A writer never overwrites objects another
writer's manifest names (its root is its own), so a late second writer cannot break a published cache. A prefix
without the marker is never seeded.

Whether the marker or the lock exists is asked with ListObjectsV2 under its exact key, which the roles'
`s3:prefix`-conditioned s3:ListBucket allows, rather than inferred from a GetObject error: S3 answers a
missing key with 404 only to a caller it lets list the bucket (S3 API reference, GetObject
"Permissions"), and whether a prefix-conditioned grant counts is not documented. The seed lists the writer's
root the same way, to find objects the manifest does not name.

One writer: the lock `.llm-serving-lock` is created with If-None-Match: * (S3 conditional writes: the
request fails with 412 Precondition Failed when the key exists, 409 ConditionalRequestConflict when a
concurrent write to it is in flight; docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html).
S3 answers 409 when a conflicting conditional write is in flight and asks for a retry (botocore's S3
model, PutObject IfNoneMatch/IfMatch): the marker's write is retried; a 409 on the lock counts as held.
A lock older than the stale age (the Job's deadline and a margin: no writer of the Job lives longer,
timing.producer_timeouts) is taken over by overwriting exactly that version (If-Match: its ETag), so two
writers that both find it stale cannot both win. The writer releases it with a conditional delete
(If-Match: its own ETag; conditional-deletes.html), never someone else's.

Length: one file because it is what the pods run, shipped whole in one ConfigMap and importable with the
standard library alone; the manifest's check is shared by the file-system and the S3 paths, so neither copy
can drift from the other.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

MARKER = ".llm-serving-complete"
LOCK = ".llm-serving-lock"
# A file system's manifest, beside the files it names (S3's is the marker itself).
MANIFEST = ".llm-serving-manifest.json"
# Where a file system's copy keeps the files, under the key's directory: vLLM's own directory name inside
# VLLM_CACHE_ROOT (compile_cache.VLLM_COMPILE_SUBDIR; a test holds the two equal).
FILES_ROOT = "torch_compile_cache/"
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
SHA256_HEX_LENGTH = 64
# Mode bits a seeded file keeps from its source: never setuid, setgid or sticky, never writable by others.
SEEDED_MODE_MASK = 0o755


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
    for chunk in _file_chunks(path):
        digest.update(chunk)
    return digest.hexdigest(), base64.b64encode(digest.digest()).decode()


# --- the manifest, on every backend ----------------------------------------------------------------------------


def _safe(relative: str) -> PurePosixPath:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts or relative != path.as_posix():
        raise ValueError(f"refused manifest entry {relative!r}: not a path inside the cache")
    return path


def manifest_files(found: Any) -> dict[str, tuple[int, str]]:
    """The manifest's entries as {relative path: (size, sha256)}, each checked to be a path inside the cache
    with a size and a SHA-256; a manifest that is not one is refused."""
    files = found.get("files") if isinstance(found, dict) else None
    if not isinstance(files, dict) or not files:
        raise ValueError("refused manifest: it names no files")
    entries: dict[str, tuple[int, str]] = {}
    for relative, want in files.items():
        _safe(relative)
        size, sha256 = (want.get("size"), want.get("sha256")) if isinstance(want, dict) else (None, None)
        if not isinstance(size, int) or size < 0 or not isinstance(sha256, str) or len(sha256) != SHA256_HEX_LENGTH:
            raise ValueError(f"refused manifest entry {relative!r}: no size and SHA-256")
        entries[relative] = (size, sha256)
    return entries


def check_listing(where: str, expected: Iterable[str], present: Iterable[str]) -> None:
    """Refuse a cache whose files are not exactly the manifest's: one missing, or one it does not name."""
    want, have = set(expected), set(present)
    missing, extra = sorted(want - have), sorted(have - want)
    if missing or extra:
        raise ValueError(f"{where} does not match its manifest: "
                         + "; ".join([*([f"missing {', '.join(missing)}"] if missing else []),
                                      *([f"not in it {', '.join(extra)}"] if extra else [])]))


def _copy_checked(chunks: Iterable[bytes], path: Path, relative: str, want: tuple[int, str]) -> None:
    """Write `chunks` to `path` and refuse them unless their size and SHA-256 are the manifest's."""
    digest = hashlib.sha256()
    size = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if (size, digest.hexdigest()) != want:
        raise ValueError(f"{relative} does not match the manifest")


def _staging(target: Path) -> Path:
    """A fresh directory beside the pod's own cache (the same volume, so a rename moves a file into place)."""
    staging = target.parent / f".{target.name}.seeding"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _install(staging: Path, target: Path, relatives: Iterable[str]) -> None:
    """Move every checked file from the staging directory into the pod's own cache, then drop the staging."""
    for relative in relatives:
        destination = target.joinpath(*_safe(relative).parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging.joinpath(*_safe(relative).parts), destination)
    shutil.rmtree(staging, ignore_errors=True)


def _seed_checked(target: Path, files: dict[str, tuple[int, str]],
                  chunks: Callable[[str], Iterator[bytes]]) -> None:
    """Every file copied and checked into a staging directory, then moved into `target`; on any difference
    nothing reaches `target`."""
    staging = _staging(target)
    try:
        for relative, want in sorted(files.items()):
            _copy_checked(chunks(relative), staging.joinpath(*_safe(relative).parts), relative, want)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _install(staging, target, sorted(files))


# --- on a file system ------------------------------------------------------------------------------------------


def _regular_files(root: Path) -> tuple[list[str], list[str]]:
    """(regular files, anything else) under `root`, as paths relative to it; symlinks are never followed."""
    regular: list[str] = []
    other: list[str] = []
    for directory, subdirectories, names in os.walk(root, followlinks=False):
        for name in [*subdirectories, *names]:
            path = Path(directory) / name
            mode = path.lstat().st_mode
            relative = path.relative_to(root).as_posix()
            if stat.S_ISREG(mode):
                regular.append(relative)
            elif not stat.S_ISDIR(mode):
                other.append(relative)
    return sorted(regular), sorted(other)


def _open_regular(path: Path) -> Any:
    # O_NOFOLLOW: a file swapped for a symlink after the walk is refused rather than read through.
    return os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")


def _file_chunks(path: Path) -> Iterator[bytes]:
    with _open_regular(path) as handle:
        yield from iter(lambda: handle.read(CHUNK_BYTES), b"")


def publish_dir(source: Path, staging: Path) -> int:
    """The producer on a file system: copy every regular file under `source` (vLLM's torch_compile_cache) into
    `staging/torch_compile_cache/`, hashing the bytes it writes, then write the manifest, last, renamed into
    place whole. The producer's shell renames `staging` into place and writes the marker after it. The number
    of files."""
    regular, other = _regular_files(source)
    if other:
        _say(f"not published (not regular files): {', '.join(other)}")
    if not regular:
        raise ValueError(f"nothing to publish under {source}: vLLM wrote no compile artifacts")
    staging.mkdir(parents=True, exist_ok=False)
    files: dict[str, dict[str, Any]] = {}
    for relative in regular:
        path = staging / FILES_ROOT / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        with path.open("wb") as out:
            for chunk in _file_chunks(source / relative):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        path.chmod(stat.S_IMODE((source / relative).lstat().st_mode) & SEEDED_MODE_MASK)
        files[relative] = {"size": size, "sha256": digest.hexdigest()}
    partial = staging / f"{MANIFEST}.partial"
    partial.write_text(json.dumps({"files": files, "root": FILES_ROOT}, sort_keys=True))
    os.replace(partial, staging / MANIFEST)
    return len(files)


def seed_dir(cache: Path, target: Path) -> bool:
    """Copy a finished cache on a file system into `target` when its files are exactly its manifest's;
    otherwise nothing (vLLM compiles). Whether it seeded."""
    if not (cache / MARKER).is_file():
        _say(f"compile cache miss: {cache} not produced yet; vLLM compiles")
        return False
    try:
        found = json.loads((cache / MANIFEST).read_text())
    except FileNotFoundError:
        raise ValueError(f"{cache} has no manifest ({MANIFEST})") from None
    if not isinstance(found, dict) or found.get("root") != FILES_ROOT:
        raise ValueError(f"refused manifest root {found.get('root') if isinstance(found, dict) else found!r}: "
                         f"not {FILES_ROOT}")
    files = manifest_files(found)
    root = cache / FILES_ROOT
    regular, other = _regular_files(root)
    if other:
        raise ValueError(f"{cache}/{FILES_ROOT} holds what is not a regular file: {', '.join(other)}")
    check_listing(f"{cache}/{FILES_ROOT}", files, regular)
    _seed_checked(target, files, lambda relative: _file_chunks(root.joinpath(*_safe(relative).parts)))
    modes = {relative: stat.S_IMODE(root.joinpath(relative).lstat().st_mode) & SEEDED_MODE_MASK for relative in files}
    for relative, mode in modes.items():
        target.joinpath(relative).chmod(mode)
    _say(f"compile cache hit: seeded {len(files)} files from {cache}, each checked against its manifest")
    return True


# --- on S3 -----------------------------------------------------------------------------------------------------


def listed(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """The listing entry (Key, ETag, LastModified) of exactly `key`, or None when there is no such object."""
    found = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    return next((entry for entry in found.get("Contents", []) if entry["Key"] == key), None)


def listed_under(s3: Any, bucket: str, prefix: str) -> list[str]:
    """Every object key under `prefix`, relative to it (ListObjectsV2, page after page)."""
    keys: list[str] = []
    token: str | None = None
    while True:
        page = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, **({"ContinuationToken": token} if token else {}))
        keys += [entry["Key"][len(prefix):] for entry in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        token = page["NextContinuationToken"]


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
    """Upload every regular file under `source` into this writer's root, then the manifest as the marker
    (If-None-Match: a finished cache is never overwritten; a 409, a write in flight, is retried). A symlink
    is neither followed nor published, as on a file system (publish_dir): what it points at is not the
    compile's output but anything the pod may read (its Pod Identity token file among them, EKS user guide
    pod-id-how-it-works.html), which the bucket would then serve to every reader of the cache. The number of
    files."""
    root = writer_root(etag)
    files: dict[str, dict[str, Any]] = {}
    regular, other = _regular_files(source)
    if other:
        _say(f"not published (not regular files): {', '.join(other)}")
    for relative in regular:
        path = source / relative
        size = path.lstat().st_size
        if size > MAX_OBJECT_BYTES:
            raise ValueError(f"{relative} is {size} bytes, over the {MAX_OBJECT_BYTES} a single PutObject takes")
        hex_digest, b64_digest = file_digest(path)
        with _open_regular(path) as body:
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
    """Download a finished cache into `target` when the objects under its writer's root are exactly the
    manifest's, each with the size and SHA-256 it records; on a miss or any difference nothing reaches
    `target` (vLLM compiles). Whether it seeded."""
    found = manifest(s3, bucket, prefix)
    if found is None:
        _say(f"compile cache miss: {prefix} not produced yet; vLLM compiles")
        return False
    root = found.get("root", "") if isinstance(found, dict) else ""
    if not isinstance(root, str) or writer_root(root.removeprefix(WRITER_ROOT).rstrip("/")) != root:
        raise ValueError(f"refused manifest root {root!r}: not a writer root")
    files = manifest_files(found)
    check_listing(prefix + root, files, listed_under(s3, bucket, prefix + root))

    def chunks(relative: str) -> Iterator[bytes]:
        body = s3.get_object(Bucket=bucket, Key=prefix + root + relative, ChecksumMode="ENABLED")["Body"]
        yield from iter(lambda: body.read(CHUNK_BYTES), b"")

    _seed_checked(target, files, chunks)
    _say(f"compile cache hit: seeded {len(files)} files from {prefix}, each checked against its manifest")
    return True


# `lock`'s exit status when another writer holds the lock (the producer waits); any error exits 1 (it stops).
EXIT_HELD = 3


def _seeded(seeding: Callable[[], bool]) -> int:
    """A seed never stops a replica: a refusal or an error says why, in one line, and vLLM compiles."""
    try:
        seeding()
    except Exception as error:  # a cache is an optimisation: a failed seed must never stop a replica
        _say(f"compile cache not seeded ({type(error).__name__}: {error_code(error) or error}); vLLM compiles")
    return 0


def main(argv: list[str], s3: Any, now: float | None = None) -> int:
    """As the producer's and the seed's scripts call it (compile_cache.py): on a file system (`s3` None)
    `publish-dir <source> <staging>` and `seed-dir <cache> <target>`; on S3 `state|lock|unlock|publish|seed
    <bucket> <prefix> ...`."""
    command, *rest = argv
    if command == "publish-dir":
        count = publish_dir(Path(rest[0]), Path(rest[1]))
        _say(f"compile cache published: {count} files and their manifest under {rest[1]}")
        return 0
    if command == "seed-dir":
        return _seeded(lambda: seed_dir(Path(rest[0]), Path(rest[1])))
    bucket, prefix, *rest = rest
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
        return _seeded(lambda: seed(s3, bucket, prefix, Path(rest[0])))
    raise SystemExit(f"unknown command {command!r}")
