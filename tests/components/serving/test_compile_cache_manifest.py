"""The compile cache's manifest on a file system (EFS, FSx for Lustre, an existing class), with real files in a
temporary directory: the producer writes every file with its SHA-256 and the manifest last, and the seed copies
nothing unless the files are exactly the manifest's (a tampered, an extra or a missing file, a symlink, no
manifest), saying why on stderr while the pod starts anyway. The producer's and the seed's own shell run under a
real /bin/sh at the end. S3's side of the same check: test_compile_cache_s3.py."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_serving.serving import cache_sync
from llm_serving.serving.compile_cache import SYNC_DIR, VLLM_COMPILE_SUBDIR, producer_script, seed_script
from tests.components.serving.test_warm_start import key
from tests.support.local_http import serving

ARTIFACTS = {"rank_0_0/abc/vllm_compile_cache.py": b"# compiled graph\n",
             "rank_0_0/abc/inductor_cache/k.so": b"\x7fELF",
             "torch_aot_compile/abc/rank_0_0/model": b"pickled"}


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _produced(tmp_path: Path) -> Path:
    """A finished cache as the producer leaves it: published into its staging directory, then marked."""
    cache = tmp_path / "shared" / "key"
    assert cache_sync.publish_dir(_write(tmp_path / "vllm", ARTIFACTS), cache) == len(ARTIFACTS)
    (cache / cache_sync.MARKER).touch()
    return cache


def _seed(tmp_path: Path, cache: Path, capsys) -> tuple[dict[str, bytes], str]:
    """The seed's command as the init container runs it: (what reached the pod's own cache, what it said)."""
    target = tmp_path / "pod" / "torch_compile_cache"
    assert cache_sync.main(["seed-dir", str(cache), str(target)], None) == 0
    return (_tree(target) if target.exists() else {}), capsys.readouterr().err


def test_the_producer_writes_every_file_with_its_digest_and_the_manifest_last(tmp_path):
    cache = _produced(tmp_path)
    assert _tree(cache / "torch_compile_cache") == ARTIFACTS
    manifest = json.loads((cache / ".llm-serving-manifest.json").read_text())
    assert manifest == {"root": "torch_compile_cache/", "files": {
        name: {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
        for name, content in ARTIFACTS.items()}}
    # Renamed into place whole: no partial manifest is ever left beside it.
    assert sorted(p.name for p in cache.iterdir()) == [".llm-serving-complete", ".llm-serving-manifest.json",
                                                       "torch_compile_cache"]
    assert cache_sync.FILES_ROOT == f"{VLLM_COMPILE_SUBDIR}/"


def test_the_producer_refuses_an_empty_cache(tmp_path):
    (tmp_path / "vllm").mkdir()
    with pytest.raises(ValueError, match="vLLM wrote no compile artifacts"):
        cache_sync.publish_dir(tmp_path / "vllm", tmp_path / "staging")


def test_a_good_cache_is_seeded_whole(tmp_path, capsys):
    cache = _produced(tmp_path)
    (tmp_path / "vllm" / "rank_0_0" / "abc" / "k2.so").write_bytes(b"x")
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == ARTIFACTS
    assert said == f"compile cache hit: seeded 3 files from {cache}, each checked against its manifest\n"
    assert sorted(p.name for p in (tmp_path / "pod").iterdir()) == ["torch_compile_cache"]  # no staging left


def test_a_tampered_file_refuses_the_whole_cache(tmp_path, capsys):
    cache = _produced(tmp_path)
    (cache / "torch_compile_cache" / "torch_aot_compile/abc/rank_0_0/model").write_bytes(b"import os; os.system(1)")
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == {}  # not even the files checked before it
    assert said == ("compile cache not seeded (ValueError: torch_aot_compile/abc/rank_0_0/model does not match the "
                    "manifest); vLLM compiles\n")


def test_a_tampered_file_of_the_same_size_is_refused_too(tmp_path, capsys):
    cache = _produced(tmp_path)
    (cache / "torch_compile_cache" / "torch_aot_compile/abc/rank_0_0/model").write_bytes(b"pickleD")
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == {}
    assert "torch_aot_compile/abc/rank_0_0/model does not match the manifest" in said


def test_an_extra_file_refuses_the_whole_cache(tmp_path, capsys):
    cache = _produced(tmp_path)
    _write(cache / "torch_compile_cache", {"rank_0_0/abc/inductor_cache/extra.py": b"import os"})
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == {}
    assert said == (f"compile cache not seeded (ValueError: {cache}/torch_compile_cache/ does not match its manifest: "
                    "not in it rank_0_0/abc/inductor_cache/extra.py); vLLM compiles\n")


def test_a_missing_file_refuses_the_whole_cache(tmp_path, capsys):
    cache = _produced(tmp_path)
    (cache / "torch_compile_cache" / "rank_0_0/abc/inductor_cache/k.so").unlink()
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == {}
    assert said == (f"compile cache not seeded (ValueError: {cache}/torch_compile_cache/ does not match its manifest: "
                    "missing rank_0_0/abc/inductor_cache/k.so); vLLM compiles\n")


def test_a_symlink_in_the_cache_is_refused_never_followed(tmp_path, capsys):
    # A symlink named like a manifest entry would read another file (here one outside the cache) through it.
    cache = _produced(tmp_path)
    entry = cache / "torch_compile_cache" / "torch_aot_compile/abc/rank_0_0/model"
    outside = _write(tmp_path / "elsewhere", {"model": b"pickled"}) / "model"
    entry.unlink()
    entry.symlink_to(outside)
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == {}
    assert said == (f"compile cache not seeded (ValueError: {cache}/torch_compile_cache/ holds what is not a regular "
                    "file: torch_aot_compile/abc/rank_0_0/model); vLLM compiles\n")


def test_a_cache_without_a_manifest_is_refused(tmp_path, capsys):
    # Marked before manifests existed (or the manifest removed): nothing says what the files should be.
    cache = _produced(tmp_path)
    (cache / ".llm-serving-manifest.json").unlink()
    seeded, said = _seed(tmp_path, cache, capsys)
    assert seeded == {}
    assert said == (f"compile cache not seeded (ValueError: {cache} has no manifest (.llm-serving-manifest.json)); "
                    "vLLM compiles\n")


@pytest.mark.parametrize(("manifest", "refusal"), [
    ({"root": "../weights/", "files": {"a": {"size": 1, "sha256": "0" * 64}}}, "refused manifest root"),
    ({"root": "torch_compile_cache/", "files": {"../../x": {"size": 1, "sha256": "0" * 64}}},
     "not a path inside the cache"),
    ({"root": "torch_compile_cache/", "files": {}}, "it names no files"),
], ids=["root-elsewhere", "entry-outside", "no-files"])
def test_a_manifest_naming_files_outside_the_cache_is_refused(tmp_path, manifest, refusal):
    cache = _produced(tmp_path)
    (cache / ".llm-serving-manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=refusal):
        cache_sync.seed_dir(cache, tmp_path / "pod" / "torch_compile_cache")


def test_a_cache_not_marked_yet_is_a_miss(tmp_path, capsys):
    cache = _produced(tmp_path)
    (cache / ".llm-serving-complete").unlink()
    seeded, said = _seed(tmp_path, cache, capsys)
    assert (seeded, said) == ({}, f"compile cache miss: {cache} not produced yet; vLLM compiles\n")


def test_a_refusal_leaves_the_pods_own_cache_as_it_was(tmp_path, capsys):
    # A restarted pod keeps its cache volume: a refused seed neither adds to it nor overwrites it.
    cache = _produced(tmp_path)
    own = _write(tmp_path / "pod" / "torch_compile_cache", {"rank_0_0/abc/vllm_compile_cache.py": b"vLLM's own"})
    _write(cache / "torch_compile_cache", {"extra": b"x"})
    _seed(tmp_path, cache, capsys)
    assert _tree(own) == {"rank_0_0/abc/vllm_compile_cache.py": b"vLLM's own"}


# --- the producer's and the seed's shell, under a real /bin/sh ---------------------------------------------------


class _Health(http.server.BaseHTTPRequestHandler):
    """vLLM's /health once the stand-in has written its artifacts (the file `ready`), 503 before."""

    ready: Path

    def do_GET(self) -> None:
        self.send_response(200 if self.ready.exists() else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _shell(tmp_path: Path, script: str, port: int) -> subprocess.CompletedProcess:
    """`script` with the pod's paths moved under tmp_path, cache_sync.py read from the source tree, the health
    check on `port` and its poll shortened; `python3` is this interpreter and `vllm` a stand-in that writes
    ARTIFACTS into VLLM_CACHE_ROOT's compile directory, says it is ready and waits to be stopped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").unlink(missing_ok=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    compile_dir = tmp_path / "pod-cache" / "vllm" / "torch_compile_cache"
    compiled = _write(tmp_path / "compiled", ARTIFACTS)
    (bin_dir / "vllm").write_text(f"#!/bin/sh\nmkdir -p {compile_dir} && cp -R {compiled}/. {compile_dir}/ && "
                                  f"touch {tmp_path / 'ready'}; exec sleep 60\n")
    (bin_dir / "vllm").chmod(0o755)
    script = (script.replace("/models/compile-cache", str(tmp_path / "shared"))
              .replace("/var/cache/vllm", str(tmp_path / "pod-cache"))
              .replace(SYNC_DIR, str(Path(cache_sync.__file__).parent))
              .replace("http://127.0.0.1:8000/health", f"http://127.0.0.1:{port}/health")
              .replace("  sleep 10\n", "  sleep 0.05\n"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_the_producer_publishes_with_its_manifest_and_the_seed_copies_it(tmp_path):
    _Health.ready = tmp_path / "ready"
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)) as server:
        port = server.server_address[1]
        produced = _shell(tmp_path, producer_script(key(), ["/models/m"], stale_lock_seconds=3660), port)
    assert produced.returncode == 0, produced.stdout + produced.stderr
    final = tmp_path / "shared" / key().relative_dir()
    assert produced.stdout.splitlines()[-1] == f"compile cache produced: {key().relative_dir()}"
    assert sorted(p.name for p in final.iterdir()) == [".llm-serving-complete", ".llm-serving-manifest.json",
                                                       "torch_compile_cache"]
    assert sorted(json.loads((final / ".llm-serving-manifest.json").read_text())["files"]) == sorted(ARTIFACTS)
    assert not (final.parent / (final.name + ".lock")).exists()
    # A new pod: its own cache is empty, and the seed fills it from the shared copy, checked.
    shutil.rmtree(tmp_path / "pod-cache")
    seeded = _shell(tmp_path, seed_script(key()), port)
    assert seeded.returncode == 0
    assert seeded.stderr == f"compile cache hit: seeded 3 files from {final}, each checked against its manifest\n"
    assert _tree(tmp_path / "pod-cache" / "vllm" / "torch_compile_cache") == ARTIFACTS
    # Someone changes a file after the fact: the next pod's seed refuses it and starts anyway.
    (final / "torch_compile_cache" / "torch_aot_compile/abc/rank_0_0/model").write_bytes(b"evil!!!")
    shutil.rmtree(tmp_path / "pod-cache")
    refused = _shell(tmp_path, seed_script(key()), port)
    assert refused.returncode == 0
    assert refused.stderr == ("compile cache not seeded (ValueError: torch_aot_compile/abc/rank_0_0/model does not "
                              "match the manifest); vLLM compiles\n")
    assert _tree(tmp_path / "pod-cache") == {}


def test_a_producer_whose_rename_fails_stops_without_marking_or_saying_produced(tmp_path):
    # The staging directory cannot be moved into place (a stand-in `mv` refuses it, as a full or read-only volume
    # would): the producer fails, so its Job does, and no marker names a cache that is not there.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mv").write_text('#!/bin/sh\ncase "$1" in *.partial) exit 1;; esac\nexec /bin/mv "$@"\n')
    (bin_dir / "mv").chmod(0o755)
    _Health.ready = tmp_path / "ready"
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)) as server:
        produced = _shell(tmp_path, producer_script(key(), ["/models/m"], stale_lock_seconds=3660),
                          server.server_address[1])
    final = tmp_path / "shared" / key().relative_dir()
    assert produced.returncode == 1, produced.stdout + produced.stderr
    assert "compile cache produced" not in produced.stdout
    assert not final.exists() and (final.parent / (final.name + ".partial")).is_dir()
    assert not (final.parent / (final.name + ".lock")).exists()  # released on the way out
