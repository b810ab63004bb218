"""The render host (stacks/offline/render_host.py): a forked render is the subprocess it replaces,
the side's own code and directory, its exit code and output; and a real render forked from a host
that imported the program's packages the caller's way is byte-identical to the golden render."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pulumi_kubernetes
import pytest

from stacks.config.files import PROJECT_DIR
from stacks.offline import render_host, sides

pytestmark = pytest.mark.skipif(not render_host.available(), reason="the render host needs Linux (fork, SEQPACKET)")

GOLDEN = PROJECT_DIR / "tests" / "golden"

# A side whose `stacks` package is not this project's: it reports what it sees, then exits with
# the code its first argument names (or raises, or waits until it is killed).
FAKE_MAIN = textwrap.dedent("""\
    import json, os, sys
    import stacks
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("llm_serving", "policies", "tools"))
    print(json.dumps({"stacks": stacks.__file__, "argv": sys.argv[1:], "cwd": os.getcwd(),
                      "path0": sys.path[0], "env": os.environ.get("SIDE_MARK"), "loaded": loaded,
                      "no_bytecode": sys.dont_write_bytecode}))
    if sys.argv[1] == "raise":
        raise RuntimeError("the side's program failed")
    if sys.argv[1] == "render":  # as `python -m stacks render <file> --out <dir> --quiet` would
        out = sys.argv[sys.argv.index("--out") + 1]
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, "resources.json"), "w").write(json.dumps([{"name": "from-the-side"}]))
        sys.exit(0)
    if sys.argv[1] == "wait":
        sys.stdout.flush()
        import threading
        threading.Event().wait()
    sys.exit(int(sys.argv[1]))
""")


@pytest.fixture
def side(tmp_path: Path) -> Path:
    (tmp_path / "side" / "stacks").mkdir(parents=True)
    (tmp_path / "side" / "stacks" / "__init__.py").write_text("")
    (tmp_path / "side" / "stacks" / "__main__.py").write_text(FAKE_MAIN)
    return tmp_path / "side"


@pytest.fixture
def host():
    started = render_host.RenderHost(preload=[])  # no packages: a host that starts in milliseconds
    yield started
    started.close()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1", **extra}


def test_a_forked_render_runs_the_sides_own_code_in_its_directory_with_its_argv_and_environment(host, side, tmp_path):
    forked = host.start("stacks", ["3", "--quiet"], side, _env(SIDE_MARK="seen"), tmp_path / "io")
    out, err = forked.communicate(timeout=60)
    assert (forked.returncode, err) == (3, "")
    assert json.loads(out) == {"stacks": str(side / "stacks" / "__init__.py"), "argv": ["3", "--quiet"],
                               "cwd": str(side), "path0": str(side), "env": "seen", "loaded": [],
                               "no_bytecode": True}
    assert isinstance(forked.pid, int)


def test_an_exception_in_the_side_is_exit_1_with_its_traceback_on_stderr(host, side, tmp_path):
    forked = host.start("stacks", ["raise"], side, _env(), tmp_path / "io")
    _, err = forked.communicate(timeout=60)
    assert forked.returncode == 1
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("RuntimeError: the side's program failed\n")


def test_closing_the_host_ends_it_with_exit_code_0_after_its_renders(side, tmp_path):
    started = render_host.RenderHost(preload=[])
    forked = started.start("stacks", ["3", "--quiet"], side, _env(), tmp_path / "io")
    started.close()  # the host reaps the render, then exits without the interpreter's teardown
    assert started.process.returncode == 0
    assert forked.communicate(timeout=30)[0] and forked.returncode == 3


def test_a_killed_render_reports_the_signal_and_the_next_one_still_runs(host, side, tmp_path):
    waiting = host.start("stacks", ["wait"], side, _env(), tmp_path / "first")
    waiting.kill()
    waiting.communicate(timeout=60)
    assert waiting.returncode == -9
    after = host.start("stacks", ["0"], side, _env(), tmp_path / "second")
    after.communicate(timeout=60)
    assert after.returncode == 0


def test_a_host_that_died_refuses_the_next_render_so_the_side_renders_in_a_subprocess(host, side, tmp_path):
    host.process.kill()
    host.process.wait()
    with pytest.raises(OSError):  # what sides._start falls back on
        host.start("stacks", ["0"], side, _env(), tmp_path / "io")


def test_a_waiter_that_ends_before_it_forks_is_the_hosts_failure_not_the_sides(tmp_path):
    # Its status pipe closes with no pid line: a refused fork in the host or the waiter looks so.
    read, write = os.pipe()
    os.close(write)
    forked = render_host.Forked(read, tmp_path / "out", tmp_path / "err", ["python", "-m", "stacks"], ["x"], {})
    with pytest.raises(render_host.HostFailed, match="the render host ended before it forked"):
        forked.communicate(timeout=60)
    forked.kill()  # nothing to kill, and it does not wait for a pid line that never comes


def test_without_a_host_a_side_renders_in_a_subprocess(side, tmp_path, monkeypatch):
    monkeypatch.setattr(render_host, "available", lambda: False)
    the_side = sides.Side(side, "the fake side", in_git=False)
    process = sides._start(the_side, "Pulumi.dev.yaml", tmp_path / "render")
    assert not isinstance(process, render_host.Forked)
    assert sides._finish(process, tmp_path / "render", the_side) == ([{"name": "from-the-side"}], [])


def test_a_host_that_fails_a_render_is_dropped_and_the_side_renders_in_a_subprocess(side, tmp_path, monkeypatch):
    read, write = os.pipe()
    os.close(write)  # as a host whose fork was refused
    failed = render_host.Forked(read, tmp_path / "out", tmp_path / "err", ["python", "-m", "stacks"],
                                ["render", "Pulumi.dev.yaml", "--out", str(tmp_path / "render"), "--quiet"],
                                _env())
    dropped = []
    monkeypatch.setattr(render_host, "forget_default", lambda: dropped.append(True))
    the_side = sides.Side(side, "the fake side", in_git=False)
    assert sides._finish(failed, tmp_path / "render", the_side) == ([{"name": "from-the-side"}], [])
    assert dropped == [True]


def test_a_host_stuck_before_its_fork_times_out_and_is_stopped(side, tmp_path, monkeypatch):
    # The status pipe stays open and silent, as a host stuck before its fork keeps it; stopping the host
    # closes it (forget_default, here closing the write end as the host's death would).
    read, write = os.pipe()
    stuck = render_host.Forked(read, tmp_path / "out", tmp_path / "err", ["python", "-m", "stacks"], ["x"], {})
    monkeypatch.setattr(sides, "RENDER_TIMEOUT_SECONDS", 0.05)
    monkeypatch.setattr(render_host, "KILL_WAIT_SECONDS", 0.05)
    stopped = []
    monkeypatch.setattr(render_host, "forget_default", lambda: (stopped.append(True), os.close(write)))
    the_side = sides.Side(side, "the fake side", in_git=False)
    assert sides._finish(stuck, tmp_path / "render", the_side) == (
        [], ["diff: rendering the fake side took longer than 0.05 s"])
    assert stopped == [True]


def test_the_host_inherits_no_tracing_setup_and_no_terminal(monkeypatch):
    monkeypatch.setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    monkeypatch.setenv("PULUMI_OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")
    started = render_host.RenderHost(preload=[])
    try:
        environ = Path(f"/proc/{started.process.pid}/environ").read_bytes().split(b"\0")
        assert not [e for e in environ if e.startswith((b"TRACEPARENT=", b"PULUMI_OTEL_", b"OTEL_"))]
        assert os.getsid(started.process.pid) == started.process.pid  # its own session: no Ctrl-C of ours
        assert os.readlink(f"/proc/{started.process.pid}/fd/1") == "/dev/null"
    finally:
        started.close()


def test_a_render_forked_after_the_callers_imports_is_byte_identical_to_the_golden(tmp_path):
    # What sides.py does for a side whose code is not the running code, here on this project's own
    # tree, so the result must be the golden render. The lazily declared package whose submodule has
    # its class's name is imported first, so the host replays it (render_host._preload).
    assert pulumi_kubernetes.apiextensions.CustomResource.__name__ == "CustomResource"
    preload = render_host.loaded_modules(sides.PROGRAM_PACKAGES)
    assert {"pulumi_kubernetes.apiextensions", "pulumi_kubernetes.apiextensions.CustomResource"} <= set(preload)
    out_dir = tmp_path / "render"
    forked = sides._start(sides.Side(PROJECT_DIR, "the working tree", in_git=True), "Pulumi.prod.yaml", out_dir)
    assert isinstance(forked, render_host.Forked)
    resources, errors = sides._finish(forked, out_dir, sides.Side(PROJECT_DIR, "the working tree", in_git=True))
    assert errors == [], "\n".join(errors)
    assert (out_dir / "resources.json").read_text() == (GOLDEN / "prod" / "resources.json").read_text()
    assert (out_dir / "manifests.yaml").read_text() == (GOLDEN / "prod" / "manifests.yaml").read_text()
    assert resources == json.loads((GOLDEN / "prod" / "resources.json").read_text())
