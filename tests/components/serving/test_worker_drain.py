"""A multi-node group's worker drains only while its leader's engine runs (llm_serving/serving/multinode.py): the
preStop script itself, run against a listener on 127.0.0.1 standing for the leader's torch.distributed store."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

from llm_serving.serving import multinode


def _pre_stop(bound_seconds: float, port: int, leader: str = "127.0.0.1") -> subprocess.CompletedProcess[str]:
    command = multinode.worker_pre_stop(0, port)
    script = command[2]
    # The container's python3 is this interpreter here; the guard timeout only stops a hung test.
    return subprocess.run([sys.executable, "-c", script, str(bound_seconds), str(port), "0.05"],
                          env={"LWS_LEADER_ADDRESS": leader}, capture_output=True, text=True, timeout=60)


def test_a_worker_stops_waiting_once_its_leaders_engine_is_gone():
    leader = socket.create_server(("127.0.0.1", 0))
    port = leader.getsockname()[1]
    accepted = threading.Event()

    def serve_then_exit() -> None:
        connection, _ = leader.accept()  # the worker found the engine running...
        connection.close()
        accepted.set()
        leader.close()  # ...then the leader's engine exits

    threading.Thread(target=serve_then_exit, daemon=True).start()
    done = _pre_stop(3600, port)  # bound far beyond the guard timeout: only the leader's exit can end it
    assert done.returncode == 0 and done.stderr == ""
    assert accepted.is_set()


def test_without_a_reachable_leader_the_worker_stops_at_once():
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there
    assert _pre_stop(3600, port).returncode == 0
    # A leader name that no longer resolves (its pod is gone) ends it too.
    assert _pre_stop(3600, port, leader="leader.invalid").returncode == 0


def test_a_leader_that_never_goes_holds_the_worker_only_for_the_bound():
    leader = socket.create_server(("127.0.0.1", 0))
    port = leader.getsockname()[1]
    stop = threading.Event()

    def keep_accepting() -> None:
        leader.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = leader.accept()
                connection.close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=keep_accepting, daemon=True)
    thread.start()
    try:
        assert _pre_stop(0.3, port).returncode == 0  # returns: the bound, not the leader, ended it
    finally:
        stop.set()
        thread.join()
        leader.close()


def test_the_worker_pre_stop_runs_the_script_with_the_bound_and_the_leaders_store_port():
    command = multinode.worker_pre_stop(1822, 29501)
    assert command == ["python3", "-c", multinode.WORKER_PRE_STOP, "1822", "29501", str(multinode.LEADER_POLL_SECONDS)]


def test_a_worker_waits_on_the_leader_its_engine_is_connected_to_not_on_a_replacement_under_the_name():
    # The old leader (127.0.0.1) holds this rank's established store connection; the group's name already points at
    # a replacement (127.0.0.2) whose store is up. The worker follows the old one and stops when it goes.
    old = socket.create_server(("127.0.0.1", 0))
    port = old.getsockname()[1]
    new = socket.create_server(("127.0.0.2", port))
    engine_connection = socket.create_connection(("127.0.0.1", port))
    accepted, _ = old.accept()
    stop = threading.Event()

    def new_leader_accepts() -> None:
        new.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = new.accept()
                connection.close()
            except TimeoutError:
                continue

    def old_leader_exits() -> None:
        connection, _ = old.accept()  # the worker's first look found the old engine running...
        connection.close()
        old.close()  # ...then it exits
        accepted.close()

    threads = [threading.Thread(target=new_leader_accepts, daemon=True),
               threading.Thread(target=old_leader_exits, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        done = _pre_stop(3600, port, leader="127.0.0.2")  # bound beyond the guard: only the old leader's exit ends it
        assert done.returncode == 0 and done.stderr == ""
    finally:
        stop.set()
        threads[0].join()
        new.close()
        engine_connection.close()
