"""EvalJob on the component tier (one component under Pulumi's mock runtime): what names each Job, so that a change
runs exactly the Jobs it should; the staging Job's and the eval Job's files apart; the task set's directory named by
every file with its task and split; the eval pods' own fence."""

from __future__ import annotations

import json
from typing import Any

from llm_serving.verification import EvalFile, EvalJob, EvalJobArgs, VerificationMode, evaluation
from tests.support.components import find, run

JOB, CONFIGMAP = "kubernetes:batch/v1:Job", "kubernetes:core/v1:ConfigMap"
FILE = EvalFile("openai/gsm8k", "4" * 40, "main/test-00000-of-00001.parquet", "5" * 64, "")
TASK_DIR = evaluation.task_set_dir((("gsm8k", "test", FILE),))
SETTINGS: dict[str, Any] = {
    "model": "llama-70b", "revision": "canary",
    "candidate": {"name": "llama-70b-canary", "url": "http://llama-70b-canary.llm-serving.svc:8000/v1",
                  "concurrency": 8},
    "stable": {"name": "llama-70b", "url": "http://llama-70b.llm-serving.svc:8000/v1", "concurrency": 1},
    "tasks": [{"name": "gsm8k", "metric": "exact_match", "filter": "strict-match", "numFewshot": 0, "format": "parquet",
               "files": {"test": f"{TASK_DIR}/gsm8k/test.parquet"}, "minScore": None}],
    "limit": 100, "maxDropPoints": 2.0, "requestTimeoutSeconds": 86, "seed": 1234}


def _render(settings: dict[str, Any] = SETTINGS, deployed: str = "v1", stage_requirements: str = "lock-a\n"):
    args = EvalJobArgs(namespace="llm-serving", model_name="llama-70b-canary", settings=settings,
                       files=(FILE,), task_dir=TASK_DIR, mode=VerificationMode.GATE, image="python@sha256:abc",
                       stage_requirements=stage_requirements, claim_name="llama-70b-weights",
                       api_key_secret="vllm-api-key", deadline_seconds=3600, stage_deadline_seconds=1800,
                       deployed=deployed)
    return run(lambda: EvalJob("llama-70b-canary-eval", args))


def _names(result) -> dict[str, str]:
    """The Job and ConfigMap names, by their role (`eval` or `stage`)."""
    found = {}
    for resource in [*find(result, JOB), *find(result, CONFIGMAP)]:
        kind = "job" if resource["type"] == JOB else "config"
        role = "stage" if "-stage" in resource["name"] else "eval"
        found[f"{role}-{kind}"] = resource["inputs"]["metadata"]["name"]
    return found


def test_a_weight_step_changes_the_concurrency_and_runs_no_eval():
    before = _render()
    at_zero = {**SETTINGS, "candidate": {**SETTINGS["candidate"], "concurrency": 1}}
    after = _render(at_zero)
    assert _names(after) == _names(before)
    # The settings a later run reads carry the new concurrency: the ConfigMap (not immutable) is replaced.
    (config,) = [r for r in find(after, CONFIGMAP) if "-stage" not in r["name"]]
    assert json.loads(config["inputs"]["data"]["settings.json"])["candidate"]["concurrency"] == 1
    assert not config["inputs"].get("immutable")


def test_a_changed_revision_runs_the_eval_again_but_not_the_staging():
    before, after = _names(_render()), _names(_render(deployed="v2"))
    assert after["eval-job"] != before["eval-job"] and after["eval-config"] != before["eval-config"]
    assert (after["stage-job"], after["stage-config"]) == (before["stage-job"], before["stage-config"])


def test_a_new_staging_lock_stages_again_but_does_not_run_the_eval():
    before, after = _names(_render()), _names(_render(stage_requirements="lock-b\n"))
    assert after["stage-job"] != before["stage-job"]
    assert after["eval-job"] == before["eval-job"]


def test_each_job_mounts_its_own_files_and_the_eval_pod_is_fenced_as_eval():
    result = _render()
    names = _names(result)
    jobs = {("stage" if "-stage" in r["name"] else "eval"): r["inputs"]["spec"]["template"] for r in find(result, JOB)}
    mounted = {role: {v["configMap"]["name"] for v in t["spec"]["volumes"] if "configMap" in v}
               for role, t in jobs.items()}
    assert mounted == {"stage": {names["stage-config"]}, "eval": {names["eval-config"]}}
    configs = {("stage" if "-stage" in r["name"] else "eval"): set(r["inputs"]["data"])
               for r in find(result, CONFIGMAP)}
    assert configs == {"stage": {"stage_eval.py", "stage-requirements.txt", "requirements.txt"},
                       "eval": {"eval_gate.py", "settings.json", "requirements.txt"}}
    assert jobs["eval"]["metadata"]["labels"]["app.kubernetes.io/component"] == "eval"
    # No fsGroup on the pod that mounts the weights volume: a group change would walk every file of it.
    assert "fsGroup" not in jobs["eval"]["spec"]["securityContext"]
    policy = evaluation.eval_network_policy(namespace="llm-serving", model_selector={"app": "vllm"}, port=8000)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= jobs["eval"]["metadata"]["labels"].items()


def test_a_renamed_task_or_split_is_a_new_task_set_directory():
    # The staging Job's marker vouches for its directory's files by their names: another name is another directory.
    assert len({evaluation.task_set_dir(((task, split, FILE),))
                for task, split in (("gsm8k", "test"), ("gsm8k_cot", "test"), ("gsm8k", "validation"))}) == 3
