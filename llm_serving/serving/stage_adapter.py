"""Checks a LoRA adapter's `adapter_config.json` against the model it will be served on, before its marker.

Runs inside the staging Job (mounted from its ConfigMap beside stage_verify.py, standard library only) and in
the tests. A preview cannot read the adapter's config (it never downloads from the Hub), so the Job is where
the check runs: after the adapter's files match the Hub's record and before its completion marker, so a
mismatched adapter fails the Job, the model's rollout waits on it, and vLLM never starts with it.

What is refused, and why:
- a base model other than the stack's `modelId`. PEFT writes `base_model_name_or_path` from the base model's
  `name_or_path` at save time (peft 0.21.2 peft_model.py:376-381): the Hub id, or the local path it was loaded
  from, often the Hub cache's `.../models--ORG--NAME/snapshots/REV`. Both forms are reduced to `ORG/NAME` and
  compared case-sensitively; vLLM's static `--lora-modules` never compares them (only its filesystem resolver
  does, by exact string: vllm 0.33.0 plugins/lora_resolvers/filesystem_resolver.py).
- what vLLM 0.33.0 itself refuses when it loads the adapter (vllm/lora/peft_helper.py `validate_legal` and
  `_validate_features`): a rank (`r`, or the largest `rank_pattern` value) above `--max-lora-rank`; DoRA
  (`use_dora`); `lora_bias`; `bias` other than "none"; `modules_to_save` other than classifier/score;
  PiSSA/OLoRA/CorDA/LoftQ-style `init_lora_weights`; aLoRA, `layer_replication`, BD-LoRA, QALoRA; and a
  `peft_type` other than LORA. Refused here they fail the Job with the reason, instead of a crash loop at start.

An adapter from S3 (`lora.adapters[].s3`) is staged by `stage_s3` before those checks, with the same rule as the
weights: every file checked before the marker. The prefix's manifest is `SHA256SUMS`, the output of coreutils'
`sha256sum` (`<64 hex>  <path>` per line, `*` before the path in binary mode; GNU coreutils manual, "sha256sum" and
"md5sum invocation"): every platform has the tool, `sha256sum -c SHA256SUMS` checks a copy by hand, and its digest is
one command, where a JSON manifest would need a program of ours to write it byte for byte the same. The manifest's
SHA-256 is pinned in the stack file; the Job refuses another manifest, a path that could leave the adapter's
directory (absolute, `..`, `.`, empty segments, a backslash, a name sha256sum had to escape), pickled weights, a
prefix holding an object the manifest does not list or missing one it lists, a file with another digest, and a
symbolic link in the adapter's directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# init_lora_weights strings vLLM 0.33.0 accepts (peft_helper.py `_init_is_supported`); True/False are fine too.
SUPPORTED_INIT = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
# The Hub cache's directory for a repository: models--ORG--NAME/snapshots/<commit> (huggingface_hub file layout).
_HUB_CACHE = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")


def base_model_id(value: str) -> str:
    """`base_model_name_or_path` as a Hub id: a Hub cache path becomes ORG/NAME, any other path its last two
    parts; a plain id stays as it is."""
    found = _HUB_CACHE.search(value)
    if found:
        return f"{found.group(1)}/{found.group(2)}"
    parts = [part for part in value.rstrip("/").split("/") if part]
    return "/".join(parts[-2:]) if len(parts) > 2 else value.rstrip("/")


def adapter_rank(config: dict[str, Any]) -> int:
    """The rank vLLM checks against --max-lora-rank: max(r, every rank_pattern value)."""
    return max([int(config.get("r", 8)), *(int(r) for r in (config.get("rank_pattern") or {}).values())])


def config_problems(config: dict[str, Any], model_id: str, max_lora_rank: int) -> list[str]:
    """Why this adapter cannot be served on `model_id` at `max_lora_rank`; empty when it can."""
    found: list[str] = []
    if config.get("peft_type", "LORA") != "LORA":
        found.append(f"peft_type {config.get('peft_type')!r} is not LORA")
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        found.append("adapter_config.json names no base_model_name_or_path")
    elif base_model_id(base) != model_id:
        found.append(f"base model {base!r} is not {model_id}")
    # vLLM's PEFTHelper.from_dict requires r, lora_alpha and target_modules, and __post_init__ refuses a rank
    # that is not positive (vllm/lora/peft_helper.py).
    missing = [key for key in ("r", "lora_alpha", "target_modules") if key not in config]
    if missing:
        found.append(f"adapter_config.json lacks {', '.join(missing)}, which vLLM requires")
    ranks = [config.get("r", 8), *(config.get("rank_pattern") or {}).values()]
    if not all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in ranks):
        found.append(f"ranks {ranks} (r and rank_pattern) must be positive integers")
        return found
    rank = adapter_rank(config)
    if rank > max_lora_rank:
        found.append(f"rank {rank} (max of r and rank_pattern) is above maxLoraRank {max_lora_rank}")
    if config.get("use_dora"):
        found.append("DoRA (use_dora) is not supported by vLLM")
    if config.get("lora_bias"):
        found.append("lora_bias is not supported by vLLM")
    if config.get("bias", "none") != "none":
        found.append(f"bias {config.get('bias')!r} is not supported by vLLM (only 'none')")
    unsupported = [m for m in (config.get("modules_to_save") or []) if m not in ("classifier", "score")]
    if unsupported:
        found.append(f"modules_to_save {unsupported} are not supported by vLLM")
    init = config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in SUPPORTED_INIT:
        found.append(f"init_lora_weights {init!r} changes the base weights; vLLM refuses it")
    for key, what in (("alora_invocation_tokens", "aLoRA"), ("layer_replication", "layer_replication"),
                      ("use_bdlora", "BD-LoRA"), ("use_qalora", "QALoRA")):
        if config.get(key):
            found.append(f"{what} is not supported by vLLM")
    return found


# --- adapters from S3 -------------------------------------------------------------------------------------------

MANIFEST = "SHA256SUMS"
MARKER = ".llm-serving-complete"  # engine.COMPLETE_MARKER (a test holds them equal: this module imports nothing)
# The manifest of an adapter lists a handful of files; a bound keeps a wrong object from being read whole.
MANIFEST_MAX_BYTES = 1024 * 1024
# What vLLM 0.33.0 loads from an adapter directory (vllm/lora/lora_model.py:239-241): the config and the safetensors.
REQUIRED = ("adapter_config.json", "adapter_model.safetensors")
# Files Python would unpickle: vLLM loads adapter_model.bin or .pt with torch.load when no safetensors is there
# (lora_model.py:239-241); never staged, as for Hub adapters (stage_scripts.ADAPTER_PATTERNS).
PICKLED = (".bin", ".pt", ".pth", ".pkl", ".pickle")
CHUNK_BYTES = 8 * 1024 * 1024
# sha256sum's line: the digest, a space, ' ' (text) or '*' (binary), the name (GNU coreutils, md5sum invocation).
_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def path_problem(path: str) -> str | None:
    """Why a manifest's path cannot be staged inside the adapter's directory, or None."""
    if path.startswith("/"):
        return "is absolute"
    if "\\" in path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return "holds a backslash or a control character"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "has an empty, '.' or '..' segment"
    if path in (MANIFEST, MARKER):
        return "is the manifest or the completion marker"
    if path.lower().endswith(PICKLED):
        return "is pickled weights, which vLLM would unpickle; publish adapter_model.safetensors only"
    return None


def parse_manifest(text: str) -> tuple[dict[str, str], list[str]]:
    """(path -> sha256, problems) of a SHA256SUMS; the files are usable only when problems is empty."""
    files: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("\\"):
            problems.append(f"line {number}: an escaped name (sha256sum escapes a backslash or newline in it)")
            continue
        found = _SUM_LINE.match(line)
        if not found:
            problems.append(f"line {number} is not `<sha256>  <path>`, as sha256sum writes it")
            continue
        digest, path = found.groups()
        why = path_problem(path)
        if why is not None:
            problems.append(f"{path!r} {why}")
        elif path in files:
            problems.append(f"{path!r} is listed twice")
        else:
            files[path] = digest
    problems += [f"{name} is not listed (vLLM needs it)" for name in REQUIRED if name not in files]
    # A file cannot also be a directory of another listed file: staging would fail on the second one.
    problems += [f"{path!r} is also the directory of {other!r}" for path in files for other in files
                 if other.startswith(path + "/")]
    return files, problems


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _links(target: Path) -> list[str]:
    """Symbolic links at or under the adapter's directory: a write through one could land anywhere it points."""
    found = [str(target)] if target.is_symlink() else []
    if target.is_dir() and not target.is_symlink():
        found += [p.relative_to(target).as_posix() for p in sorted(target.rglob("*")) if p.is_symlink()]
    return found


def _download(client: Any, bucket: str, key: str, local: Path, want: str) -> str | None:
    """The object into `local` through a file beside it, hashed on the way; moved in place only when its SHA-256 is
    `want` (os.replace swaps the name, and O_NOFOLLOW never writes through a link planted at the partial's name)."""
    partial = local.with_name(local.name + ".partial")
    digest = hashlib.sha256()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "wb") as handle:
        while chunk := body.read(CHUNK_BYTES):
            digest.update(chunk)
            handle.write(chunk)
    if digest.hexdigest() != want:
        partial.unlink()
        return f"sha256 {digest.hexdigest()}, the manifest records {want}"
    os.replace(partial, local)
    return None


def stage_s3(client: Any, bucket: str, prefix: str, manifest_sha256: str, target: Path,
             client_errors: Iterable[type[BaseException]] = ()) -> list[str]:
    """Stage the adapter under s3://bucket/prefix into `target`, checked against its pinned manifest; the problems,
    empty when every listed file is in place with its digest and nothing else is. `client` is boto3's S3 client
    (get_object, the list_objects_v2 paginator); `client_errors` (botocore's ClientError) become problems."""
    where = f"s3://{bucket}/{prefix}"
    try:
        return _stage_s3(client, bucket, prefix, manifest_sha256, target, where)
    except tuple(client_errors) as error:
        return [f"{where}: {error}"]


def _listed(client: Any, bucket: str, prefix: str) -> set[str]:
    """The keys under the prefix, relative to it, without the console's folder objects."""
    present: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"][len(prefix):]
            # A zero-byte key ending in "/" is the console's folder (S3 user guide, using-folders.html), not a file.
            if not (key == "" or key.endswith("/")) or item.get("Size", 0):
                present.add(key)
    return present


def _stage_s3(client: Any, bucket: str, prefix: str, manifest_sha256: str, target: Path, where: str) -> list[str]:
    # The listing first: the role's ListBucket grant holds only for a request whose s3:prefix is this prefix, so a
    # GetObject of a missing key answers 403, not 404 (S3 API reference, GetObject "Permissions": 404 needs
    # s3:ListBucket; IAM: a condition on a key absent from the request is false). The listing names what is missing.
    present = _listed(client, bucket, prefix)
    if MANIFEST not in present:
        return [f"{where}{MANIFEST}: not in the prefix (write it with `sha256sum` beside the adapter's files)"]
    manifest = client.get_object(Bucket=bucket, Key=prefix + MANIFEST)
    if int(manifest.get("ContentLength", 0)) > MANIFEST_MAX_BYTES:
        return [f"{where}{MANIFEST} is {manifest['ContentLength']} bytes, more than a manifest's {MANIFEST_MAX_BYTES}"]
    data = manifest["Body"].read(MANIFEST_MAX_BYTES + 1)
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest_sha256:
        return [f"{where}{MANIFEST} has sha256 {digest}, the stack pins {manifest_sha256}: the prefix changed "
                "since it was pinned (or the pin is wrong)"]
    try:
        files, problems = parse_manifest(data.decode("utf-8"))
    except UnicodeDecodeError:
        return [f"{where}{MANIFEST} is not UTF-8 text"]
    if problems:
        return [f"{where}{MANIFEST}: {problem}" for problem in problems]
    problems += [f"{where}{key}: not in the manifest" for key in sorted(present - set(files) - {MANIFEST})]
    problems += [f"{where}{path}: listed in the manifest, not in the prefix" for path in sorted(set(files) - present)]
    if problems:
        return problems
    links = _links(target)
    if links:
        return [f"{target}: symbolic link {link}" for link in links]
    target.mkdir(parents=True, exist_ok=True)
    for path, want in sorted(files.items()):
        local = target / path
        local.parent.mkdir(parents=True, exist_ok=True)
        if _links(target):  # a parent made by an earlier path may not be a link either
            return [f"{target}: symbolic link {link}" for link in _links(target)]
        if local.is_file() and _sha256(local) == want:
            continue  # a retry keeps what an earlier attempt verified
        problem = _download(client, bucket, prefix + path, local, want)
        if problem is not None:
            problems.append(f"{where}{path}: {problem}")
    # The directory as a whole: exactly the manifest's files (and the marker), each with its digest.
    for local in sorted(target.rglob("*")):
        relative = local.relative_to(target).as_posix()
        if local.is_symlink():
            problems.append(f"{target}: symbolic link {relative}")
        elif local.is_file() and relative not in files and relative != MARKER:
            local.unlink()  # not the adapter's: removed, so the retry starts clean
            problems.append(f"{target}/{relative}: not in the manifest (removed)")
        elif local.is_file() and relative in files and _sha256(local) != files[relative]:
            local.unlink()
            problems.append(f"{target}/{relative}: changed after its download (removed)")
    return problems


def main(argv: list[str]) -> int:
    """`stage_adapter.py <adapter directory> <model id> <max lora rank>`: exit 0 when the adapter fits."""
    directory, model_id, max_rank = Path(argv[0]), argv[1], int(argv[2])
    try:
        config = json.loads((directory / "adapter_config.json").read_text())
    except (OSError, ValueError) as error:
        sys.stderr.write(f"refused {directory}: no readable adapter_config.json ({error})\n")
        return 1
    problems = config_problems(config, model_id, max_rank)
    for problem in problems:
        sys.stderr.write(f"refused {directory}: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
