"""Checks a staged revision against what the Hugging Face Hub recorded for it, before the marker.

Runs inside the staging Job (mounted from its ConfigMap, standard library only, so it needs nothing
the hashed lock does not pin) and in the tests. Every file the allow/ignore patterns select must be
present with the Hub's size and digest: the LFS sha256 for weights (safetensors), the git blob id
for small files (configs, tokenizer, chat templates). A file the Hub does not list is refused too.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CHUNK_BYTES = 8 * 1024 * 1024
# huggingface_hub keeps its download bookkeeping here inside local_dir; it is not part of the model.
BOOKKEEPING_DIR = ".cache"


@dataclass(frozen=True)
class Expected:
    """One file of the revision as the Hub records it."""

    path: str
    size: int
    sha256: str | None  # LFS files: the sha256 of the content
    git_blob_sha1: str | None  # other files: git's blob id, sha1("blob <size>\\0" + content)


def _selected(path: str, allow: Iterable[str], ignore: Iterable[str]) -> bool:
    """huggingface_hub's filter_repo_objects semantics: fnmatch, a pattern ending in "/" means the folder."""
    def fix(pattern: str) -> str:
        return pattern + "*" if pattern.endswith("/") else pattern
    allowed = any(fnmatch.fnmatch(path, fix(p)) for p in allow)
    return allowed and not any(fnmatch.fnmatch(path, fix(p)) for p in ignore)


def expected_files(siblings: Iterable[Mapping], allow: Iterable[str], ignore: Iterable[str]) -> dict[str, Expected]:
    """The Hub's listing of a revision (model_info(..., files_metadata=True).siblings, as dicts with
    rfilename, size, blob_id and lfs {sha256, size}) narrowed to the files the Job downloads."""
    allow, ignore = list(allow), list(ignore)
    chosen: dict[str, Expected] = {}
    for sibling in siblings:
        path = sibling["rfilename"]
        if not _selected(path, allow, ignore):
            continue
        lfs = sibling.get("lfs")
        if lfs:
            chosen[path] = Expected(path, int(lfs["size"]), str(lfs["sha256"]).lower(), None)
        elif sibling.get("blob_id") and sibling.get("size") is not None:
            chosen[path] = Expected(path, int(sibling["size"]), None, str(sibling["blob_id"]).lower())
        else:
            raise ValueError(f"the Hub records no size and digest for {path}; refusing to stage it unchecked")
    if not chosen:
        raise ValueError("the Hub lists no file matching the download patterns for this revision")
    return chosen


def _digests(path: Path, size: int) -> tuple[str, str]:
    """(sha256 of the content, git blob sha1) in one read."""
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            sha256.update(chunk)
            blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest()


def file_problem(path: Path, want: Expected) -> str | None:
    """What is wrong with one downloaded file, or None when it is exactly the Hub's record."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != want.size:
        return f"{size} bytes, the Hub records {want.size}"
    sha256, blob = _digests(path, size)
    if want.sha256 is not None and sha256 != want.sha256:
        return f"sha256 {sha256}, the Hub records {want.sha256}"
    if want.git_blob_sha1 is not None and blob != want.git_blob_sha1:
        return f"git blob {blob}, the Hub records {want.git_blob_sha1}"
    return None


def recorded_digest(want: Expected) -> str:
    """The Hub's digest of a file as one string (`sha256:...` or `git-blob:...`): the S3 backend stores it
    on each uploaded object, so a resumed Job skips exactly the objects already verified and uploaded."""
    return f"sha256:{want.sha256}" if want.sha256 is not None else f"git-blob:{want.git_blob_sha1}"


def problems(directory: Path, expected: Mapping[str, Expected], allow: Iterable[str],
             ignore: Iterable[str]) -> dict[str, str]:
    """Path -> what is wrong with it; empty when the directory holds exactly the recorded revision."""
    found: dict[str, str] = {}
    for want in expected.values():
        problem = file_problem(directory / want.path, want)
        if problem is not None:
            found[want.path] = problem
    allow, ignore = list(allow), list(ignore)
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory).as_posix()
        if path.is_file() and not relative.startswith(BOOKKEEPING_DIR + "/") and relative not in expected \
                and _selected(relative, allow, ignore):
            found[relative] = "not in the Hub's listing of this revision"
    return found


def discard(directory: Path, bad: Iterable[str]) -> None:
    """Delete refused files and their download bookkeeping, so the Job's retry fetches them again
    instead of resuming from a file it believes complete."""
    for relative in bad:
        for path in (directory / relative,
                     directory / BOOKKEEPING_DIR / "huggingface" / "download" / f"{relative}.metadata"):
            path.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    """`stage_verify.py <directory> <listing.json> <patterns.json>`: exit 0 when the directory is the
    recorded revision; else print each problem, discard the refused files and exit 1."""
    directory, listing, patterns = Path(argv[0]), json.loads(Path(argv[1]).read_text()), \
        json.loads(Path(argv[2]).read_text())
    allow, ignore = patterns["allow"], patterns.get("ignore", [])
    expected = expected_files(listing, allow, ignore)
    bad = problems(directory, expected, allow, ignore)
    for relative, why in sorted(bad.items()):
        sys.stderr.write(f"refused {relative}: {why}\n")
    if bad:
        discard(directory, bad)
        sys.stderr.write(f"{len(bad)} of {len(expected)} files do not match the Hub's record; no marker written\n")
        return 1
    sys.stdout.write(f"verified {len(expected)} files against the Hub's record\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
