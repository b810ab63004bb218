"""`python -m stacks verify` against local servers on 127.0.0.1: the stack's plan as the comparison,
exit 0/1/2, one line per failure, the key never an argument, --json for machines and the planner."""

from __future__ import annotations

import concurrent.futures
import io
import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from llm_serving.stack import verification
from stacks.cli import main, verify
from stacks.config import VerificationMode
from stacks.config.files import PROJECT_DIR
from stacks.environment import load_stack_file
from tests.support import verify_runs
from tests.support.cli import run_stacks
from tests.support.openai_server import KEY, Behaviour, OpenAIServer


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
    from llm_serving.stack import ServingStack
    from tests.support.components import run

    _, config = load_stack_file(PROJECT_DIR / "Pulumi.dev.yaml")
    off = run(lambda: ServingStack("llm-serving", replace(config, verification=replace(
        config.verification, mode=VerificationMode.OFF))))
    assert [r["name"] for r in rendered["dev"].resources if r["type"] == "llmserving:verification:VerificationJob"]
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
