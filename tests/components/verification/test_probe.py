"""The probe end to end against real OpenAI-compatible servers on 127.0.0.1 (tests/support/openai_server.py):
one that streams correctly, one that buffers the whole response, one without auth, one with a
malformed event, one that is slow; each check's verdict and message; the progress it tells, and a run
that Ctrl-C stops.

Length: the servers' runs start once for the module (tests/support/probe_runs.py) and every check's verdict reads
them; split, each part would start its own.
"""

from __future__ import annotations

import concurrent.futures
import io
import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from llm_serving.verification import Settings, Target, probe
from llm_serving.verification.probe import FAIL, NOT_RUN, PASS, SKIP
from tests.support import probe_runs
from tests.support.openai_server import KEY, Behaviour, OpenAIServer
from tests.support.probe_runs import MODEL


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Iterator[dict[str, concurrent.futures.Future]]:
    """Every scenario's report (tests/support/probe_runs.py). The runs mostly wait on their servers' sleeps,
    so they all start together, in threads, at the module's first test; each has its own server."""
    jobs = probe_runs.jobs(tmp_path_factory.mktemp("probe-runs"))
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        yield {name: pool.submit(job) for name, job in jobs.items()}


def _report(reports: dict[str, concurrent.futures.Future], name: str) -> dict:
    return reports[name].result(timeout=120)


def _checks(report: dict) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["verdict"], c["message"]) for c in report["checks"]}


def test_a_correct_streaming_server_passes_every_smoke_check(reports):
    report = _report(reports, "correct")
    checks = _checks(report)
    assert {name: verdict for name, (verdict, _) in checks.items()} == {
        "models": PASS, "auth": PASS, "stream": PASS, "completion": PASS, "fields": PASS}
    assert checks["models"][1] == "lists llama-8b"
    assert checks["auth"][1] == "no key and a wrong key are refused (401, 401)"
    assert checks["stream"][1].startswith("32 tokens streamed from ")
    assert checks["stream"][1].endswith(" ms, ending in [DONE]")
    assert checks["completion"][1] == "answered 95 characters"  # 16 x "hello", space-separated
    assert report["verdict"] == PASS and report["failures"] == []


def test_a_buffering_proxy_fails_the_stream_check_with_a_message_naming_buffering(reports):
    report = _report(reports, "buffering")
    verdict, message = _checks(report)["stream"]
    assert verdict == FAIL
    assert message.startswith("100% of 32 tokens arrived in one burst at ")
    assert "the response is buffered by a proxy, so clients see no token until the end" in message
    assert report["failures"] == [f"FAIL url stream: {message}"]


def test_an_endpoint_without_auth_fails_with_both_answers(reports):
    report = _report(reports, "no-auth")
    assert _checks(report)["auth"] == (FAIL, "GET /v1/models with no key answered 200 and a wrong key answered 200, "
                                              "expected 401 or 403: the API key is not enforced")
    assert len(report["failures"]) == 1


def test_an_address_guarded_elsewhere_skips_the_auth_check(reports):
    assert _checks(_report(reports, "no-auth-guarded-elsewhere"))["auth"] == (
        SKIP, "keys are checked in front of this address, not by it")


def test_a_malformed_event_fails_the_stream_check_naming_the_event(reports):
    report = _report(reports, "malformed")
    assert _checks(report)["stream"] == (FAIL, "malformed stream after 3 tokens: event 4 is not JSON: '{not json'")


def test_a_wrong_model_name_in_responses_fails_the_fields_check(reports):
    report = _report(reports, "wrong-model")
    verdict, message = _checks(report)["fields"]
    assert verdict == FAIL
    assert message == ("expected model 'llama-8b' and consistent usage: non-streamed model 'llama-8b-old'; "
                       "streamed model ['llama-8b-old']; another backend than the one asked for answered")


def test_a_server_that_does_not_serve_the_name_fails_the_models_check(reports):
    report = _report(reports, "other-name")
    assert _checks(report)["models"] == (FAIL, "GET /v1/models lists ['other'], not the served name 'llama-8b'")


def test_an_unreachable_address_fails_each_check_with_the_error(capsys):
    settings = Settings(MODEL, (Target("url", "http://127.0.0.1:9/v1"),), None, request_timeout_seconds=2)
    report = probe.run(settings, KEY)
    assert [c["verdict"] for c in report["checks"]] == [FAIL, FAIL, FAIL, FAIL, SKIP]
    assert report["checks"][0]["message"].startswith("GET http://127.0.0.1:9/v1/models: ConnectionRefusedError")
    assert capsys.readouterr() == ("", "")  # no progress unless asked for


def test_the_load_test_reports_latency_beside_the_plan_and_passes_within_objectives(reports):
    report = _report(reports, "load-within-objectives")
    load = report["load"]
    assert load["errors"] == 0 and load["requests"] > 0 and load["buffered_requests"] == 0
    assert load["output_tokens_mean"] == 12.0
    assert 5.0 <= load["itl_ms"]["p50"] < 100.0  # the server sleeps 5 ms between tokens (a loaded machine adds some)
    assert [row["figure"] for row in load["comparison"]] == [
        "TTFT p50 ms", "TTFT p95 ms", "ITL p50 ms", "ITL p95 ms", "TPOT p50 ms", "output tokens/s"]
    itl_p95 = load["comparison"][3]
    assert itl_p95["planned"] == 5.0 and itl_p95["objective"] == 250.0
    assert itl_p95["ratio"] == round(load["itl_ms"]["p95"] / 5.0, 2)
    checks = _checks(report)
    assert checks["ttft-p95"][0] == PASS and checks["itl-p95"][0] == PASS and checks["load"][0] == PASS
    assert report["verdict"] == PASS


def test_a_slow_server_fails_the_ttft_and_itl_objectives(reports):
    report = _report(reports, "load-slow")
    checks = _checks(report)
    assert checks["ttft-p95"][0] == FAIL and checks["itl-p95"][0] == FAIL
    assert checks["ttft-p95"][1].endswith(" ms over the 100 ms objective at concurrency 2")
    assert float(checks["ttft-p95"][1].split()[0]) >= 125.0
    assert float(checks["itl-p95"][1].split()[0]) >= 12.5
    assert checks["stream"][0] == PASS  # slow is not buffered: the smoke checks still pass


def test_buffered_responses_under_load_fail_as_buffered(reports):
    report = _report(reports, "load-buffered")
    verdict, message = _checks(report)["load-streaming"]
    assert verdict == FAIL
    assert message.endswith("responses arrived in one burst: buffered by a proxy, so the ITL figures are not the "
                            "engine's")
    # A buffered stream has no inter-token gaps to measure: ITL is "not measured", never a 0 ms pass.
    verdict, message = _checks(report)["itl-p95"]
    assert verdict == FAIL and message.startswith("not measured: ")


def test_a_load_test_where_every_request_fails_reports_the_errors(reports):
    report = _report(reports, "load-all-fail")
    verdict, message = _checks(report)["load"]
    assert verdict == FAIL
    assert message.startswith("no request completed: 0 requests at concurrency 3")
    assert message.endswith("errors: [\"event 1 is not JSON: '{not json'\"]")


def test_max_requests_counts_only_requests_after_the_warm_up(reports):
    report = _report(reports, "load-max-requests")
    assert report["load"]["requests"] == 4


@pytest.mark.parametrize(("burst", "share"), [([0.0, 0.1, 0.2, 0.3], 0.25), ([0.0, 0.0001, 0.0002, 0.5], 0.75),
                                             ([1.0, 1.0, 1.0, 1.0], 1.0), ([], 0.0)])
def test_largest_burst_share_counts_arrivals_within_two_milliseconds(burst, share):
    assert probe.largest_burst_share(burst) == share


def _events(count: int, padding: int = 0) -> list[bytes]:
    # `padding`: an id field as long as vLLM's chunk ids and fields make an event (about 230 bytes).
    event = b'data: {"id": "%s", "choices": [{"delta": {"content": "hello "}}]}\n\n' % (b"x" * padding)
    return [event] * count + [b"data: [DONE]\n\n"]


def _read_held_up(events: list[bytes], gap_seconds: float, every_lines: int = 16,
                  written: list[float] | None = None) -> probe.Stream:
    """`_read_events` over a real socket with the probe's response class (the server writes each event
    `gap_seconds` after the one before, or all of them in one write), with the client held up 3 ms after
    every 16th line (every 8th event), as a busy CPU or another of its threads holds a client up: longer
    than the burst gap, so a clock that timed the parse, or each 8 KiB read alone, would split a burst.
    `written`, if given, gets the time just before each event's write."""
    server, client = socket.socketpair()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(b"".join(events))

    def write() -> None:
        server.sendall(head + (b"".join(events) if not gap_seconds else b""))
        for event in events if gap_seconds else ():
            time.sleep(gap_seconds)
            if written is not None:
                written.append(time.perf_counter())
            server.sendall(event)

    writer = threading.Thread(target=write)
    writer.start()
    response = probe._TimedResponse(client)
    response.begin()
    readline, lines = response.readline, iter(range(1, 1 << 20))

    def held_up_readline() -> bytes:
        line = readline()
        if next(lines) % every_lines == 0:
            time.sleep(0.003)
        return line

    response.readline = held_up_readline  # type: ignore[method-assign]
    result = probe.Stream()
    probe._read_events(response, result, response.arrived)
    writer.join()
    server.close()
    client.close()
    return result


def test_events_are_timed_by_when_they_reached_the_client_not_by_when_they_were_parsed():
    # One write of the whole body (a buffering proxy): one arrival, however long the client took to
    # parse it, so all of it is one burst.
    buffered = _read_held_up(_events(32), 0.0)
    assert len(buffered.token_times) == 32 and buffered.done
    assert set(buffered.token_times) == {buffered.token_times[0]}
    assert probe.largest_burst_share(buffered.token_times) == 1.0
    # The same for a body bigger than the client's 8 KiB read buffer (256 vLLM-sized events, 60 KB):
    # each later read took bytes that were already waiting when the one before it returned.
    big = _read_held_up(_events(256, padding=170), 0.0)
    assert len(b"".join(_events(256, padding=170))) > 60_000
    assert len(big.token_times) == 256 and set(big.token_times) == {big.token_times[0]}
    # Events written 20 ms apart keep their spacing: each came in with a read of its own.
    streamed = _read_held_up(_events(4), 0.02)
    gaps = [b - a for a, b in zip(streamed.token_times, streamed.token_times[1:], strict=False)]
    assert len(gaps) == 3 and min(gaps) > probe.BURST_GAP_SECONDS
    assert probe.largest_burst_share(streamed.token_times) == 0.25


def test_no_token_is_timed_before_it_was_written_when_the_client_falls_behind():
    # A stream of 160 vLLM-sized events 1 ms apart, read by a client held up 3 ms every other event: it
    # falls behind by more than the 8 KiB read buffer, so reads find bytes waiting. Each read takes the
    # earlier time only for bytes counted as waiting then; a later arrival is never stamped earlier.
    written: list[float] = []
    lagging = _read_held_up(_events(160, padding=170), 0.001, every_lines=4, written=written)
    assert len(lagging.token_times) == 160 and len(written) == 161  # the last write is [DONE]
    assert all(arrived >= sent for arrived, sent in zip(lagging.token_times, written, strict=False))
    assert probe.largest_burst_share(lagging.token_times) <= probe.BURST_SHARE_LIMIT


def test_percentile_interpolates_between_ranks():
    assert probe.percentile([10.0, 20.0, 30.0, 40.0], 0.5) == 25.0
    assert probe.percentile([10.0, 20.0, 30.0, 40.0], 0.95) == pytest.approx(38.5)
    assert probe.percentile([], 0.5) is None


def test_the_job_entry_point_gates_writes_the_failing_lines_and_ends_with_the_json_report(reports):
    """As the Job runs it: the file alone (no package), settings and key from files
    (tests/support/probe_runs.py, against a buffering server)."""
    ran = _report(reports, "job-entry-point")
    (gate_code, gate_out, gate_err), (report_code, report_out, _) = ran["gate"], ran["report"]
    assert gate_code == 1 and report_code == 0, gate_err
    # Its log shows each check as it starts and ends (stderr), before the report (stdout).
    said = [line.split("] ", 1)[1] for line in gate_err.splitlines()]
    assert said[0] == "edge models: GET /v1/models with the key" and said[1].startswith("edge models: PASS (")
    assert [line for line in said if line.startswith("edge stream: ")][-1].startswith("edge stream: FAIL (")
    last = json.loads(gate_out.splitlines()[-1])["verification"]
    assert last["verdict"] == FAIL and last["mode"] == "gate"
    assert ran["termination-log"].startswith("FAIL edge stream: 100% of 32 tokens arrived in one burst")
    assert json.loads(report_out.splitlines()[-1])["verification"]["mode"] == "report"


@pytest.mark.parametrize(("document", "message"), [
    ({"targets": []}, "settings: KeyError('model'); expected model, targets[] and optionally load"),
    ({"model": "m", "targets": [{"name": "edge"}]},
     "settings: TypeError(\"Target.__init__() missing 1 required positional argument: 'base_url'\"); "
     "expected model, targets[] and optionally load"),
])
def test_bad_settings_are_one_line(document, message):
    with pytest.raises(probe.UsageError) as error:
        Settings.from_json(document)
    assert str(error.value) == message


def test_a_bad_url_is_a_usage_error():
    with pytest.raises(probe.UsageError, match=r"url 'ftp://x/v1/models': expected http://host\[:port\]/path or https://"):
        probe.check_models(Target("url", "ftp://x/v1"), MODEL, KEY, 1)


def test_the_key_comes_from_a_file_or_an_environment_variable(tmp_path, monkeypatch):
    (tmp_path / "key").write_text("  secret-key \n")
    assert probe.read_key(str(tmp_path / "key"), None) == "secret-key"
    monkeypatch.setenv("VERIFY_KEY", "from-env")
    assert probe.read_key(None, "VERIFY_KEY") == "from-env"
    (tmp_path / "empty").write_text("")
    with pytest.raises(probe.UsageError, match="the file is empty"):
        probe.read_key(str(tmp_path / "empty"), None)
    monkeypatch.delenv("VERIFY_KEY")
    with pytest.raises(probe.UsageError, match="--api-key-env VERIFY_KEY: the variable is unset or empty"):
        probe.read_key(None, "VERIFY_KEY")


def test_the_engine_kv_cache_is_read_from_vllms_cache_config_info(reports):
    report = _report(reports, "kv-cache")
    assert report["engine"] == {"kv_cache_size_tokens": 16000, "num_gpu_blocks": 1000, "block_size": 16}
    assert "engine KV cache: 16,000 tokens (vllm:cache_config_info)" in probe.render_text(report)
    assert "engine" not in _report(reports, "no-kv-cache")


def _said(said: list) -> list[str]:
    return [line for line in said if isinstance(line, str)]


def test_run_tells_its_progress_each_check_and_load_phase_as_it_starts_and_ends(reports):
    report, said = _report(reports, "progress")
    load, phases = probe_runs._load(), _said(said)
    assert phases[0:10:2] == [  # each smoke check as it starts ...
        "url models: GET /v1/models with the key", "url auth: GET /v1/models with no key, then a wrong key",
        f"url stream: a streamed chat completion of {probe.STREAM_CHECK_TOKENS} tokens",
        "url completion: a chat completion, not streamed", "url fields: model and usage of both answers"]
    # ... and as it ends, with its verdict and seconds
    assert [line.split(" (")[0] for line in phases[1:10:2]] == [f"url {name}: PASS" for name in probe.SMOKE_CHECKS]
    assert phases[10:14] == [
        "url engine: the KV cache from /metrics", "url engine: not served here",
        f"url load: ramp: {load.concurrency} concurrent streamed requests of {load.prompt_tokens} + "
        f"{load.output_tokens} tokens, starting over {load.ramp_seconds:g} s (warm-up)",
        f"url load: steady: measuring for {load.duration_seconds:g} s"]
    done = report["load"]["requests"] + report["load"]["warmup_requests"]
    assert phases[14].startswith(f"url load: finished: {done} done, 0 failed (") and len(phases) == 15
    # The count, offered every tick between the ramp's line and the last: it only grows, against the whole plan.
    counts = [c for c in said if isinstance(c, probe.LoadCount)]
    assert counts and said.index(counts[0]) > said.index(phases[12]) and said[-1] == phases[14]
    assert [c.done for c in counts] == sorted(c.done for c in counts) and {c.failed for c in counts} == {0}
    assert {c.planned_seconds for c in counts} == {load.ramp_seconds + load.duration_seconds}


def test_ctrl_c_mid_load_stops_it_and_reports_what_completed_marked_interrupted(reports):
    report, said = _report(reports, "ctrl-c-mid-load")
    assert (report["interrupted"], report["verdict"], report["failures"]) == (True, probe.INTERRUPTED, [])
    checks = _checks(report)
    assert [checks[name][0] for name in probe.SMOKE_CHECKS] == [PASS] * len(probe.SMOKE_CHECKS)
    # The load test had not finished: not run, never passed; the figures so far are kept, marked.
    assert {name: checks[name][0] for name in ("load", "ttft-p95", "itl-p95")} == dict.fromkeys(
        ("load", "ttft-p95", "itl-p95"), NOT_RUN)
    assert checks["load"][1].startswith("interrupted after ")
    assert checks["ttft-p95"][1].endswith(" requests, not judged")
    load = report["load"]
    assert load["interrupted"] and load["errors"] == 0  # the requests the stop cut are not errors
    # Every worker returned once its connection was closed: none was left behind.
    assert _said(said)[-2:] == ["url load: interrupted: stopping the requests in flight", _said(said)[-1]]
    assert _said(said)[-1].startswith("url load: stopped: ") and "left behind" not in _said(said)[-1]
    text = probe.render_text(report)
    assert text.startswith("interrupted: results so far\nPASS url models: ")
    assert text.endswith("verdict: INTERRUPTED (3 not run)\n")


def test_ctrl_c_during_a_check_reports_it_and_every_later_one_as_not_run():
    # Ctrl-C as the stream check starts: the checks before it passed, it and the rest did not run.
    stream = f"url stream: a streamed chat completion of {probe.STREAM_CHECK_TOKENS} tokens"
    progress = probe_runs.Recorded(lambda said: said == stream)
    with OpenAIServer(Behaviour()) as url, pytest.raises(probe.Interrupted) as stopped:
        probe.run(Settings(MODEL, (Target("url", url),), probe_runs._load(), request_timeout_seconds=20), KEY,
                  progress)
    assert isinstance(stopped.value, KeyboardInterrupt)  # a caller that does not look for it stops as on Ctrl-C
    report = stopped.value.report
    assert [(c["name"], c["verdict"], c["message"]) for c in report["checks"][2:]] == [
        ("stream", NOT_RUN, "interrupted while it ran"),
        ("completion", NOT_RUN, "interrupted before it started"),
        ("fields", NOT_RUN, "interrupted before it started"),
        ("load", NOT_RUN, "interrupted before it started"),
        ("ttft-p95", NOT_RUN, "interrupted before it started"),
        ("itl-p95", NOT_RUN, "interrupted before it started")]
    assert [c["verdict"] for c in report["checks"][:2]] == [PASS, PASS]
    assert "load" not in report and report["verdict"] == probe.INTERRUPTED and report["interrupted"]


def test_lines_rewrite_the_count_in_place_on_a_terminal_and_print_plain_lines_elsewhere():
    count = probe.LoadCount("url", done=12, failed=1, elapsed_seconds=3.2, planned_seconds=61.0)
    shown = {}
    for live in (True, False):
        stream = io.StringIO()
        lines = probe.Lines(stream, live=live, every=0)
        lines.phase("url load: steady")
        lines.load(count)
        lines.load(count)
        lines.phase("url load: finished")
        shown[live] = re.sub(r"\[ *\d+\.\d s\] ", "", stream.getvalue())
    line = "url load: 12 done, 1 failed, 3 of 61 s"
    assert shown[True] == f"url load: steady\n\r{line}\r{line}\nurl load: finished\n"
    assert shown[False] == f"url load: steady\n{line}\n{line}\nurl load: finished\n"
    # At their own pace a count offered right after a line waits for the next tick.
    for live in (True, False):
        stream = io.StringIO()
        lines = probe.Lines(stream, live=live)
        lines.phase("url load: steady")
        lines.load(count)
        assert re.sub(r"\[ *\d+\.\d s\] ", "", stream.getvalue()) == "url load: steady\n"


def test_a_progress_stream_whose_reader_went_away_ends_the_progress_not_the_run():
    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    lines = probe.Lines(Closed())
    lines.phase("url models: GET /v1/models with the key")
    lines.phase("url models: PASS (0.0 s)")
    assert lines.stream is None


def test_the_jobs_probe_takes_sigterm_as_ctrl_c_so_a_deadline_kill_leaves_the_report_so_far(tmp_path):
    # activeDeadlineSeconds ends the Job's pod with SIGTERM: handled as KeyboardInterrupt, the load stops and the
    # partial report is printed (the Ctrl-C test above) before the grace period's SIGKILL.
    import signal

    before = signal.getsignal(signal.SIGTERM)
    try:
        assert probe.main(["--settings", str(tmp_path / "absent.json")]) == probe.EXIT_USAGE
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_jobs_grace_period_outlasts_the_probes_stop_after_sigterm(rendered):
    # After SIGTERM the probe waits at most STOP_WAIT_SECONDS for its workers, then prints the report; the kubelet
    # sends SIGKILL after the pod's grace period (PodSpec.terminationGracePeriodSeconds, 30 s when unset: Kubernetes
    # API reference), which must leave that time and the report's printing.
    (job,) = [m for m in rendered["prod"].manifests if m["kind"] == "Job" and "-verify-" in m["metadata"]["name"]]
    grace = job["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    assert grace > 2 * probe.STOP_WAIT_SECONDS
