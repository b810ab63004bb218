"""The Hub check against a real HTTP server on 127.0.0.1 that answers like the Hub's model-info API."""

from __future__ import annotations

import json
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stacks.preflight import catalog, hub
from stacks.preflight.context import guarded
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import Aws, context, stack_intent
from tests.support.local_http import serving

REVISION = "1605565b47bb9346c5515c34102e054115b4f98b"  # prod's pinned Llama 3.1 70B revision
LLAMA_FILES = ["config.json", "generation_config.json", "model-00001-of-00030.safetensors",
               "model-00002-of-00030.safetensors", "model.safetensors.index.json", "original/consolidated.00.pth",
               "original/params.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
               "LICENSE", "README.md"]


class Hub(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict]] = {}
    seen: list[tuple[str, str | None]] = []

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        status, body = type(self).routes.get(self.path, (404, {"error": "Repository not found"}))
        if status == 401 and self.headers.get("Authorization") == "Bearer hf_good":
            status, body = 200, type(self).routes.get("gated-ok", (404, {}))[1]
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


@pytest.fixture
def server():
    Hub.routes, Hub.seen = {}, []
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Hub)) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


PATH = f"/api/models/meta-llama/Llama-3.1-70B-Instruct/revision/{REVISION}"


def info(files=LLAMA_FILES, sha=REVISION):
    return {"id": "meta-llama/Llama-3.1-70B-Instruct", "sha": sha, "siblings": [{"rfilename": f} for f in files]}


def check(server, token=None, the_intent=None):
    ctx = context(Aws(), the_intent, hub_url=server, hub_token=token)
    (entry,) = [c for c in catalog.CHECKS if c.id == "model.hub"]
    return guarded(entry.id, entry.aws, lambda: entry.run(ctx))


def test_readable_revision_whose_patterns_keep_the_weights_passes(server):
    Hub.routes = {PATH: (200, info())}
    (finding,) = check(server, token="hf_good")
    assert finding.outcome is Outcome.PASS
    # config, generation config, 2 shards, index, special tokens, tokenizer, tokenizer config: not original/ nor docs
    assert finding.reason == ("meta-llama/Llama-3.1-70B-Instruct@1605565b47bb: readable; the Job stages 8 of 12 "
                              "file(s), 2 safetensors shard(s)")
    assert Hub.seen == [(PATH, "Bearer hf_good")]


def test_staged_files_follow_the_jobs_allow_and_ignore_patterns():
    from llm_serving import serving

    kept = hub.staged_files(LLAMA_FILES, serving.ALLOW_PATTERNS, serving.IGNORE_PATTERNS)
    assert "original/params.json" not in kept and "original/consolidated.00.pth" not in kept
    assert "README.md" not in kept and "model-00001-of-00030.safetensors" in kept


def test_a_checkpoint_without_safetensors_fails(server):
    Hub.routes = {PATH: (200, info(files=["config.json", "pytorch_model.bin", "tokenizer.json"]))}
    (finding,) = check(server, token="hf_good")
    assert finding.outcome is Outcome.FAIL
    assert "keep no .safetensors" in finding.reason


def test_a_revision_the_hub_resolves_elsewhere_fails(server):
    Hub.routes = {PATH: (200, info(sha="f" * 40))}
    (finding,) = check(server, token="hf_good")
    assert finding.outcome is Outcome.FAIL and finding.fix == "pin models[llama-70b].revision to a full commit SHA"


def test_gated_model_without_a_token_could_not_check_when_the_stack_has_its_secret(server):
    Hub.routes = {PATH: (401, {"error": "gated"}), "gated-ok": (200, info())}
    assert stack_intent().hf_token_in_stack
    (finding,) = check(server)
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.fix.startswith("export HF_TOKEN=$(pulumi config get hfToken -s prod)")
    (finding,) = check(server, token="hf_good")
    assert finding.outcome is Outcome.PASS


def test_a_token_that_cannot_read_the_model_fails(server):
    Hub.routes = {PATH: (403, {"error": "Access to model is restricted"})}
    (finding,) = check(server, token="hf_other")
    assert finding.outcome is Outcome.FAIL
    assert "the token cannot read it (403" in finding.reason
    (finding,) = check(server, the_intent=stack_intent(hf_token_in_stack=False))
    assert finding.outcome is Outcome.FAIL and "an anonymous read (no hfToken in the stack)" in finding.reason


def test_missing_revision_fails_and_a_hub_outage_could_not_check(server):
    (finding,) = check(server, token="hf_good")
    assert finding.outcome is Outcome.FAIL and finding.reason.endswith("no such repository or revision on the Hub")
    Hub.routes = {PATH: (503, {"error": "unavailable"})}
    (finding,) = check(server, token="hf_good")
    assert finding.outcome is Outcome.COULD_NOT_CHECK and finding.reason.endswith("the Hub answered 503")


def test_an_unreachable_hub_could_not_check():
    # A port just released on 127.0.0.1 has no listener: the connection is refused at once.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (finding,) = check(f"http://127.0.0.1:{port}", token="hf_good")
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason.startswith("network error:")


# --- LoRA adapters: adapter_config.json at each pinned commit, through the staging Job's own check ---------------


def _example_intent():
    from stacks.config.files import PROJECT_DIR
    from stacks.environment import load_stack_file
    from stacks.preflight.intent import intent

    return intent("multi-model", "us-east-1", load_stack_file(PROJECT_DIR / "examples" / "Pulumi.multi-model.yaml")[1])


ADAPTER_CONFIG = {"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "r": 16,
                  "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"], "bias": "none"}


def check_adapters(server, routes):
    Hub.routes = routes
    the_intent = _example_intent()
    ctx = context(Aws(), the_intent, hub_url=server, hub_token="hf_good")
    (entry,) = [c for c in catalog.CHECKS if c.id == "lora.adapters"]
    return the_intent, guarded(entry.id, entry.aws, lambda: entry.run(ctx))


def _adapter_path(source) -> str:
    return f"/{source.repo_id}/resolve/{source.revision}/adapter_config.json"


def test_each_hub_adapter_is_checked_against_its_model_before_the_up_and_an_s3_one_is_named(server):
    the_intent = _example_intent()
    hub_adapters = [a for a in the_intent.adapters if a.repo_id is not None]
    assert [a.adapter for a in the_intent.adapters] == ["sql-v1", "sql-v2", "support-v1"]
    _, findings = check_adapters(server, {_adapter_path(a): (200, ADAPTER_CONFIG) for a in hub_adapters})
    assert [f.outcome for f in findings] == [Outcome.PASS, Outcome.PASS, Outcome.COULD_NOT_CHECK]
    assert findings[0].reason.startswith("sql-v1 (example-org/llama-3.1-8b-sql-lora@111111111111): adapter_config.json "
                                         "fits meta-llama/Llama-3.1-8B-Instruct at maxLoraRank 16")
    assert "on S3, which the preview's role may not read" in findings[2].reason
    assert sorted(path for path, _ in Hub.seen) == sorted(_adapter_path(a) for a in hub_adapters)


@pytest.mark.parametrize(("change", "problem"), [
    ({"base_model_name_or_path": "meta-llama/Llama-3.1-70B-Instruct"},
     "base model 'meta-llama/Llama-3.1-70B-Instruct' is not meta-llama/Llama-3.1-8B-Instruct"),
    ({"r": 64}, "rank 64 (max of r and rank_pattern) is above maxLoraRank 16"),
])
def test_an_adapter_for_another_model_or_above_the_rank_fails_at_preflight(server, change, problem):
    the_intent = _example_intent()
    first, second = [a for a in the_intent.adapters if a.repo_id is not None]
    _, findings = check_adapters(server, {_adapter_path(first): (200, ADAPTER_CONFIG),
                                          _adapter_path(second): (200, {**ADAPTER_CONFIG, **change})})
    # Both Hub adapters share a repository (two commits): the second commit's config is the bad one.
    assert [f.outcome for f in findings[:2]] == [Outcome.PASS, Outcome.FAIL]
    assert problem in findings[1].reason and findings[1].fix.startswith("pin an adapter trained on")


def test_an_adapter_commit_the_hub_does_not_have_fails(server):
    _, findings = check_adapters(server, {})
    assert findings[0].outcome is Outcome.FAIL
    assert "adapter_config.json cannot be read at that commit (404)" in findings[0].reason
    assert findings[0].fix.startswith("fix models[llama-8b].lora.adapters[sql-v1].modelId or .revision")


# --- eval.tasks: each task file's digest at its dataset commit ---------------------------------------------------

MAIN = "e53f048856ff4f594e959d75785d2c2d37b678ee"  # a commit the local Hub says main is at


def check_eval_files(server, routes):
    from stacks.config.files import PROJECT_DIR
    from stacks.environment import load_stack_file
    from stacks.preflight.intent import intent

    Hub.routes = routes
    the_intent = intent("revisions", "us-east-1",
                        load_stack_file(PROJECT_DIR / "examples" / "Pulumi.revisions.yaml")[1])
    ctx = context(Aws(), the_intent, hub_url=server)
    (entry,) = [c for c in catalog.CHECKS if c.id == "eval.tasks"]
    return the_intent, guarded(entry.id, entry.aws, lambda: entry.run(ctx))


def _dataset(sha: str, files: dict[str, str | None]) -> dict:
    return {"id": "openai/gsm8k", "sha": sha, "siblings": [
        {"rfilename": name, **({"lfs": {"sha256": digest, "size": 1}} if digest else {})}
        for name, digest in files.items()]}


def _dataset_path(revision: str) -> str:
    return f"/api/datasets/openai/gsm8k/revision/{revision}?blobs=true"


def test_each_eval_file_is_checked_against_its_pinned_digest_at_its_commit(server):
    the_intent, _ = check_eval_files(server, {})
    pinned = {s.path: s.sha256 for s in the_intent.eval_files}
    assert sorted(pinned) == ["main/test-00000-of-00001.parquet", "main/train-00000-of-00001.parquet"]
    (revision,) = {s.revision for s in the_intent.eval_files}
    test_file = "main/test-00000-of-00001.parquet"
    other = "a" * 64
    _, findings = check_eval_files(server, {_dataset_path(revision): (200, _dataset(revision, {
        **pinned, test_file: other}))})
    assert [f.outcome for f in findings] == [Outcome.FAIL, Outcome.PASS]
    assert f"the Hub's sha256 is {other}, the stack pins {pinned[test_file]}" in findings[0].reason
    assert findings[0].fix == f"pin models[llama-70b].eval.tasks[gsm8k].files[{test_file}].sha256 to {other}"


def test_a_commit_the_hub_does_not_have_fails_and_says_what_main_pins(server):
    # The example's placeholders: no such commit. The finding names main's commit and the file's digest there.
    digest = "b" * 64
    _, findings = check_eval_files(server, {_dataset_path("main"): (200, _dataset(MAIN, {
        "main/test-00000-of-00001.parquet": digest, "main/train-00000-of-00001.parquet": None}))})
    assert [f.outcome for f in findings] == [Outcome.FAIL, Outcome.FAIL]
    assert f"main is at {MAIN}, where main/test-00000-of-00001.parquet has sha256 {digest}" in findings[0].reason
    assert findings[0].fix == "fix models[llama-70b].eval.tasks[gsm8k].dataset or .revision"
    # A file kept in git has no digest on the Hub: named, not passed.
    _, findings = check_eval_files(server, {_dataset_path("4" * 40): (200, _dataset("4" * 40, {
        "main/test-00000-of-00001.parquet": "5" * 64, "main/train-00000-of-00001.parquet": None}))})
    assert [f.outcome for f in findings] == [Outcome.PASS, Outcome.COULD_NOT_CHECK]
