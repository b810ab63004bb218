"""A second revision's deploy gate (models[].revisions), end to end on 127.0.0.1: two OpenAI-compatible servers as
the two revisions of llama-70b behind one route that sends `x-llm-serving-revision: <name>` to that revision and
every other request to the stable one (tests/support/openai_server.py `RevisionRouter`). The gate's settings are
what the stack writes for the canary at weight 0 (llm_serving/stack/verification.py `settings`: its own planned
load, the model's TTFT and ITL objectives), aimed at the local servers and shortened. A canary slower than the
ITL objective fails the gate, its failing lines naming the revision; a fast one passes; and the stable revision is
never sent a request, the load included (each server counts what it received)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llm_serving.edge import REVISION_HEADER
from llm_serving.stack import revisions, verification
from llm_serving.verification import Settings, probe
from llm_serving.verification.probe import FAIL
from stacks.environment import load_stack_file
from tests.support import stack_variants
from tests.support.openai_server import KEY, Behaviour, OpenAIServer, RevisionRouter

MODEL, SECOND = "llama-70b", "llama-70b-canary"
FAST = Behaviour(served_name=MODEL)
# The canary's vLLM also answers its own name (--served-model-name llama-70b llama-70b-canary).
FAST_CANARY = Behaviour(served_name=MODEL, also_served_as=(SECOND,))
# The model's objectives (Pulumi.prod.yaml slo: ITL p95 100 ms), scaled down tenfold for the slow gate together
# with the slow server's pace, so that its thirty-odd streamed checks take seconds: each token 12 ms after the one
# before, over the scaled 10 ms objective. The fast gate keeps the planned objectives.
SCALE = 10
SLOW = Behaviour(served_name=MODEL, itl_seconds=0.12 / SCALE, also_served_as=(SECOND,))


@pytest.fixture(scope="module")
def gate_settings(variants_dir) -> Settings:
    """The canary's gate at weight 0, as the stack writes it."""
    config = load_stack_file(stack_variants.prod_with_two_revisions(variants_dir))[1]
    (model,) = config.models
    at_zero = [dataclasses.replace(model.revisions[0], weight=100), dataclasses.replace(model.revisions[1], weight=0)]
    expanded = revisions.expanded(dataclasses.replace(config, models=[dataclasses.replace(model, revisions=at_zero)]))
    (second,) = [m for m in expanded.models if m.name == SECOND]
    return verification.settings(expanded, second)


def _gate(settings: Settings, canary: Behaviour, job: Path | None = None, scale: int = 1) -> tuple[dict, int, int]:
    """The canary's report, and how many requests the stable and the canary server received. With `job` (a
    directory), run as the Job runs it: settings and key from files there, the termination message written there."""
    stable_server, canary_server = OpenAIServer(FAST), OpenAIServer(canary)
    with stable_server as stable, canary_server as canary_url, \
            RevisionRouter({"stable": stable, "canary": canary_url}, weighted="stable") as edge:
        edge_target, service_target = settings.targets
        assert settings.load is not None
        local = dataclasses.replace(
            settings, request_timeout_seconds=30,
            targets=(dataclasses.replace(edge_target, base_url=edge, connect_to=None),
                     dataclasses.replace(service_target, base_url=canary_url)),
            # The planned concurrency and lengths, shortened so the test takes seconds; the objectives as planned.
            load=dataclasses.replace(settings.load, concurrency=min(4, settings.load.concurrency), output_tokens=8,
                                     prompt_tokens=32, duration_seconds=0.4, ramp_seconds=0.1,
                                     objectives={k: v / scale for k, v in settings.load.objectives.items()}))
        if job is None:
            report = probe.run(local, KEY)
        else:
            (job / "settings.json").write_text(json.dumps(local.to_json()))
            (job / "api-key").write_text(KEY)
            probe.main(["--settings", str(job / "settings.json"), "--api-key-file", str(job / "api-key"),
                        "--mode", "gate", "--termination-log", str(job / "termination-log")])
            report = {}
    return report, len(stable_server.hosts), len(canary_server.hosts)


def test_the_gate_is_the_revisions_own_planned_load_with_the_objectives(gate_settings):
    edge, service = gate_settings.targets
    assert edge.headers == {REVISION_HEADER: "canary"} and service.base_url.startswith(f"http://{SECOND}.")
    assert gate_settings.load is not None
    assert gate_settings.load.objectives == {"ttft_p95_ms": 2000.0, "itl_p95_ms": 100.0}


def test_a_fast_revision_passes_and_the_stable_one_gets_nothing(gate_settings):
    report, stable, canary = _gate(gate_settings, FAST_CANARY)
    assert report["failures"] == []
    # Asked through the edge by its own name, which only its pods serve, and answered with the model's.
    (own,) = [c for c in report["checks"] if c["name"] == f"route {SECOND}"]
    assert own["target"] == "edge" and own["measured"]["models"] == [MODEL]
    assert (report["model"], report["revision"], report["passed"]) == (MODEL, "canary", True)
    # Every check ran through the canary: the edge's through its header rule, the load through its Service.
    assert {c["target"] for c in report["checks"]} == {"edge", "service"}
    assert stable == 0 and canary > report["load"]["requests"] > 0


def test_a_request_that_misses_the_revision_fails_on_its_own_name(gate_settings):
    # Without the header the route sends the stable revision: every check on the model's name passes there, which
    # is why the gate also asks for the revision's own name, which the stable vLLM answers with a 404.
    headerless = dataclasses.replace(gate_settings, targets=(
        dataclasses.replace(gate_settings.targets[0], headers={}),), load=None)
    stable_server, canary_server = OpenAIServer(FAST), OpenAIServer(FAST_CANARY)
    with stable_server as stable, canary_server as canary_url, \
            RevisionRouter({"stable": stable, "canary": canary_url}, weighted="stable") as edge:
        edge_target = dataclasses.replace(headerless.targets[0], base_url=edge, connect_to=None)
        report = probe.run(dataclasses.replace(headerless, targets=(edge_target,), request_timeout_seconds=30), KEY)
    assert len(canary_server.hosts) == 0 and len(stable_server.hosts) > 0
    assert not report["passed"]
    (failure,) = report["failures"]
    assert f"FAIL edge route {SECOND}: asked for '{SECOND}'" in failure and "404" in failure


def test_a_slow_revision_fails_its_latency_objective_naming_it_and_the_stable_one_gets_nothing(gate_settings,
                                                                                                tmp_path, capsys):
    # Run as the Job runs it: the settings through their JSON file (the header with them), the report as the log's
    # last line (what `python -m stacks promote` reads: model, revision, passed), the failing lines as the
    # termination message pulumi-kubernetes prints with the failed Job. (One slow gate: each takes seconds.)
    _, stable, canary = _gate(gate_settings, SLOW, job=tmp_path, scale=SCALE)
    report = json.loads(capsys.readouterr().out.splitlines()[-1])["verification"]
    assert (report["model"], report["revision"], report["passed"]) == (MODEL, "canary", False)
    assert report["verdict"] == FAIL
    failing = [line for line in report["failures"] if " itl-p95: " in line]
    assert failing and all(line.startswith(f"revision canary of {MODEL}: FAIL service itl-p95: ") for line in failing)
    assert "revision canary of llama-70b" in probe.render_text(report)
    assert stable == 0 and canary > report["load"]["requests"] > 0
    message = (tmp_path / "termination-log").read_text()
    # The slow server's ITL fails; under a loaded machine a streaming check may fail first, so not `startswith`.
    assert any(line.startswith(f"revision canary of {MODEL}: FAIL service itl-p95: ") for line in message.splitlines())
