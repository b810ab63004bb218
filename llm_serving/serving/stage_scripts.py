"""What the weights Jobs run (pure): the file patterns vLLM loads, the hashed lock and verifier they
install, and the two scripts, one staging into a volume (EFS, FSx, a StorageClass), one uploading to
an S3 bucket. llm_serving/serving/weights.py builds the Jobs around them.
"""

from __future__ import annotations

from pathlib import Path

from . import engine

# What vLLM loads from a Hugging Face checkpoint directory: safetensors shards and their index, the
# model and generation configs, tokenizer files and a chat template (vllm 0.33.0 model loader and
# transformers' AutoTokenizer/AutoConfig). Everything else is skipped: Meta's repos also carry the
# original/ consolidated checkpoint (as large again), and some repos duplicate weights as .bin/.pth.
ALLOW_PATTERNS = (
    "*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
    "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab*", "merges.txt",
    "*.jinja", "chat_template.json", "preprocessor_config.json",
)
IGNORE_PATTERNS = ("original/*", "*.pth", "*.bin", "*.pt", "*.gguf", "*.onnx")
# A separate tokenizer revision brings only the tokenizer's files.
TOKENIZER_PATTERNS = ("tokenizer*", "special_tokens_map.json", "*.jinja", "vocab*", "merges.txt")

# The hashed lock the Job installs from (tools/stage_lock.py writes it): exactly the reviewed wheels.
STAGE_REQUIREMENTS = (Path(__file__).with_name("stage-requirements.txt")).read_text()
REQUIREMENTS_DIR = "/etc/stage"

# The module the Job verifies downloads with (standard library only), shipped beside the lock.
STAGE_VERIFY = (Path(__file__).with_name("stage_verify.py")).read_text()

# Runs in the small pinned Python image: installs huggingface_hub from the hashed lock into HOME (the
# root filesystem is read-only), then downloads. `snapshot_download` resumes partial files. Before the
# marker, every downloaded file is checked against the Hub's record of the pinned revision (LFS sha256,
# git blob id for small files, nothing extra): a tampered or truncated shard or chat template fails the
# Job (and is deleted, so the retry fetches it again) instead of being served. The marker is written
# only after every file (model and tokenizer) is in place and verified.
STAGE_SCRIPT = f"""set -eu
if [ -f "$TARGET/{engine.COMPLETE_MARKER}" ]; then
  echo "revision $REVISION of $MODEL_ID already staged in $TARGET"
  exit 0
fi
python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --require-hashes --only-binary=:all: \\
  --target "$HOME/lib" -r {REQUIREMENTS_DIR}/requirements.txt
export PYTHONPATH="$HOME/lib:{REQUIREMENTS_DIR}"
python3 - <<'PY'
import os
import sys
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download

import stage_verify

# token=None: huggingface_hub reads the token file named by HF_TOKEN_PATH, when one is mounted.
token = None


def listing(revision):
    info = HfApi().model_info(os.environ["MODEL_ID"], revision=revision, files_metadata=True, token=token)
    return [{{"rfilename": s.rfilename, "size": s.size, "blob_id": s.blob_id,
              "lfs": {{"sha256": s.lfs.sha256, "size": s.lfs.size}} if s.lfs else None}} for s in info.siblings]


def stage(revision, target, allow, ignore):
    snapshot_download(os.environ["MODEL_ID"], revision=revision, local_dir=target, token=token,
                      allow_patterns=allow, ignore_patterns=ignore)
    expected = stage_verify.expected_files(listing(revision), allow, ignore)
    bad = stage_verify.problems(Path(target), expected, allow, ignore)
    for path, why in sorted(bad.items()):
        print(f"refused {{path}}: {{why}}", file=sys.stderr)
    if bad:
        stage_verify.discard(Path(target), bad)
        sys.exit(f"{{len(bad)}} of {{len(expected)}} files do not match the Hub's record; no marker written")
    print(f"verified {{len(expected)}} files of {{revision}} against the Hub's record")


stage(os.environ["REVISION"], os.environ["TARGET"], {list(ALLOW_PATTERNS)!r}, {list(IGNORE_PATTERNS)!r})
if os.environ.get("TOKENIZER_TARGET"):
    stage(os.environ["TOKENIZER_REVISION"], os.environ["TOKENIZER_TARGET"], {list(TOKENIZER_PATTERNS)!r}, [])
PY
date -u +%Y-%m-%dT%H:%M:%SZ > "$TARGET/{engine.COMPLETE_MARKER}"
echo "staged $MODEL_ID@$REVISION in $TARGET"
"""

# The module the Job checks each LoRA adapter's adapter_config.json with (standard library only), shipped beside
# the verifier when the model has adapters.
STAGE_ADAPTER = (Path(__file__).with_name("stage_adapter.py")).read_text()
# What vLLM 0.33.0 loads from an adapter directory (vllm/lora/lora_model.py:239-241): the config and the
# safetensors weights. adapter_model.bin/.pt would be unpickled; they are never fetched, so an adapter without
# safetensors fails the Job rather than loading pickled code.
ADAPTER_PATTERNS = ("adapter_config.json", "adapter_model.safetensors")

# The adapters of a model with LoRA, staged by the same Job before the model (STAGE_SCRIPT_WITH_ADAPTERS), each
# into its own directory (ADAPTERS, a JSON list of StagedAdapter.job_entry()): a Hub adapter's per repository and
# revision ({model_id, revision, target}), every file checked against the Hub's record of the pinned commit
# (stage_verify); an S3 adapter's per manifest ({bucket, prefix, manifest_sha256, target}), exactly the files the
# pinned manifest lists, each checked against it (stage_adapter.stage_s3, with boto3 from the same lock, as the Job's
# service account, whose Pod Identity role reads the prefix). Then each adapter's adapter_config.json against the
# model (stage_adapter: base model, rank against MAX_LORA_RANK, what vLLM refuses), and only then its own marker. A
# refused adapter fails the Job before any marker of it is written, so the serving pods, which wait for the Job,
# never start with it.
ADAPTER_PROGRAM = f"""import datetime
import json
import os
import sys
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download

import stage_adapter
import stage_verify

token = None
allow = {list(ADAPTER_PATTERNS)!r}


def fetch(adapter, target, name):
    snapshot_download(adapter["model_id"], revision=adapter["revision"], local_dir=str(target), token=token,
                      allow_patterns=allow)
    info = HfApi().model_info(adapter["model_id"], revision=adapter["revision"], files_metadata=True, token=token)
    listing = [{{"rfilename": s.rfilename, "size": s.size, "blob_id": s.blob_id,
                "lfs": {{"sha256": s.lfs.sha256, "size": s.lfs.size}} if s.lfs else None}} for s in info.siblings]
    expected = stage_verify.expected_files(listing, allow, [])
    missing = sorted(set(allow) - set(expected))
    if missing:
        sys.exit(f"adapter {{name}} has no {{missing}}; no marker written")
    bad = stage_verify.problems(target, expected, allow, [])
    for path, why in sorted(bad.items()):
        print(f"refused {{target}}/{{path}}: {{why}}", file=sys.stderr)
    if bad:
        stage_verify.discard(target, bad)
        sys.exit(f"{{len(bad)}} files of adapter {{name}} do not match the Hub's record; no marker written")


def fetch_s3(adapter, target, name):
    import boto3
    from botocore.exceptions import ClientError

    problems = stage_adapter.stage_s3(boto3.client("s3"), adapter["bucket"], adapter["prefix"],
                                      adapter["manifest_sha256"], target, client_errors=(ClientError,))
    for problem in problems:
        print(f"refused {{problem}}", file=sys.stderr)
    if problems:
        sys.exit(f"{{len(problems)}} problems with adapter {{name}}; no marker written")


for adapter in json.loads(os.environ["ADAPTERS"]):
    target = Path(adapter["target"])
    name = (f"s3://{{adapter['bucket']}}/{{adapter['prefix']}} (manifest {{adapter['manifest_sha256']}})"
            if "bucket" in adapter else f"{{adapter['model_id']}}@{{adapter['revision']}}")
    staged = (target / "{engine.COMPLETE_MARKER}").is_file()
    if staged:
        print(f"adapter {{name}} already staged in {{target}}")
    elif "bucket" in adapter:
        fetch_s3(adapter, target, name)
    else:
        fetch(adapter, target, name)
    # Checked again when already staged: the model or maxLoraRank may have changed since.
    config = json.loads((target / "adapter_config.json").read_text())
    problems = stage_adapter.config_problems(config, os.environ["MODEL_ID"], int(os.environ["MAX_LORA_RANK"]))
    if problems:
        sys.exit(f"adapter {{name}} refused: {{'; '.join(problems)}}; no marker written")
    if not staged:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        (target / "{engine.COMPLETE_MARKER}").write_text(stamp + "\\n")
        print(f"verified adapter {{name}} in {{target}}")"""

_MODEL_STAGED = f"""if [ -f "$TARGET/{engine.COMPLETE_MARKER}" ]; then
  echo "revision $REVISION of $MODEL_ID already staged in $TARGET"
  exit 0
fi
"""
_INSTALL = STAGE_SCRIPT[len("set -eu\n" + _MODEL_STAGED):STAGE_SCRIPT.index("python3 - <<'PY'")]
# The volume Job for a model with adapters: install, stage and check the adapters, then the model as STAGE_SCRIPT
# does (skipped when its marker is there).
STAGE_SCRIPT_WITH_ADAPTERS = ("set -eu\n" + _INSTALL + "python3 - <<'PY'\n" + ADAPTER_PROGRAM + "\nPY\n"
                              + _MODEL_STAGED + STAGE_SCRIPT[STAGE_SCRIPT.index("python3 - <<'PY'"):])
assert STAGE_SCRIPT.startswith("set -eu\n" + _MODEL_STAGED)  # the split above follows STAGE_SCRIPT's text


# The S3 backend's Job: the same hashed lock (boto3 beside huggingface_hub), one file at a time so the
# node's disk holds one shard, not the checkpoint. Each file is downloaded from the pinned revision,
# checked against the Hub's record (stage_verify, as on EFS), uploaded under the revision's prefix with
# S3's own SHA-256 checksum and the Hub digest as object metadata, then deleted locally. A retried or
# re-run Job skips every object whose size and recorded digest already match (resumable); an object
# under the prefix that the Hub does not list fails the Job (the writer role cannot delete). The marker
# object is written last, after every file of the model and the tokenizer is in place.
# boto3's multipart upload: parts of 64 MiB (S3 allows 5 MiB-5 GiB per part and 10,000 parts, so a
# 64 MiB part covers files up to 625 GiB) with 8 parts of a file in flight.
UPLOAD_PART_MIB = 64
UPLOAD_CONCURRENCY = 8
STAGE_S3_SCRIPT = f"""set -eu
python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --require-hashes --only-binary=:all: \\
  --target "$HOME/lib" -r {REQUIREMENTS_DIR}/requirements.txt
export PYTHONPATH="$HOME/lib:{REQUIREMENTS_DIR}"
python3 - <<'PY'
import os
import sys
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError
from huggingface_hub import HfApi, hf_hub_download

import stage_verify

token = None
bucket = os.environ["BUCKET"]
s3 = boto3.client("s3")
transfer = TransferConfig(multipart_chunksize={UPLOAD_PART_MIB} * 1024 * 1024,
                          max_concurrency={UPLOAD_CONCURRENCY})
marker = os.environ["PREFIX"] + "{engine.COMPLETE_MARKER}"
work = Path(os.environ["SCRATCH"])


def head(key):
    try:
        return s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def listing(revision):
    info = HfApi().model_info(os.environ["MODEL_ID"], revision=revision, files_metadata=True, token=token)
    return [{{"rfilename": s.rfilename, "size": s.size, "blob_id": s.blob_id,
              "lfs": {{"sha256": s.lfs.sha256, "size": s.lfs.size}} if s.lfs else None}} for s in info.siblings]


def stage(revision, prefix, allow, ignore):
    expected = stage_verify.expected_files(listing(revision), allow, ignore)
    present = {{}}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        present.update({{o["Key"][len(prefix):]: o["Size"] for o in page.get("Contents", [])}})
    extra = sorted(set(present) - set(expected) - {{"{engine.COMPLETE_MARKER}"}})
    if extra:
        sys.exit(f"s3://{{bucket}}/{{prefix}} holds objects the Hub does not list for {{revision}}: {{extra[:5]}}")
    for path, want in sorted(expected.items()):
        key = prefix + path
        digest = stage_verify.recorded_digest(want)
        if present.get(path) == want.size:
            found = head(key)
            if found and found.get("Metadata", {{}}).get("llm-serving-digest") == digest:
                continue
        local = Path(hf_hub_download(os.environ["MODEL_ID"], path, revision=revision, local_dir=work, token=token))
        problem = stage_verify.file_problem(local, want)
        if problem is not None:
            local.unlink(missing_ok=True)
            sys.exit(f"refused {{path}}: {{problem}}; nothing uploaded for it, no marker written")
        s3.upload_file(str(local), bucket, key, Config=transfer,
                       ExtraArgs={{"Metadata": {{"llm-serving-digest": digest}}, "ChecksumAlgorithm": "SHA256"}})
        local.unlink()
    print(f"verified and uploaded {{len(expected)}} files of {{revision}} to s3://{{bucket}}/{{prefix}}")


if head(marker):
    print(f"revision {{os.environ['REVISION']}} already staged in s3://{{bucket}}/{{os.environ['PREFIX']}}")
    sys.exit(0)
stage(os.environ["REVISION"], os.environ["PREFIX"], {list(ALLOW_PATTERNS)!r}, {list(IGNORE_PATTERNS)!r})
if os.environ.get("TOKENIZER_PREFIX"):
    stage(os.environ["TOKENIZER_REVISION"], os.environ["TOKENIZER_PREFIX"], {list(TOKENIZER_PATTERNS)!r}, [])
s3.put_object(Bucket=bucket, Key=marker, Body=b"complete\\n", ChecksumAlgorithm="SHA256")
print(f"staged {{os.environ['MODEL_ID']}}@{{os.environ['REVISION']}} in s3://{{bucket}}/{{os.environ['PREFIX']}}")
PY
"""
# Scratch for one file at a time (the largest shard of a catalog checkpoint is a few GiB; 64 GiB leaves
# room for repositories with single-file checkpoints of tens of GiB). Requested, so the Job lands on a
# node with that much ephemeral storage instead of being evicted mid-upload.
S3_SCRATCH_GIB = 64
# The Job's ephemeral-storage request (and limit): the scratch volume plus 4 GiB for HOME with the installed lock,
# /tmp and the container's own writes. The node it lands on needs this much allocatable ephemeral storage, or the
# Job stays Pending (llm_serving.cluster.node_disk).
S3_STAGE_EPHEMERAL_GIB = S3_SCRATCH_GIB + 4
