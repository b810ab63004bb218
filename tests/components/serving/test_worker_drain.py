"""A multi-node group's worker drains only while its leader's engine runs (llm_serving/serving/multinode.py): the
preStop script itself, run against listeners on 127.0.0.1 and 127.0.0.2 standing for the old and the recreated
leader's torch.distributed store, with a client connection held open as the rank's store connection."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

from llm_serving.serving import multinode


def _pre_stop(bound_seconds: float, port: int) -> subprocess.CompletedProcess[str]:
    command = multinode.worker_pre_stop(0, port)
    script = command[2]
    # The container's python3 is this interpreter here; the guard timeout only stops a hung test. The group's
    # leader name is set as lws sets it, to a replacement's address: the script must never follow it.
    return subprocess.run([sys.executable, "-c", script, str(bound_seconds), str(port), "0.05", command[6]],
                          env={"LWS_LEADER_ADDRESS": "127.0.0.2"}, capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def _accepting(server: socket.socket) -> Iterator[None]:
    """A leader whose store keeps answering, until the block ends."""
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connection.close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_worker_stops_waiting_once_its_leaders_engine_is_gone():
    leader = socket.create_server(("127.0.0.1", 0))
    port = leader.getsockname()[1]
    engine_connection = socket.create_connection(("127.0.0.1", port))  # the rank's store client
    store_side, _ = leader.accept()
    polled = threading.Event()

    def serve_then_exit() -> None:
        connection, _ = leader.accept()  # the worker found the engine running...
        connection.close()
        polled.set()
        leader.close()  # ...then the leader's engine exits
        store_side.close()

    threading.Thread(target=serve_then_exit, daemon=True).start()
    try:
        done = _pre_stop(3600, port)  # bound far beyond the guard timeout: only the leader's exit can end it
        assert done.returncode == 0 and done.stderr == ""
        assert polled.is_set()
    finally:
        engine_connection.close()


def test_a_rank_connected_to_no_leader_stops_at_once():
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there and nothing is connected to it
    assert _pre_stop(3600, port).returncode == 0


def test_a_leader_that_never_goes_holds_the_worker_only_for_the_bound():
    leader = socket.create_server(("127.0.0.1", 0))
    port = leader.getsockname()[1]
    engine_connection = socket.create_connection(("127.0.0.1", port))
    store_side, _ = leader.accept()
    try:
        with _accepting(leader):
            # Returns: the bound (two of the script's 0.05 s polls), not the leader, ended it.
            assert _pre_stop(0.1, port).returncode == 0
    finally:
        for sock in (engine_connection, store_side, leader):
            sock.close()


def test_the_worker_pre_stop_runs_the_script_with_the_bound_and_the_leaders_store_port():
    command = multinode.worker_pre_stop(1822, 29501)
    assert command == ["python3", "-c", multinode.WORKER_PRE_STOP, "1822", "29501", str(multinode.LEADER_POLL_SECONDS),
                       str(multinode.LEADER_CONNECT_TIMEOUT_SECONDS)]


def test_a_worker_waits_on_the_leader_its_engine_is_connected_to_not_on_a_replacement_under_the_name():
    # The old leader (127.0.0.1) holds this rank's established store connection; the group's name already points at
    # a replacement (127.0.0.2) whose store is up. The worker follows the old one and stops when it goes.
    old = socket.create_server(("127.0.0.1", 0))
    port = old.getsockname()[1]
    new = socket.create_server(("127.0.0.2", port))
    engine_connection = socket.create_connection(("127.0.0.1", port))
    store_side, _ = old.accept()

    def old_leader_exits() -> None:
        connection, _ = old.accept()  # the worker's first look found the old engine running...
        connection.close()
        old.close()  # ...then it exits
        store_side.close()

    threading.Thread(target=old_leader_exits, daemon=True).start()
    try:
        with _accepting(new):
            done = _pre_stop(3600, port)  # bound beyond the guard: only the old leader's exit ends it
        assert done.returncode == 0 and done.stderr == ""
    finally:
        new.close()
        engine_connection.close()


def test_a_worker_deleted_after_its_leader_exited_does_not_wait_on_the_replacement():
    # What lws does in a rolling update: the old leader (127.0.0.1) has exited, so this rank's store connection sits
    # in CLOSE_WAIT, and only then are the workers deleted; the replacement leader under the group's name
    # (127.0.0.2) already has its store up, waiting for ranks. The worker must go at once (issue #42: waiting the
    # bound here holds the names the new group needs past the new leader's startup budget).
    old = socket.create_server(("127.0.0.1", 0))
    port = old.getsockname()[1]
    new = socket.create_server(("127.0.0.2", port))
    engine_connection = socket.create_connection(("127.0.0.1", port))
    store_side, _ = old.accept()
    store_side.close()  # the old engine's FIN: the rank's socket is now in CLOSE_WAIT
    old.close()
    try:
        with _accepting(new):
            done = _pre_stop(3600, port)
        assert done.returncode == 0 and done.stderr == ""
    finally:
        new.close()
        engine_connection.close()
