"""The shared compile cache on S3 around cache_sync.py: the producer's and the seed's shell under a real
/bin/sh (cache_sync's own requests are test_compile_cache_s3.py's), the producer's role policy, and the
room its Job needs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from llm_serving.serving import Footprint, Strategy, Supply, producer_room
from llm_serving.serving.compile_cache import producer_script, seed_script, sync_function
from llm_serving.storage import buckets
from tests.components.serving.test_compile_cache_s3 import BUCKET, PREFIX, SHA, key
from tests.support import iam_eval

# --- the shell around it, under a real /bin/sh --------------------------------------------------------------


def _run(tmp_path: Path, script: str, *, state: str = "absent", lock_code: int = 0, vllm: str = "exit 1",
         terminate: bool = False, state_under_lock: str = "absent",
         slow_state_under_lock: bool = False, after_refusals: str | None = None) -> tuple[int, str, list[str]]:
    """`script` with its `sync` function replaced by a recorder (cache_sync's requests are the Stubber tests'),
    and `vllm` a stand-in on PATH. With `lock_code` the lock is refused; `after_refusals` then says what the other
    writer does once this one has waited twice: `released` (the lock is free) or `produced` (the cache marked)."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\n{vllm}\n")
    (bin_dir / "vllm").chmod(0o755)
    locked = tmp_path / "locked"
    # A look under the lock that takes a while, as a real one does (a Python start and an S3 list).
    slow = f"touch {tmp_path / 'vllm-running'}; sleep 0.5;" if slow_state_under_lock else ""
    other = tmp_path / "other-writer"
    refusals = tmp_path / "refusals"
    # The other writer acts after this one was refused twice (a file the recorder writes, read by the recorder).
    act = (f"[ $(wc -l < {refusals}) -ge 2 ] && echo {after_refusals} > {other}; " if after_refusals else "")
    recorder = (f'sync() {{ echo "$*" >> {calls}; case $1 in '
                f"state) if [ -f {locked} ]; then {slow} echo {state_under_lock}; "
                f"elif grep -qx produced {other} 2>/dev/null; then echo produced; else echo {state}; fi;; "
                f"lock) if [ {lock_code} -eq 0 ] || grep -qx released {other} 2>/dev/null; then "
                f"touch {locked}; echo '\"e1\"'; else echo x >> {refusals}; {act}return {lock_code}; fi;; esac; }}")
    script = script.replace(sync_function(key()), recorder)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOSTNAME": "pod-a",
           "LLM_SERVING_CACHE_BUCKET": BUCKET}
    process = subprocess.Popen(["/bin/sh", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    if terminate:
        for _ in range(200):
            if (tmp_path / "vllm-running").exists():
                break
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    return process.returncode, out, calls.read_text().splitlines() if calls.exists() else []


def test_the_producer_leaves_a_finished_cache_alone(tmp_path):
    code, out, calls = _run(tmp_path, producer_script(key(), ["s3://b/p/"], stale_lock_seconds=1280), state="produced")
    assert (code, out, calls) == (0, "compile cache already produced\n", ["state"])


def _waiting_producer() -> str:
    return producer_script(key(), ["s3://b/p/"], stale_lock_seconds=1280, poll_seconds=0.01)


def test_a_producer_that_finds_the_lock_held_waits_and_uses_the_other_writers_cache(tmp_path):
    code, out, calls = _run(tmp_path, _waiting_producer(), lock_code=3, after_refusals="produced")
    assert (code, out) == (0, "compile cache produced by another writer\n")  # vLLM never started
    # Refused, looked, refused (the other writer marks the cache meanwhile), looked: done, no lock of its own.
    assert calls == ["state", "lock pod-a 1280", "state", "lock pod-a 1280", "state"]


def test_a_producer_whose_lock_request_fails_stops_at_once(tmp_path):
    # Not "held" (exit 3) but an error, as an access denied: no waiting out the deadline on a misconfiguration.
    code, _, calls = _run(tmp_path, _waiting_producer(), lock_code=1)
    assert (code, calls) == (1, ["state", "lock pod-a 1280"])


def test_a_producer_that_finds_the_lock_held_takes_it_once_released(tmp_path):
    code, out, calls = _run(tmp_path, _waiting_producer(), lock_code=3, after_refusals="released")
    assert (code, out) == (1, "vLLM exited before it was ready\n")  # its own compile, here failing
    assert calls[-3:] == ["lock pod-a 1280", "state", 'unlock "e1"']


def test_the_producer_releases_its_lock_when_vllm_fails_and_publishes_nothing(tmp_path):
    code, out, calls = _run(tmp_path, producer_script(key(), ["s3://b/p/"], stale_lock_seconds=1280))
    assert (code, out) == (1, "vLLM exited before it was ready\n")
    assert calls == ["state", "lock pod-a 1280", "state", 'unlock "e1"']


def test_a_producer_that_gets_the_lock_after_another_marked_the_cache_stops_and_releases(tmp_path):
    code, out, calls = _run(tmp_path, producer_script(key(), ["s3://b/p/"], stale_lock_seconds=1280),
                            state_under_lock="produced")
    assert (code, out) == (0, "compile cache produced meanwhile\n")  # vLLM never started
    assert calls == ["state", "lock pod-a 1280", "state", 'unlock "e1"']


def test_a_terminated_producer_releases_its_lock(tmp_path):
    running = tmp_path / "vllm-running"
    code, _, calls = _run(tmp_path, producer_script(key(), ["s3://b/p/"], stale_lock_seconds=1280),
                          vllm=f"touch {running}; exec sleep 60", terminate=True)
    assert (code, calls) == (143, ["state", "lock pod-a 1280", "state", 'unlock "e1"'])


def test_a_producer_terminated_while_it_looks_again_under_the_lock_releases_it(tmp_path):
    code, _, calls = _run(tmp_path, producer_script(key(), ["s3://b/p/"], stale_lock_seconds=1280),
                          slow_state_under_lock=True, terminate=True)
    assert (code, calls) == (143, ["state", "lock pod-a 1280", "state", 'unlock "e1"'])


def test_the_producer_publishes_after_vllm_and_marks_last():
    lines = producer_script(key(), ["s3://b/p/", "--port", "8000"], stale_lock_seconds=1280).splitlines()
    assert lines[-1] == 'sync publish /var/cache/vllm/vllm/torch_compile_cache "$etag"'
    assert lines[-2] == 'kill -TERM "$pid"; wait "$pid" || true'
    assert "vllm serve s3://b/p/ --port 8000 --host 127.0.0.1 &" in lines


def test_the_seed_downloads_into_the_pods_own_cache(tmp_path):
    code, _, calls = _run(tmp_path, seed_script(key()))
    assert (code, calls) == (0, ["seed /var/cache/vllm/vllm/torch_compile_cache"])
    assert sync_function(key()).endswith(f'"$command" "$LLM_SERVING_CACHE_BUCKET" {PREFIX} "$@"; }}')


# --- the producer's role --------------------------------------------------------------------------------------


def test_the_producer_may_write_only_its_cache_prefix_and_the_lock_and_marker_only_conditionally():
    arn = f"arn:aws:s3:::{BUCKET}"
    weights = f"meta-llama/Llama-3.1-70B-Instruct/{SHA}/"
    assert buckets.compile_cache_writer_policy(arn, [weights], PREFIX, lock=".llm-serving-lock",
                                               marker=".llm-serving-complete") == {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject", "Resource": [f"{arn}/{weights}*"]},
            {"Sid": "WriteCompileCache", "Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"],
             "Resource": [f"{arn}/{PREFIX}*"]},
            {"Sid": "OnlyConditionalLockWrites", "Effect": "Deny", "Action": "s3:PutObject",
             "Resource": f"{arn}/{PREFIX}.llm-serving-lock",
             "Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}}},
            {"Sid": "OnlyCreateTheMarker", "Effect": "Deny", "Action": "s3:PutObject",
             "Resource": f"{arn}/{PREFIX}.llm-serving-complete", "Condition": {"Null": {"s3:if-none-match": "true"}}},
            {"Sid": "NeverOverwriteTheMarker", "Effect": "Deny", "Action": "s3:PutObject",
             "Resource": f"{arn}/{PREFIX}.llm-serving-complete", "Condition": {"Null": {"s3:if-match": "false"}}},
            {"Sid": "ReleaseOwnLock", "Effect": "Allow", "Action": "s3:DeleteObject",
             "Resource": f"{arn}/{PREFIX}.llm-serving-lock",
             "Condition": {"Null": {"s3:if-match": "false"}, "StringNotEquals": {"s3:if-match": "*"}}},
            {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": arn,
             "Condition": {"StringLike": {"s3:prefix": [f"{PREFIX}*", f"{weights}*"]}}},
        ],
    }
    with pytest.raises(ValueError, match="one cache prefix ending in /"):
        buckets.compile_cache_writer_policy(arn, [weights], PREFIX.rstrip("/"), lock="l", marker="m")


def _producer_policy() -> dict:
    return buckets.compile_cache_writer_policy(f"arn:aws:s3:::{BUCKET}", [f"meta-llama/Llama-3.1-70B-Instruct/{SHA}/"],
                                               PREFIX, lock=".llm-serving-lock", marker=".llm-serving-complete")


def _may(action: str, key: str, **headers: str) -> bool:
    """Whether the producer's role may `action` the object `key` under its prefix with these conditional headers
    (If-None-Match as if_none_match, If-Match as if_match: their condition keys s3:if-none-match, s3:if-match)."""
    context = {f"s3:{name.replace('_', '-')}": value for name, value in headers.items()}
    return iam_eval.allowed(_producer_policy(), action, f"arn:aws:s3:::{BUCKET}/{PREFIX}{key}", context)


def test_the_producer_role_may_create_the_marker_but_never_replace_it():
    # What cache_sync.publish sends: If-None-Match: *, which S3 refuses with 412 once the marker exists.
    assert _may("s3:PutObject", ".llm-serving-complete", if_none_match="*")
    # An overwrite of the published manifest, conditional on its ETag or not, is denied: the seed trusts it.
    assert not _may("s3:PutObject", ".llm-serving-complete", if_match='"m1"')
    assert not _may("s3:PutObject", ".llm-serving-complete", if_match='"m1"', if_none_match="*")
    assert not _may("s3:PutObject", ".llm-serving-complete")
    assert not _may("s3:DeleteObject", ".llm-serving-complete", if_match='"m1"')
    # The artifacts under its own root are plain writes.
    assert _may("s3:PutObject", "objects/e1/rank_0_0/model")


def test_the_producer_role_takes_and_releases_the_lock_only_by_its_etag():
    assert _may("s3:PutObject", ".llm-serving-lock", if_none_match="*")  # cache_sync.acquire
    assert _may("s3:PutObject", ".llm-serving-lock", if_match='"old"')  # a stale lock taken over
    assert not _may("s3:PutObject", ".llm-serving-lock")
    assert _may("s3:DeleteObject", ".llm-serving-lock", if_match='"e1"')  # cache_sync.release
    # If-Match: * deletes whichever lock is there, another live writer's included.
    assert not _may("s3:DeleteObject", ".llm-serving-lock", if_match="*")
    assert not _may("s3:DeleteObject", ".llm-serving-lock")


# --- the room the producer needs ------------------------------------------------------------------------------


def _p5(nodes: int) -> Supply:
    return Supply(gpus_per_node=8, nodes=nodes, instance_type="p5.48xlarge", autoscaled=True)


def test_the_producer_is_counted_after_peak_and_the_surge():
    model = Footprint("llama-70b", 4, 2, 4, cold_start_seconds=510)
    surge = {"llama-70b": Strategy("RollingUpdate", max_surge=1)}
    # 4 x TP4 at peak + a surge TP4 + the producer's TP4 = 24 GPUs: 3 nodes of 8.
    room = producer_room([model], surge, [model], _p5(4))
    assert (room.nodes_needed, room.producers, room.refused) == (3, ("llama-70b",), {})
    refused = producer_room([model], surge, [model], _p5(2))
    assert refused.producers == ()
    assert refused.refused == {"llama-70b": (
        "no room for its producer Job (4 GPUs on one node while it compiles) beside llama-70b 4 x TP4 and the "
        "rollouts' surge replicas: that needs 3 nodes, the node group supplies 2 x p5.48xlarge (8 GPUs each; "
        "maxNodes, with a node autoscaler)", 3)}
    # Without a surge (one replica at a time) only peak and the producer count.
    assert producer_room([model], {"llama-70b": Strategy("RollingUpdate", max_unavailable=1)}, [model],
                         _p5(3)).nodes_needed == 3


def test_shared_compile_cache_without_room_for_its_producer_is_refused_at_preview():
    from tests.stacks.checks.test_model_checks import lines

    # 3 replicas x TP4 + a surge fill both nodes: the producer would wait for a replica's GPUs.
    assert lines(replicas=3, compileCache="shared") == [
        "llm-serving:gpuNodeGroup.scaling.maxNodes: models[llama-70b].compileCache shared: no room for its producer "
        "Job (4 GPUs on one node while it compiles) beside llama-70b 3 x TP4 and the rollouts' surge replicas: that "
        "needs 3 nodes, the node group supplies 2 x p5.48xlarge (8 GPUs each; maxNodes, with a node autoscaler) "
        "(got 2; expected >= 3, or compileCache auto or off)"]
    # auto falls back to off instead, and one more node makes room.
    assert lines(replicas=3, compileCache="auto") == []
    assert lines(replicas=3, compileCache="shared", max_nodes=3) == []
