"""The accuracy gate: one task set scored on a revision's own pods and on the stable's, the drop compared.

The eval Job runs this very file from a ConfigMap on the slim Python image (versions.VERIFY_IMAGE), with the
harness the staging Job put on the weights volume on PYTHONPATH: lm-evaluation-harness (`lm_eval`, pinned in
versions.HARNESS_VERSION) and exactly the packages its run imports, installed wheels only from the hashed lock
eval-requirements.txt beside this file. The module itself imports the standard library only; `lm_eval` is imported
inside `run`, after the environment that keeps it offline is set, so the settings parser, the comparison and the
report are usable (and tested) without the harness.

What it runs: lm_eval's own registered tasks (e.g. `gsm8k`), each overridden to read its documents from local
files staged with the weights (`dataset_path` the `datasets` packaged builder for the file format, `data_files`
per split; HF_DATASETS_OFFLINE and HF_HUB_OFFLINE set, so nothing is fetched), through the harness's
`local-completions` model (lm_eval/models/openai_completions.py LocalCompletionsAPI) against vLLM's
/v1/completions of each revision's own Service, `num_concurrent` its concurrency, `tokenizer_backend=None`: the
Job has no tokenizer, so only `generate_until` tasks can run (a log-likelihood task needs the prompt's token
count, api_models.py `_loglikelihood_tokens` asserts a tokenizer) and any other is refused before a request.
The score compared is `results[task]["<metric>,<filter>"]` of each run: the gate fails when the candidate scores
more than `maxDropPoints` (points of 100) below the stable, or below the task's `minScore`.

Exit 0 when every task passes (and in `--mode report` whatever the scores), 1 when one fails (gate), 2 on bad
settings (one line per problem, naming the key, the value and what is allowed), 130 when Ctrl-C or the Job's
SIGTERM stopped it. Progress lines go to stderr; stdout ends in one JSON line, `{"eval": {...}}`
(docs/verification.md, "The accuracy gate's program").

Length: the Job mounts this one file and runs it with no package of ours around it, so the settings parser, the
harness driver, the comparison and the report cannot be split into modules.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # what a shell reports for a command SIGINT ended (128 + 2)
HARNESS = "lm-eval"
# The harness's OpenAI-compatible completions client (lm_eval 0.4.13, lm_eval/models/openai_completions.py:16
# `@register_model("local-completions")`): it posts `{"prompt", "model", "max_tokens", "temperature", "stop",
# "seed"}` to `base_url` as given, so `base_url` is the whole /v1/completions URL (api_models.py:517 posts to it).
MODEL_TYPE = "local-completions"
# The `datasets` packaged builders that read local files (datasets/packaged_modules/{parquet,json,csv}): the task's
# `dataset_path` becomes one of these and `dataset_kwargs.data_files` names the staged file of each split.
FORMATS = ("parquet", "json", "csv")
# The only output type a run without a tokenizer can score: the others ask the API for log-likelihoods of a
# continuation, and the harness counts its tokens with the tokenizer the Job does not have (lm_eval 0.4.13,
# lm_eval/models/api_models.py:637 `assert self.tokenizer is not None` in `_loglikelihood_tokens`).
GENERATE_UNTIL = "generate_until"
# The wrapper group that makes each task a registered task with overrides: TaskManager.load takes a top-level dict
# as a whole inline config (lm_eval/tasks/manager.py:166 `entry_from_config`), whereas a dict with `task` inside a
# group's list is the registered task updated by the dict's keys (lm_eval/tasks/_factory.py:185-229).
GROUP = "llm-serving-eval-gate"
# The split keys of a task config (lm_eval/config/task.py TaskConfig): a split the staged files leave out is set
# to None, so the task neither reads nor asks for it.
SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")
# The kubelet keeps at most 4096 bytes of a termination message; pulumi-kubernetes prints it when the Job fails.
TERMINATION_BYTES = 4000
# The reachability check before a run: GET /v1/models answers at once on a live server, so this bounds a hung one.
REACH_TIMEOUT_SECONDS = 30.0
# Scores are fractions; the drop is in points and compared after rounding to this many decimals, so float noise
# (0.7 - 0.69 is 0.010000000000000009) never fails a drop equal to the allowance.
DROP_DECIMALS = 6

SETTINGS_KEYS = ("model", "revision", "candidate", "stable", "tasks", "limit", "maxDropPoints",
                 "requestTimeoutSeconds", "seed", "deployed")
ENDPOINT_KEYS = ("name", "url", "concurrency")
TASK_KEYS = ("name", "metric", "filter", "numFewshot", "format", "files", "minScore")
_TASK_LINE = r"^task:\s*['\"]?{}['\"]?\s*$"


class UsageError(ValueError):
    """Bad settings: each problem one line, exit 2."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or the Job's SIGTERM) stopped `run`: `report` holds what completed. A KeyboardInterrupt still."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("interrupted: results so far")
        self.report = report


@dataclass(frozen=True)
class Endpoint:
    """One revision's OpenAI API, reached through its own Service (its pods only)."""

    role: str  # "candidate" or "stable"
    name: str
    url: str  # ends in /v1
    concurrency: int

    def label(self) -> str:
        return f"{self.role} {self.name} ({self.url})"

    def completions_url(self) -> str:
        return self.url.rstrip("/") + "/completions"


@dataclass(frozen=True)
class TaskSpec:
    name: str
    metric: str
    filter: str
    num_fewshot: int | None  # None: the task's own default
    format: str
    files: dict[str, str]  # split -> staged file
    min_score: float | None

    @property
    def key(self) -> str:
        """The harness's result key of the score compared (lm_eval/evaluator.py: "<metric>,<filter>")."""
        return f"{self.metric},{self.filter}"


@dataclass(frozen=True)
class Settings:
    model: str
    revision: str | None
    candidate: Endpoint
    stable: Endpoint | None
    tasks: tuple[TaskSpec, ...]
    limit: int
    max_drop_points: float
    request_timeout_seconds: float
    seed: int
    # What the stack deployed when it wrote these settings (llm_serving/stack/model_parts.py `gate_fingerprint` of
    # both revisions), echoed in the report so that `python -m stacks promote` can refuse a report of another deploy.
    deployed: str | None = None


# ----------------------------------------------------------------------------------------------
# Settings


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _show(value: Any) -> str:
    return json.dumps(value)[:120]


class _Problems:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, key: str, value: Any, allowed: str) -> None:
        self.lines.append(f"settings: {key}: {_show(value)}: {allowed}")

    def keys(self, where: str, document: Any, allowed: tuple[str, ...]) -> bool:
        """False (with a problem) unless `document` is an object; one problem per unknown or missing key."""
        if not isinstance(document, dict):
            self.add(where or "(the document)", document, "expected an object")
            return False
        prefix = f"{where}." if where else ""
        for key in document:
            if key not in allowed:
                self.add(prefix + str(key), document[key], f"unknown key; allowed: {', '.join(allowed)}")
        for key in allowed:
            if key not in document:
                self.lines.append(f"settings: {prefix}{key}: missing (it may be null only where the format says so)")
        return True


def _endpoint(role: str, document: Any, problems: _Problems) -> Endpoint | None:
    if not problems.keys(role, document, ENDPOINT_KEYS):
        return None
    before = len(problems.lines)
    name, url, concurrency = document.get("name"), document.get("url"), document.get("concurrency")
    if "name" in document and (not isinstance(name, str) or not name):
        problems.add(f"{role}.name", name, "expected a non-empty string (the revision's deployment name)")
    if "url" in document and (not isinstance(url, str) or not re.match(r"^https?://[^/\s]+(/\S*)?/v1/?$", url)):
        problems.add(f"{role}.url", url, "expected http(s)://host[:port]/.../v1 (the revision's OpenAI API)")
    if "concurrency" in document and (not _is_int(concurrency) or not 1 <= concurrency <= 4096):
        problems.add(f"{role}.concurrency", concurrency, "expected an integer from 1 to 4096")
    if len(problems.lines) > before:
        return None
    return Endpoint(role, name, url, concurrency)


def _task(index: int, document: Any, problems: _Problems) -> TaskSpec | None:
    where = f"tasks[{index}]"
    if not problems.keys(where, document, TASK_KEYS):
        return None
    before = len(problems.lines)
    for key in ("name", "metric", "filter"):
        if key in document and (not isinstance(document[key], str) or not document[key]):
            problems.add(f"{where}.{key}", document[key], "expected a non-empty string")
    shots = document.get("numFewshot")
    if shots is not None and (not _is_int(shots) or not 0 <= shots <= 100):
        problems.add(f"{where}.numFewshot", shots, "expected an integer from 0 to 100, or null (the task's default)")
    if "format" in document and document["format"] not in FORMATS:
        problems.add(f"{where}.format", document["format"], f"expected one of {', '.join(FORMATS)}")
    files = document.get("files")
    if "files" in document:
        if not isinstance(files, dict) or not files:
            problems.add(f"{where}.files", files, "expected an object of split name -> staged file")
        else:
            for split, path in files.items():
                if not isinstance(path, str) or not os.path.isabs(path):
                    problems.add(f"{where}.files.{split}", path, "expected an absolute path")
                elif not os.path.isfile(path):
                    problems.add(f"{where}.files.{split}", path, "no such file (is the task set staged?)")
    floor = document.get("minScore")
    if floor is not None and (not _is_number(floor) or not 0 <= floor <= 1):
        problems.add(f"{where}.minScore", floor, "expected a score from 0 to 1, or null (no floor)")
    if len(problems.lines) > before or any(key not in document for key in TASK_KEYS):
        return None
    return TaskSpec(document["name"], document["metric"], document["filter"], shots, document["format"],
                    {str(k): str(v) for k, v in files.items()}, float(floor) if floor is not None else None)


def parse_settings(document: Any) -> Settings:
    """The Job's settings file as the stack writes it (camelCase keys, docs/verification.md); every problem at once."""
    problems = _Problems()
    if not problems.keys("", document, SETTINGS_KEYS):
        raise UsageError(problems.lines)
    model, revision = document.get("model"), document.get("revision")
    if "model" in document and (not isinstance(model, str) or not model):
        problems.add("model", model, "expected the served model name")
    if revision is not None and (not isinstance(revision, str) or not revision):
        problems.add("revision", revision, "expected the revision's name, or null (a model with one revision)")
    candidate = _endpoint("candidate", document.get("candidate"), problems) if "candidate" in document else None
    stable = None
    if document.get("stable") is not None:
        stable = _endpoint("stable", document["stable"], problems)
    tasks: list[TaskSpec] = []
    raw_tasks = document.get("tasks")
    if "tasks" in document:
        if not isinstance(raw_tasks, list) or not raw_tasks:
            problems.add("tasks", raw_tasks, "expected a non-empty list of tasks")
        else:
            for index, raw in enumerate(raw_tasks):
                task = _task(index, raw, problems)
                if task is not None:
                    if any(t.name == task.name for t in tasks):
                        problems.add(f"tasks[{index}].name", task.name, "each task once")
                    tasks.append(task)
    limit = document.get("limit")
    if "limit" in document and (not _is_int(limit) or not 1 <= limit <= 100000):
        problems.add("limit", limit, "expected an integer from 1 to 100000 (samples per task)")
    drop = document.get("maxDropPoints")
    if "maxDropPoints" in document and (not _is_number(drop) or not 0 <= drop <= 100):
        problems.add("maxDropPoints", drop, "expected a number of points from 0 to 100")
    timeout = document.get("requestTimeoutSeconds")
    if "requestTimeoutSeconds" in document and (not _is_number(timeout) or not 1 <= timeout <= 86400):
        problems.add("requestTimeoutSeconds", timeout, "expected seconds from 1 to 86400")
    seed = document.get("seed")
    if "seed" in document and not _is_int(seed):
        problems.add("seed", seed, "expected an integer")
    deployed = document.get("deployed")
    if deployed is not None and (not isinstance(deployed, str) or not deployed):
        problems.add("deployed", deployed, "expected the deploy's fingerprint, or null")
    if problems.lines or candidate is None:
        raise UsageError(problems.lines or ["settings: candidate: missing"])
    return Settings(model, revision, candidate, stable, tuple(tasks), limit, float(drop), float(timeout), seed,
                    deployed)


# ----------------------------------------------------------------------------------------------
# The comparison and the report


@dataclass
class Outcome:
    """One endpoint's run: the score and sample count of each task, or why there is none."""

    scores: dict[str, tuple[float | None, int | None]]
    error: str | None = None


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def judge(settings: Settings, candidate: Outcome | None, stable: Outcome | None, harness: str,
          mode: str = "gate") -> dict[str, Any]:
    """The report: per task the two scores, the drop in points and the verdict; one failing line per problem.
    `None` for an outcome: that endpoint's run did not happen (interrupted before it)."""
    named = f"revision {settings.revision} of {settings.model}: " if settings.revision is not None else ""
    failures: list[str] = []
    notes: list[str] = []
    for outcome, endpoint in ((stable, settings.stable), (candidate, settings.candidate)):
        if endpoint is not None and outcome is not None and outcome.error is not None:
            failures.append(f"{named}{endpoint.label()}: {outcome.error}")
    tasks = []
    for task in settings.tasks:
        c, samples = (candidate.scores.get(task.name, (None, None)) if candidate else (None, None))
        s = stable.scores.get(task.name, (None, None))[0] if stable else None
        drop = round((s - c) * 100, DROP_DECIMALS) if c is not None and s is not None else None
        lines = []
        where = f"{named}{task.name} {task.key}"
        if candidate is not None and candidate.error is None and c is None:
            lines.append(f"{where}: the harness reported no score for the candidate")
        if settings.stable is not None and stable is not None and stable.error is None and s is None:
            lines.append(f"{where}: the harness reported no score for the stable")
        if drop is not None and drop > settings.max_drop_points:
            lines.append(f"{where}: candidate {_score(c)} is {drop:g} points below stable {_score(s)} "
                         f"(allowed {settings.max_drop_points:g}, {samples} samples)")
        if task.min_score is not None and c is not None and c < task.min_score:
            also = f"; the stable scores {_score(s)}, below it too" if s is not None and s < task.min_score else ""
            lines.append(f"{where}: candidate {_score(c)} is below the floor minScore {_score(task.min_score)}{also}")
        elif task.min_score is not None and s is not None and s < task.min_score:
            notes.append(f"{where}: the stable scores {_score(s)}, below the floor minScore "
                         f"{_score(task.min_score)} the candidate passes")
        failures += lines
        complete = c is not None and (settings.stable is None or s is not None)
        tasks.append({"name": task.name, "metric": task.metric, "filter": task.filter, "samples": samples,
                      "candidate": c, "stable": s, "dropPoints": drop, "minScore": task.min_score,
                      "passed": complete and not lines})
    if candidate is None or (settings.stable is not None and stable is None):
        failures.append(f"{named}interrupted before every run completed")
    return {"model": settings.model, "revision": settings.revision, "deployed": settings.deployed,
            "passed": not failures, "harness": harness,
            "mode": mode, "limit": settings.limit, "maxDropPoints": settings.max_drop_points, "tasks": tasks,
            "failures": failures, "notes": notes}


def render_text(report: dict[str, Any]) -> str:
    rows = [("task", "score", "samples", "stable", "candidate", "drop (points)", "floor", "verdict")]
    for t in report["tasks"]:
        rows.append((t["name"], f"{t['metric']},{t['filter']}", "-" if t["samples"] is None else str(t["samples"]),
                     _score(t["stable"]), _score(t["candidate"]),
                     "-" if t["dropPoints"] is None else f"{t['dropPoints']:g}", _score(t["minScore"]),
                     "PASS" if t["passed"] else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [f"note: {note}" for note in report["notes"]] + report["failures"]
    of = f" (revision {report['revision']} of {report['model']})" if report["revision"] else f" ({report['model']})"
    lines.append(f"verdict: {'PASS' if report['passed'] else 'FAIL'}{of}, {report['harness']}, "
                 f"limit {report['limit']}, allowed drop {report['maxDropPoints']:g} points")
    return "\n".join(lines) + "\n"


def termination_message(report: dict[str, Any]) -> str:
    """What `kubectl describe` and pulumi-kubernetes show of the Job: the failing lines, or a one-line pass."""
    if report["failures"]:
        text = "\n".join(report["failures"])
    else:
        text = "passed: " + "; ".join(
            f"{t['name']} {_score(t['candidate'])}" + (f" (stable {_score(t['stable'])}, drop {t['dropPoints']:g})"
                                                       if t["stable"] is not None else "")
            for t in report["tasks"])
    return text.encode()[:TERMINATION_BYTES].decode(errors="ignore")


# ----------------------------------------------------------------------------------------------
# Progress


class Lines:
    """Progress as lines on stderr (stdout is the report's), each after the seconds since the run began."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self._began = time.monotonic()

    def __call__(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(f"[{time.monotonic() - self._began:6.1f} s] {text}\n")
            self.stream.flush()
        except OSError:  # its reader went away: the run and its report go on
            self.stream = None


# ----------------------------------------------------------------------------------------------
# The run


@contextlib.contextmanager
def _environment(updates: dict[str, str]) -> Iterator[None]:
    """The variables the harness reads, set for the run and restored after it (main runs in-process in tests)."""
    before = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def reach(endpoint: Endpoint, model: str, key: str, timeout: float) -> str | None:
    """None when the endpoint lists `model` on GET /v1/models with this key; otherwise what is wrong, one line. The
    harness retries a refused connection with back-off and then raises from deep in aiohttp: this says it first."""
    request = urllib.request.Request(endpoint.url.rstrip("/") + "/models",  # noqa: S310 - http(s) checked above
                                     headers={"Authorization": f"Bearer {key}", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            document = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return f"unreachable: GET /v1/models answered HTTP {error.code}" + (
            " (the API key was refused)" if error.code in (401, 403) else "")
    except (urllib.error.URLError, OSError) as error:
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        return f"unreachable: {reason}"
    except ValueError:
        return "unreachable: GET /v1/models answered something other than JSON"
    served = [str(m.get("id")) for m in document.get("data", []) if isinstance(m, dict)]
    if model not in served:
        return f"does not serve {model} (GET /v1/models lists {', '.join(served) or 'nothing'})"
    return None


_TASK_DIRS: dict[tuple[str, str], tuple[str, ...]] = {}


def task_dirs(tasks_root: Path, name: str) -> tuple[str, ...]:
    """The directories under lm_eval/tasks whose YAML declares `task: <name>` at its top level. Indexing only these
    builds the same entry as the whole tree (an `include:` or `!function` resolves against its own file), at a
    fraction of the cost: TaskManager() parses every one of lm_eval 0.4.13's ~14,000 task files (5.6 s of CPU
    measured), this reads them as bytes (0.3 s)."""
    cached = _TASK_DIRS.get((str(tasks_root), name))
    if cached is not None:
        return cached
    pattern = re.compile(_TASK_LINE.format(re.escape(name)).encode(), re.MULTILINE)
    found = set()
    for directory, _, files in os.walk(tasks_root):
        for file in files:
            if file.endswith(".yaml"):
                with open(os.path.join(directory, file), "rb") as handle:
                    if pattern.search(handle.read()):
                        found.add(directory)
    _TASK_DIRS[(str(tasks_root), name)] = result = tuple(sorted(found))
    return result


def task_overrides(task: TaskSpec, config: dict[str, Any], cache_dir: str) -> dict[str, Any]:
    """The registered task's config updated to read the staged files: the keys of one entry of the wrapper group's
    task list. `config` is the task's registered config (its index entry)."""
    overrides: dict[str, Any] = {
        "task": task.name,
        "dataset_path": task.format,
        "dataset_name": None,
        # datasets.load_dataset(path, name, data_files=..., cache_dir=...): the packaged builder reads the staged
        # file of each split and writes its Arrow cache into the run's scratch directory, not $HOME.
        "dataset_kwargs": {"data_files": dict(task.files), "cache_dir": cache_dir},
    }
    for key in SPLIT_KEYS:
        if config.get(key) is not None and config[key] not in task.files:
            overrides[key] = None
    if task.num_fewshot is not None:
        overrides["num_fewshot"] = task.num_fewshot
    return overrides


def check_tasks(settings: Settings, index: dict[str, Any]) -> list[str]:
    """What the harness cannot run as asked, one line each, before any request: an unknown task, one that needs
    log-likelihoods, a metric or filter it does not compute, a split the staged files leave out."""
    problems = []
    for number, task in enumerate(settings.tasks):
        where = f"settings: tasks[{number}]"
        entry = index.get(task.name)
        if entry is None or entry.cfg is None:
            problems.append(f"{where}.name: {_show(task.name)}: not a task the harness registers")
            continue
        config = entry.cfg
        if "task" not in config or isinstance(config.get("task"), list):
            problems.append(f"{where}.name: {_show(task.name)}: a group or tag; name one of its tasks")
            continue
        output = config.get("output_type", GENERATE_UNTIL)
        if output != GENERATE_UNTIL:
            problems.append(f"{where}.name: {_show(task.name)}: its output_type is {output}, which needs "
                            f"log-likelihoods and so a tokenizer the Job does not have; only {GENERATE_UNTIL} tasks "
                            "can run")
        metrics = [str(m.get("metric")) for m in config.get("metric_list") or [] if isinstance(m, dict)]
        if task.metric not in metrics:
            problems.append(f"{where}.metric: {_show(task.metric)}: {task.name} computes "
                            f"{', '.join(metrics) or 'none'}")
        filters = [str(f.get("name")) for f in config.get("filter_list") or [] if isinstance(f, dict)] or ["none"]
        if task.filter not in filters:
            problems.append(f"{where}.filter: {_show(task.filter)}: {task.name} has {', '.join(filters)}")
        evaluated = [config.get(k) for k in ("test_split", "validation_split") if config.get(k) in task.files]
        if not evaluated:
            wanted = [str(config.get(k)) for k in ("test_split", "validation_split") if config.get(k)]
            problems.append(f"{where}.files: {_show(sorted(task.files))}: {task.name} is scored on its "
                            f"{' or '.join(wanted) or 'test'} split; stage that file")
        shots = task.num_fewshot if task.num_fewshot is not None else config.get("num_fewshot") or 0
        examples = config.get("fewshot_split") or config.get("training_split")
        if shots and examples not in task.files:
            problems.append(f"{where}.files: {_show(sorted(task.files))}: {shots}-shot {task.name} draws its examples "
                            f"from its {examples} split; stage that file or set numFewshot 0")
    return problems


def _harness_version() -> str:
    try:
        return f"{HARNESS} {importlib.metadata.version('lm_eval')}"
    except importlib.metadata.PackageNotFoundError:
        return f"{HARNESS} (not installed)"


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__


def evaluate(settings: Settings, endpoint: Endpoint, index_paths: tuple[str, ...], cache_dir: str,
             configs: dict[str, dict[str, Any]]) -> Outcome:
    """One endpoint's run of the whole task set through lm_eval's `simple_evaluate`."""
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_defaults=False, include_path=list(index_paths))
    group = {"group": GROUP, "task": [task_overrides(t, configs[t.name], cache_dir) for t in settings.tasks]}
    results = evaluator.simple_evaluate(
        model=MODEL_TYPE,
        model_args={
            "model": settings.model,
            "base_url": endpoint.completions_url(),
            "num_concurrent": endpoint.concurrency,
            # No tokenizer: "auto" would ask the server for one or download it from the Hub
            # (openai_completions.py:27-50); None sends the prompts as text (api_models.py:184-188).
            "tokenizer_backend": None,
            "tokenized_requests": False,
            "timeout": math.ceil(settings.request_timeout_seconds),
            "seed": settings.seed,
        },
        tasks=[group],
        task_manager=manager,
        limit=settings.limit,
        bootstrap_iters=0,  # no standard errors: a resampling per metric that the gate does not read
        log_samples=False,
        random_seed=settings.seed,
        numpy_random_seed=settings.seed,
        torch_random_seed=None,  # no torch in the Job
        fewshot_random_seed=settings.seed,
    )
    if results is None:
        return Outcome({}, "the harness returned no results")
    scores: dict[str, tuple[float | None, int | None]] = {}
    for task in settings.tasks:
        value = results["results"].get(task.name, {}).get(task.key)
        samples = results.get("n-samples", {}).get(task.name, {}).get("effective")
        scores[task.name] = (float(value) if isinstance(value, int | float) else None,
                             int(samples) if samples is not None else None)
    return Outcome(scores)


def run(settings: Settings, key: str, progress: Callable[[str], None] = lambda _: None,
        mode: str = "gate") -> dict[str, Any]:
    """Both runs and the report. Raises UsageError when the harness cannot run the task set as asked, Interrupted
    (with the report so far) on Ctrl-C."""
    with tempfile.TemporaryDirectory(prefix="eval-gate-") as scratch, _environment({
        # Nothing is fetched: the task files are staged, and `datasets` and huggingface_hub read these at import
        # (datasets/config.py HF_DATASETS_OFFLINE, huggingface_hub/constants.py HF_HUB_OFFLINE).
        "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
        # The Job's user has no writable home: every cache in the run's scratch directory.
        "HF_HOME": os.path.join(scratch, "hf"),
        # The key as the harness reads it (openai_completions.py:135 `os.environ.get("OPENAI_API_KEY", "")`).
        "OPENAI_API_KEY": key,
        # Progress bars drawn with carriage returns are one endless line in a Job's log: these lines say instead.
        "TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }):
        harness = _harness_version()
        progress(f"{harness}: {len(settings.tasks)} task(s), the first {settings.limit} samples of each")
        index_paths, configs = _index(settings)
        outcomes: dict[str, Outcome] = {}
        try:
            for endpoint in (settings.stable, settings.candidate):
                if endpoint is None:
                    continue
                progress(f"{endpoint.label()}: GET /v1/models")
                problem = reach(endpoint, settings.model, key, min(REACH_TIMEOUT_SECONDS,
                                                                   settings.request_timeout_seconds))
                if problem is not None:
                    progress(f"{endpoint.role}: {problem}")
                    outcomes[endpoint.role] = Outcome({}, problem)
                    continue
                progress(f"{endpoint.role}: running {', '.join(t.name for t in settings.tasks)} at concurrency "
                         f"{endpoint.concurrency}")
                try:
                    outcome = evaluate(settings, endpoint, index_paths, os.path.join(scratch, "datasets"), configs)
                except Exception as error:  # noqa: BLE001 - any harness error is this endpoint's failing line
                    outcome = Outcome({}, f"the harness failed: {_one_line(error)}")
                outcomes[endpoint.role] = outcome
                progress(f"{endpoint.role}: " + (outcome.error or ", ".join(
                    f"{name} {_score(value)} ({samples} samples)"
                    for name, (value, samples) in outcome.scores.items())))
        except KeyboardInterrupt:
            raise Interrupted(judge(settings, outcomes.get("candidate"), outcomes.get("stable"), harness,
                                    mode)) from None
        return judge(settings, outcomes["candidate"], outcomes.get("stable"), harness, mode)


def _index(settings: Settings) -> tuple[tuple[str, ...], dict[str, dict[str, Any]]]:
    """The task directories to index and each task's registered config; UsageError for what cannot run."""
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    tasks_root = Path(lm_eval.tasks.__file__).parent
    paths = tuple(sorted({d for t in settings.tasks for d in task_dirs(tasks_root, t.name)}))
    index = TaskManager(include_defaults=False, include_path=list(paths)).task_index if paths else {}
    problems = check_tasks(settings, index)
    if problems:
        raise UsageError(problems)
    return paths, {t.name: dict(index[t.name].cfg) for t in settings.tasks}


def read_key(key_file: str) -> str:
    """The API key from its file: never an argument (ps would show it)."""
    try:
        with open(key_file, encoding="utf-8") as handle:
            key = handle.read().strip()
    except OSError as error:
        raise UsageError([f"--api-key-file {key_file}: {error.strerror}"]) from None
    if not key:
        raise UsageError([f"--api-key-file {key_file}: the file is empty"])
    return key


def _write_termination(path: str | None, text: str) -> None:
    if path and text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def main(argv: list[str] | None = None) -> int:
    """The Job's entry point: `python3 eval_gate.py --settings FILE --api-key-file FILE --mode gate|report
    --termination-log PATH`."""
    parser = argparse.ArgumentParser(prog="eval_gate.py", description="Accuracy gate: candidate vs stable revision.")
    parser.add_argument("--settings", required=True, help="JSON settings (endpoints, tasks, limit, allowed drop)")
    parser.add_argument("--api-key-file", required=True, help="file holding the API key")
    parser.add_argument("--mode", choices=("gate", "report"), default="gate",
                        help="gate: exit 1 when a task fails (the deploy fails); report: exit 0 and report")
    parser.add_argument("--termination-log", help="file for the failing lines (Kubernetes' termination message)")
    args = parser.parse_args(argv)
    # A Job past its activeDeadlineSeconds gets SIGTERM: taken as Ctrl-C, so the log keeps the report so far.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    interrupted = False
    try:
        try:
            with open(args.settings, encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError) as error:
            raise UsageError([f"--settings {args.settings}: {error}"]) from None
        settings = parse_settings(document)
        report = run(settings, read_key(args.api_key_file), Lines(sys.stderr), args.mode)
    except Interrupted as stopped:
        report, interrupted = stopped.report, True
    except UsageError as error:
        for line in error.problems:
            print(f"eval: {line}", file=sys.stderr)
        _write_termination(args.termination_log, "\n".join(error.problems).encode()[:TERMINATION_BYTES].decode(
            errors="ignore"))
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the first run began: nothing to report
        print("eval: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.write(render_text(report))
    # The last line is the whole report as one JSON object, for `kubectl logs job/... | tail -1`.
    print(json.dumps({"eval": report}, sort_keys=True), flush=True)
    _write_termination(args.termination_log, termination_message(report))
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAIL if report["failures"] and args.mode == "gate" else EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
