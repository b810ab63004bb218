"""The probe against one base URL for two models and two LoRA adapters (`edge.routing: byModel`), end to end on
127.0.0.1: two OpenAI-compatible servers, one per base model, the second serving two adapters, behind one router
that sends each request by its body's `model` and rewrites an alias as the endpoint picker does
(tests/support/openai_server.py `ModelRouter`). Each model's settings are what its deploy-gate Job carries: the edge
lists every name of the stack, and each adapter and the alias are asked through it. It passes as built, and fails
naming the model when the router sends a model to the wrong server, when GET /v1/models lacks an adapter, and when
an adapter's stream answers with the base model's name."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable, Iterator

import pytest

from llm_serving.verification import Alias, Settings, Target, probe
from llm_serving.verification.probe import FAIL, PASS
from tests.support.openai_server import KEY, Behaviour, ModelRouter, OpenAIServer

BIG, SMALL = "llama-70b", "llama-8b"
ADAPTERS = ("sql-v1", "sql-v2")
ALIAS = Alias("sql", ADAPTERS)
NAMES = (BIG, SMALL, *ADAPTERS, ALIAS.name)
SERVING_ADAPTERS = Behaviour(served_name=SMALL, adapters=ADAPTERS)


def _settings(model: str, edge: str, service: str) -> Settings:
    """What stack/verification.py `settings` writes for a byModel stack: the edge lists the other names of the
    stack and passes the picker (aliases asked there); the Service is vLLM alone."""
    lora = model == SMALL
    return Settings(model, (Target("edge", edge, lists=tuple(n for n in NAMES if n != model), aliases=True),
                            Target("service", service)),
                    request_timeout_seconds=20, adapters=ADAPTERS if lora else (), aliases=(ALIAS,) if lora else ())


def _run(small: Behaviour = SERVING_ADAPTERS, misroute: dict[str, str] | None = None,
         listed: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Both models' reports through one router; `misroute` sends a name to the other model's server."""
    with OpenAIServer(Behaviour(served_name=BIG)) as big, OpenAIServer(small) as small_url:
        servers = {BIG: big, SMALL: small_url}
        routes = {BIG: big, **{name: small_url for name in (SMALL, *ADAPTERS, ALIAS.name)}}
        routes |= {name: servers[other] for name, other in (misroute or {}).items()}
        # The picker chooses one of the alias's adapters by weight; here always the second. Both models' Jobs run
        # at once, as the stack's do.
        with ModelRouter(routes, {ALIAS.name: ADAPTERS[1]}, listed) as edge, \
                concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = {m: pool.submit(probe.run, _settings(m, edge, servers[m]), KEY) for m in (BIG, SMALL)}
            return {model: run.result(timeout=120) for model, run in runs.items()}


# Each scenario's two runs start together at the module's first test (they wait on the servers' sleeps).
SCENARIOS: dict[str, Callable[[], dict[str, dict]]] = {
    "routed": _run,
    "misrouted": lambda: _run(misroute={SMALL: BIG}),
    "adapter-unlisted": lambda: _run(listed=tuple(n for n in NAMES if n != ADAPTERS[1])),
    "adapter-answered-by-base": lambda: _run(Behaviour(served_name=SMALL, adapters=ADAPTERS,
                                                       answered_by_base=(ADAPTERS[1],))),
}


@pytest.fixture(scope="module")
def reports() -> Iterator[dict[str, concurrent.futures.Future]]:
    with concurrent.futures.ThreadPoolExecutor(len(SCENARIOS)) as pool:
        yield {name: pool.submit(run) for name, run in SCENARIOS.items()}


def _checks(report: dict) -> dict[tuple[str, str], tuple[str, str]]:
    return {(c["target"], c["name"]): (c["verdict"], c["message"]) for c in report["checks"]}


def test_one_endpoint_lists_and_answers_every_model_adapter_and_alias(reports):
    found = reports["routed"].result(timeout=120)
    assert [found[m]["verdict"] for m in (BIG, SMALL)] == [PASS, PASS], [found[m]["failures"] for m in found]
    small = _checks(found[SMALL])
    assert small[("edge", "models")] == (PASS, f"lists {SMALL}, {', '.join(ADAPTERS)}, {BIG}, {ALIAS.name}")
    # One streamed completion per adapter on both addresses, the alias only through the edge (vLLM knows none).
    asked = {key: verdict for key, (verdict, _) in small.items() if key[1].startswith("route ")}
    assert asked == {("edge", "route sql-v1"): PASS, ("edge", "route sql-v2"): PASS, ("edge", "route sql"): PASS,
                     ("service", "route sql-v1"): PASS, ("service", "route sql-v2"): PASS}
    # The picker wrote the alias back into the response (llm-d-router rewriteModelName), as the router here does.
    assert small[("edge", "route sql")][1] == "8 tokens streamed, answered by sql"
    assert _checks(found[BIG])[("edge", "models")] == (PASS, f"lists {BIG}, {SMALL}, {', '.join(ADAPTERS)}, "
                                                             f"{ALIAS.name}")


def test_a_model_routed_to_the_other_models_server_fails_naming_it(reports):
    found = reports["misrouted"].result(timeout=120)
    assert found[BIG]["verdict"] == PASS
    small = _checks(found[SMALL])
    # That server answers as vLLM does for a name it does not serve: 404, the name in its message.
    assert small[("edge", "stream")] == (FAIL, f"streamed chat completion: HTTP 404: {{\"error\": {{\"message\": "
                                               f"\"The model `{SMALL}` does not exist.\", \"type\": \"NotFoundError\""
                                               ", \"param\": \"model\", \"code\": 404}}")
    assert small[("edge", "completion")][0] == FAIL
    assert all(f"`{SMALL}`" in line for line in found[SMALL]["failures"] if line.startswith("FAIL edge stream"))
    # Its adapters still reach their server, and the Service (no router) passes.
    assert small[("edge", "route sql-v1")][0] == PASS
    assert not [line for line in found[SMALL]["failures"] if line.startswith("FAIL service")]


def test_an_adapter_missing_from_the_models_list_fails_naming_it(reports):
    found = reports["adapter-unlisted"].result(timeout=120)
    for model in (BIG, SMALL):
        verdict, message = _checks(found[model])[("edge", "models")]
        assert verdict == FAIL and message.startswith(f"GET /v1/models lacks '{ADAPTERS[1]}': it lists [")
        assert found[model]["failures"] == [f"FAIL edge models: {message}"]


def test_an_adapter_answered_by_the_base_model_fails_naming_both(reports):
    found = reports["adapter-answered-by-base"].result(timeout=120)
    small = _checks(found[SMALL])
    assert small[("edge", "route sql-v2")] == (
        FAIL, f"asked for 'sql-v2', the response names '{SMALL}': another backend than the one asked for "
              "(expected 'sql-v2')")
    # The alias the picker rewrote to that adapter fails alike; its other adapter would have been accepted.
    assert small[("edge", "route sql")] == (
        FAIL, f"asked for 'sql', the response names '{SMALL}': another backend than the one asked for "
              "(expected 'sql' or 'sql-v1' or 'sql-v2')")
    assert small[("service", "route sql-v2")][0] == FAIL and small[("edge", "route sql-v1")][0] == PASS


def test_the_settings_file_carries_the_names_and_reads_back():
    settings = _settings(SMALL, "https://llm.example.com/v1", "http://llama-8b.llm-serving.svc:8000/v1")
    written = json.loads(json.dumps(settings.to_json()))  # what the ConfigMap's settings.json holds
    assert Settings.from_json(written) == settings
    assert written["aliases"] == [{"name": "sql", "targets": ["sql-v1", "sql-v2"]}]
    assert (written["adapters"], written["targets"][0]["lists"]) == (list(ADAPTERS), [BIG, *ADAPTERS, "sql"])
