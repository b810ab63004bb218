"""The staging Job refuses weights that are not the Hub's recorded revision, before the marker.

A local revision (two safetensors shards, a config, a chat template, Meta's original/ copy that the
Job skips) with its Hub listing built the way the Hub records it: LFS sha256 for the shards, git blob
ids for small files. One corrupted shard, a truncated file, a missing or a planted file is refused;
the intact set is accepted, through the same code and command line the Job runs.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llm_serving.serving import stage_verify, weights

SHARDS = {"model-00001-of-00002.safetensors": b"\x00shard-one" * 4096,
          "model-00002-of-00002.safetensors": b"\x01shard-two" * 4096}
SMALL = {"config.json": b'{"num_hidden_layers": 2}\n', "chat_template.jinja": b"{{ messages }}\n"}
SKIPPED = {"original/consolidated.00.pth": b"meta copy"}
ALLOW, IGNORE = list(weights.ALLOW_PATTERNS), list(weights.IGNORE_PATTERNS)


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def hub_listing() -> list[dict]:
    """Siblings as model_info(files_metadata=True) records them (git blob ids for LFS files are the
    pointer's, so only the LFS sha256 identifies their content)."""
    rows = [{"rfilename": name, "size": 134, "blob_id": _blob_id(b"pointer " + name.encode()),
             "lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}} for name, data in SHARDS.items()]
    rows += [{"rfilename": name, "size": len(data), "blob_id": _blob_id(data), "lfs": None}
             for name, data in {**SMALL, **SKIPPED}.items()]
    return rows


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    for name, data in {**SHARDS, **SMALL, **SKIPPED}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    # huggingface_hub's own bookkeeping inside local_dir is not part of the revision.
    bookkeeping = tmp_path / ".cache" / "huggingface" / "download"
    bookkeeping.mkdir(parents=True)
    (bookkeeping / "model-00002-of-00002.safetensors.metadata").write_text("resume state")
    return tmp_path


def check(directory: Path) -> dict[str, str]:
    return stage_verify.problems(directory, stage_verify.expected_files(hub_listing(), ALLOW, IGNORE), ALLOW, IGNORE)


def test_the_listing_selects_exactly_what_the_job_downloads():
    expected = stage_verify.expected_files(hub_listing(), ALLOW, IGNORE)
    assert sorted(expected) == ["chat_template.jinja", "config.json", *sorted(SHARDS)]
    assert expected["model-00001-of-00002.safetensors"].sha256 == hashlib.sha256(
        SHARDS["model-00001-of-00002.safetensors"]).hexdigest()
    assert expected["config.json"].git_blob_sha1 == _blob_id(SMALL["config.json"])


def test_an_intact_revision_is_accepted(staged):
    assert check(staged) == {}


def test_a_corrupted_shard_of_the_same_size_is_refused(staged):
    shard = staged / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    (problem,) = check(staged).items()
    assert problem[0] == "model-00002-of-00002.safetensors"
    assert problem[1] == (f"sha256 {hashlib.sha256(bytes(data)).hexdigest()}, the Hub records "
                          f"{hashlib.sha256(SHARDS['model-00002-of-00002.safetensors']).hexdigest()}")


def test_a_rewritten_chat_template_is_refused_by_its_git_blob_id(staged):
    rewritten = b"{{ evil!!!! }}\n"
    assert len(rewritten) == len(SMALL["chat_template.jinja"])  # same size: only the digest tells
    (staged / "chat_template.jinja").write_bytes(rewritten)
    assert check(staged) == {"chat_template.jinja": f"git blob {_blob_id(rewritten)}, "
                                                    f"the Hub records {_blob_id(SMALL['chat_template.jinja'])}"}


def test_truncated_missing_and_planted_files_are_refused(staged):
    (staged / "model-00001-of-00002.safetensors").write_bytes(b"short")
    (staged / "config.json").unlink()
    (staged / "extra.safetensors").write_bytes(b"planted")
    assert check(staged) == {
        "model-00001-of-00002.safetensors":
            f"5 bytes, the Hub records {len(SHARDS['model-00001-of-00002.safetensors'])}",
        "config.json": "missing",
        "extra.safetensors": "not in the Hub's listing of this revision",
    }


def test_a_listing_without_digests_is_refused_rather_than_trusted():
    with pytest.raises(ValueError, match="records no size and digest for config.json"):
        stage_verify.expected_files([{"rfilename": "config.json", "size": None, "blob_id": None, "lfs": None}],
                                    ALLOW, IGNORE)
    with pytest.raises(ValueError, match="lists no file matching"):
        stage_verify.expected_files([], ALLOW, IGNORE)


def _run(staged: Path, tmp_path_factory) -> subprocess.CompletedProcess:
    scratch = tmp_path_factory.mktemp("listing")
    (scratch / "listing.json").write_text(json.dumps(hub_listing()))
    (scratch / "patterns.json").write_text(json.dumps({"allow": ALLOW, "ignore": IGNORE}))
    return subprocess.run([sys.executable, stage_verify.__file__, str(staged), str(scratch / "listing.json"),
                           str(scratch / "patterns.json")], capture_output=True, text=True, check=False)


def test_the_command_line_accepts_the_intact_set(staged, tmp_path_factory):
    result = _run(staged, tmp_path_factory)
    assert (result.returncode, result.stdout, result.stderr) == (0, "verified 4 files against the Hub's record\n", "")


def test_the_command_line_refuses_a_corrupted_shard_and_discards_it_for_the_retry(staged, tmp_path_factory):
    shard = staged / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[::-1])
    result = _run(staged, tmp_path_factory)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "1 of 4 files do not match the Hub's record; no marker written"
    assert result.stderr.startswith("refused model-00002-of-00002.safetensors: sha256 ")
    # Gone with its resume bookkeeping: the retry downloads it again instead of trusting it.
    assert not shard.exists()
    assert not (staged / ".cache/huggingface/download/model-00002-of-00002.safetensors.metadata").exists()
    assert (staged / "model-00001-of-00002.safetensors").exists()


def test_the_job_verifies_both_revisions_before_it_writes_the_marker():
    script = weights.STAGE_SCRIPT
    program = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    ast.parse(program)  # the embedded Python is valid
    assert script.startswith("set -eu\n")  # a failed verification stops the script before the marker
    assert script.index("\nPY\n") < script.index("date -u +%Y-%m-%dT%H:%M:%SZ > \"$TARGET/")
    assert program.count("stage(os.environ[") == 2 and "files_metadata=True" in program
    assert "stage_verify.problems(" in program and "sys.exit(" in program
