"""`python -m stacks verify` against local servers on 127.0.0.1: the stack's plan as the comparison,
exit 0/1/2/130, one line per failure, the key never an argument, progress on stderr, Ctrl-C's report of
what completed, --json for machines and the planner on every exit, and a closed pipe without a traceback."""

from __future__ import annotations

import concurrent.futures
import io
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from llm_serving.stack import verification
from llm_serving.verification import probe
from stacks.cli import main, verify
from stacks.config import VerificationMode
from stacks.config.files import PROJECT_DIR, stack_file_path
from stacks.environment import load_stack_file
from tests.support import stack_variants, verify_runs
from tests.support.cli import run_stacks
from tests.support.openai_server import KEY, Behaviour, OpenAIServer, RevisionRouter


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("LLM_SERVING_API_KEY", KEY)


@pytest.fixture(scope="module", autouse=True)
def load_runs(tmp_path_factory) -> Iterator[dict[str, concurrent.futures.Future]]:
    """The two runs with a load test (tests/support/verify_runs.py): they wait on their servers, so they start
    together, in threads, at the module's first test, while its other tests run."""
    jobs = verify_runs.jobs(tmp_path_factory.mktemp("verify-runs"))
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        yield {name: pool.submit(job) for name, job in jobs.items()}


def test_a_buffering_server_fails_with_one_line_naming_buffering(key, capsys):
    with OpenAIServer(Behaviour(buffer=True)) as url:
        code = main(["verify", "dev", "--url", url, "--no-load"])
    out = capsys.readouterr().out
    assert code == 1
    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(failing) == 1
    assert failing[0].startswith("FAIL url stream: 100% of 32 tokens arrived in one burst at ")
    assert "buffered by a proxy" in failing[0]
    assert out.endswith("verdict: FAIL (1 failing check(s))\n")


def test_a_url_without_v1_is_refused_before_any_request(key, capsys):
    # Every check against the server's root would answer 404, which would read as "the API key is not enforced".
    with OpenAIServer(Behaviour()) as url:
        server_root = url.removesuffix("/v1")
        assert main(["verify", "dev", "--url", server_root, "--no-load"]) == 2
    err = capsys.readouterr().err
    assert err == f"verify: --url {server_root!r}: expected http://... or https://... ending in /v1\n"


def test_help_and_usage_errors_go_to_the_callers_streams_not_the_processes(capsys):
    out, err = io.StringIO(), io.StringIO()
    assert verify.main(["--help"], out, err) == 0
    assert verify.main(["--help", "--json"], out, err) == 0  # help is text, --json or not
    assert verify.main(["dev", "--url", "http://127.0.0.1:9/v1", "--duration", "0"], out, err) == 2
    assert out.getvalue().startswith("usage: python -m stacks verify ")
    assert err.getvalue().endswith("python -m stacks verify: argument --duration: expected at least 1, got 0\n")
    assert capsys.readouterr() == ("", "")


def test_the_key_can_come_from_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LLM_SERVING_API_KEY", raising=False)
    (tmp_path / "key").write_text(KEY)
    with OpenAIServer(Behaviour()) as url:
        code = main(["verify", "dev", "--url", url, "--no-load", "--api-key-file", str(tmp_path / "key")])
    assert code == 0, capsys.readouterr()


@pytest.mark.parametrize(("args", "message"), [
    (["verify", "dev", "--url", "http://127.0.0.1:9/v1", "--api-key-env", "NO_SUCH_VARIABLE_27"],
     "verify: --api-key-env NO_SUCH_VARIABLE_27: the variable is unset or empty\n"),
    (["verify", "dev", "--url", "ftp://example.com/v1"],
     "verify: --url 'ftp://example.com/v1': expected http://... or https://... ending in /v1\n"),
    (["verify", "dev", "--url", "http://127.0.0.1:9/v1", "--model", "llama-7b"],
     "verify: --model 'llama-7b': not a model of stack dev; its models: llama-8b\n"),
    (["verify", "dev", "--url", "http://127.0.0.1:9/v1", "--concurrency", "0"],
     "python -m stacks verify: argument --concurrency: expected at least 1, got 0\n"),
])
def test_bad_input_is_one_line_and_exit_2(key, capsys, args, message):
    assert main(args) == 2
    assert capsys.readouterr().err.endswith(message)


def test_an_unknown_stack_is_exit_2_with_the_stacks_that_exist(key, capsys):
    assert main(["verify", "prd", "--url", "http://127.0.0.1:9/v1"]) == 2
    assert 'no stack file Pulumi.prd.yaml; did you mean "prod"?' in capsys.readouterr().err


@pytest.mark.parametrize(("args", "problem"), [
    (["--url", "http://127.0.0.1:9/v1", "--concurrency", "0"],
     "python -m stacks verify: argument --concurrency: expected at least 1, got 0"),
    ([], "python -m stacks verify: the following arguments are required: --url"),
    (["--url", "ftp://example.com/v1"],
     "verify: --url 'ftp://example.com/v1': expected http://... or https://... ending in /v1"),
    (["--url", "http://127.0.0.1:9/v1", "--model", "llama-7b"],
     "verify: --model 'llama-7b': not a model of stack dev; its models: llama-8b"),
    (["--url", "http://127.0.0.1:9/v1", "--api-key-env", "NO_SUCH_VARIABLE_27"],
     "verify: --api-key-env NO_SUCH_VARIABLE_27: the variable is unset or empty"),
])
def test_with_json_bad_input_is_one_json_object_listing_the_problem_and_exit_2(key, args, problem):
    ran = run_stacks("verify", "dev", *args, "--json")
    assert (ran.returncode, json.loads(ran.stdout)) == (2, {"error": {"kind": "usage", "problems": [problem]},
                                                            "exitCode": 2})
    assert ran.stderr.endswith(problem + "\n")  # the same line as without --json


def test_with_json_a_stack_file_problem_is_a_config_error(key):
    ran = run_stacks("verify", "prd", "--url", "http://127.0.0.1:9/v1", "--json")
    document = json.loads(ran.stdout)
    assert ran.returncode == document["exitCode"] == 2 and document["error"]["kind"] == "config"
    assert [p for p in document["error"]["problems"] if 'no stack file Pulumi.prd.yaml; did you mean "prod"?' in p]


@pytest.mark.parametrize(("behaviour", "verdict", "code"), [(Behaviour(), "pass", 0),
                                                             (Behaviour(buffer=True), "fail", 1)])
def test_with_json_a_pass_and_a_fail_are_the_report_with_its_exit_code(key, behaviour, verdict, code):
    with OpenAIServer(behaviour) as url:
        ran = run_stacks("verify", "dev", "--url", url, "--no-load", "--json")
    report = json.loads(ran.stdout)
    assert ran.returncode == report["exitCode"] == code
    assert (report["verdict"], report["interrupted"]) == (verdict, False)


def test_ctrl_c_before_any_check_is_exit_130_and_with_json_one_json_object(key):
    def interrupted(stack: str) -> Path:
        raise KeyboardInterrupt  # as Ctrl-C while the stack file loads

    text_out, text_err, json_out = io.StringIO(), io.StringIO(), io.StringIO()
    assert verify.main(["dev", "--url", "http://127.0.0.1:9/v1"], text_out, text_err, stack_path=interrupted) == 130
    assert (text_out.getvalue(), text_err.getvalue()) == ("", "\ninterrupted\n")
    assert verify.main(["dev", "--url", "http://127.0.0.1:9/v1", "--json"], json_out, io.StringIO(),
                       stack_path=interrupted) == 130
    assert json.loads(json_out.getvalue()) == {
        "error": {"kind": "interrupted", "problems": ["interrupted before any check ran"]}, "exitCode": 130,
        "interrupted": True}


def test_ctrl_c_outside_the_checks_own_handlers_is_still_exit_130_and_json(key, monkeypatch):
    def interrupted(*_: object, **__: object) -> dict:
        raise KeyboardInterrupt  # as Ctrl-C while the run sets up or assembles its report

    monkeypatch.setattr(verify.verification, "run", interrupted)
    out = io.StringIO()
    assert verify.main(["dev", "--url", "http://127.0.0.1:9/v1", "--json"], out, io.StringIO(),
                       stack_path=lambda _: stack_file_path("dev")) == 130
    assert json.loads(out.getvalue()) == {
        "error": {"kind": "interrupted", "problems": ["interrupted before a report existed"]}, "exitCode": 130,
        "interrupted": True}


def test_a_revision_is_reached_by_its_header_and_named_in_the_report(key, capsys, variants_dir):
    variant = stack_variants.prod_with_two_revisions(variants_dir)
    stable_server, canary_server = OpenAIServer(Behaviour(served_name="llama-70b")), OpenAIServer(
        Behaviour(served_name="llama-70b"))
    with stable_server as stable, canary_server as canary, \
            RevisionRouter({"stable": stable, "canary": canary}, weighted="stable") as url:
        code = main(["verify", str(variant), "--url", url, "--revision", "canary", "--no-load", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and (report["model"], report["revision"], report["passed"]) == ("llama-70b", "canary", True)
    assert len(stable_server.hosts) == 0 and len(canary_server.hosts) > 0


def test_a_revision_the_model_does_not_run_is_exit_2_naming_those_it_runs(key, capsys, variants_dir):
    variant = stack_variants.prod_with_two_revisions(variants_dir)
    assert main(["verify", str(variant), "--url", "http://127.0.0.1:9/v1", "--revision", "next"]) == 2
    assert capsys.readouterr().err.endswith(
        "verify: --revision 'next': model llama-70b runs the revisions stable, canary\n")


def test_the_key_is_never_an_argument():
    result = run_stacks("verify", "dev", "--url", "http://127.0.0.1:9/v1", "--api-key", KEY)
    assert result.returncode == 2
    assert "unrecognized arguments: --api-key" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_planned_load_follows_the_stack_and_its_overrides():
    _, config = load_stack_file(PROJECT_DIR / "Pulumi.prod.yaml")
    model = config.models[0]
    planned = verification.planned_load(config, model).plan
    # 256 requests per replica at the 100 ms ITL objective (README), 2 minimum replicas.
    assert (planned.concurrency, planned.prompt_tokens, planned.output_tokens) == (512, 1024, 256)
    assert planned.planned["tpot_ms"] == 90.28
    assert planned.planned["output_tokens_per_second"] == 5671.3  # 2 x 2,836 tokens/s
    at_64 = verification.planned_load(config, model, concurrency=64).plan
    assert at_64.concurrency == 64 and at_64.planned["tpot_ms"] < planned.planned["tpot_ms"]
    assert verification.verification_mode(config).value == "gate"


@pytest.mark.parametrize(("stack", "override", "mode"), [
    ("dev", {}, VerificationMode.REPORT),
    ("prod", {}, VerificationMode.GATE),
    ("prod", {"mode": VerificationMode.REPORT}, VerificationMode.REPORT),
    ("prod", {"mode": VerificationMode.OFF}, VerificationMode.OFF),
])
def test_the_mode_defaults_by_environment(stack, override, mode):
    _, config = load_stack_file(PROJECT_DIR / f"Pulumi.{stack}.yaml")
    config = replace(config, verification=replace(config.verification, **override))
    assert verification.verification_mode(config) is mode


def test_mode_off_creates_no_job_and_no_fence_for_one(rendered):
    # ServingStack on the component tier, on a cluster that runs everything (the model's objects, little else):
    # with the gate's default mode, then with it off.
    from llm_serving.stack import ServingStack
    from tests.support.components import EXISTING_EVERYTHING, run, stack_args

    assert [r["name"] for r in rendered["dev"].resources if r["type"] == "llmserving:verification:VerificationJob"]
    on_args = stack_args(EXISTING_EVERYTHING)
    off_args = stack_args(EXISTING_EVERYTHING, verification={"mode": "off"})
    assert off_args.verification.mode is VerificationMode.OFF
    assert on_args.verification.mode is not VerificationMode.OFF
    on, off = (run(lambda args=args: ServingStack("llm-serving", args)) for args in (on_args, off_args))
    assert [r["name"] for r in on.resources if r["type"] == "llmserving:verification:VerificationJob"]
    assert [m["kind"] for m in on.manifests if m["metadata"]["name"] == "verification"] == ["NetworkPolicy"]
    assert [r for r in off.resources if r["type"] == "llmserving:verification:VerificationJob"] == []
    assert [m for m in off.manifests if m["metadata"]["name"] == "verification"] == []


# The two load tests last: their runs started with the module's first test, so its other tests ran while
# they waited on their servers.


def test_a_correct_server_passes_and_the_plan_is_the_comparison(load_runs):
    code, out, err = load_runs["correct"].result(timeout=120)
    assert code == 0, err
    assert "PASS url stream: 32 tokens streamed from " in out
    assert "figure             measured    planned  objective  measured/planned\n" in out
    # dev's llama-8b at 2 concurrent requests of 1,024 + 12 tokens, from the roofline (one replica).
    assert "\nITL p95 ms " in out and "        100 " in out
    assert out.endswith("verdict: PASS\n")


def test_json_is_the_whole_report(load_runs):
    code, out, _ = load_runs["json-no-auth"].result(timeout=120)
    report = json.loads(out)
    assert code == 1
    assert report["stack"] == "dev" and report["model"] == "llama-8b" and report["verdict"] == "fail"
    assert report["failures"] == ["FAIL url auth: GET /v1/models with no key answered 200 and a wrong key answered "
                                  "200, expected 401 or 403: the API key is not enforced"]
    assert report["load"]["target_concurrency"] == 2 and report["load"]["output_tokens_mean"] == 12.0


# Each progress line is stamped with the seconds since the run began.
STAMP = re.compile(r"^\[ *\d+\.\d s\] ")


def test_progress_goes_to_stderr_in_order_while_stdout_stays_one_json_object(load_runs):
    code, out, err = load_runs["json-no-auth"].result(timeout=120)
    assert json.loads(out)["exitCode"] == code == 1
    assert all(STAMP.match(line) for line in err.splitlines()), err  # progress, and nothing else
    said = [STAMP.sub("", line) for line in err.splitlines()]
    duration = verify_runs.SHORT[verify_runs.SHORT.index("--duration") + 1]
    expected = ["url models: GET /v1/models with the key", "url models: PASS (",
                "url auth: GET /v1/models with no key, then a wrong key", "url auth: FAIL (",
                f"url stream: a streamed chat completion of {probe.STREAM_CHECK_TOKENS} tokens", "url stream: PASS (",
                "url completion: a chat completion, not streamed", "url completion: PASS (",
                "url fields: model and usage of both answers", "url fields: PASS (",
                "url engine: the KV cache from /metrics", "url engine: not served here",
                "url load: ramp: 2 concurrent streamed requests of ", f"url load: steady: measuring for {duration} s",
                "url load: finished: "]
    where = [next((i for i, line in enumerate(said) if line.startswith(start)), None) for start in expected]
    assert None not in where and where == sorted(where), said


def test_a_buffering_server_under_load_fails_itl_as_not_measured(load_runs):
    code, out, _ = load_runs["buffered"].result(timeout=120)
    assert code == 1
    itl = next(line for line in out.splitlines() if line.startswith("FAIL url itl-p95: "))
    assert itl.startswith("FAIL url itl-p95: not measured: ") and "arrived buffered" in itl
    assert "\nFAIL url load-streaming: " in out


def test_ctrl_c_mid_load_stops_it_prints_the_report_so_far_and_exits_130(load_runs):
    code, out, err = load_runs["sigint"].result(timeout=120)
    assert code == 130, err
    assert "Traceback" not in err
    assert "url load: interrupted: stopping the requests in flight" in err
    assert out.startswith("interrupted: results so far\nPASS url models: lists llama-8b\n"), out
    assert "\nNOT RUN url load: interrupted after " in out
    # Checks that had not finished are not run, never passed; the figures so far are still shown.
    assert not re.search(r"^PASS url (load|ttft-p95|itl-p95)", out, re.M)
    assert re.search(r"^NOT RUN url ttft-p95: interrupted after ", out, re.M)
    assert "\nload through url until interrupted after " in out
    assert re.search(r"\nverdict: INTERRUPTED \(\d+ not run\)\n$", out)


def test_ctrl_c_mid_load_with_json_is_the_report_so_far_as_json(load_runs):
    code, out, err = load_runs["json-ctrl-c"].result(timeout=120)
    report = json.loads(out)
    assert code == report["exitCode"] == 130, err
    assert (report["interrupted"], report["verdict"], report["load"]["interrupted"]) == (True, "interrupted", True)
    verdicts = {c["name"]: c["verdict"] for c in report["checks"]}
    assert [verdicts[name] for name in probe.SMOKE_CHECKS] == ["pass"] * len(probe.SMOKE_CHECKS)
    assert [verdicts[name] for name in ("load", "ttft-p95", "itl-p95")] == ["not run"] * 3


def test_a_closed_stdout_exits_1_without_a_traceback(load_runs):
    # `verify ... | head -1`: stacks/__main__.py's handler for every command.
    code, _, err = load_runs["closed-stdout"].result(timeout=120)
    assert code == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err
    assert "url fields: PASS (" in err  # the checks ran; only the report had nowhere to go
