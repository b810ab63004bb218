"""The model on the Hugging Face Hub: one authenticated metadata request per pinned revision, and
the repository's file list at that revision through the staging Job's allow and ignore patterns; each LoRA
adapter's adapter_config.json at its commit, through the staging Job's own check; each eval task file's SHA-256 at
its dataset commit, against the one the stack pins."""

from __future__ import annotations

import fnmatch
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from llm_serving.serving import lora_adapter_config_problems
from stacks.preflight.context import Context
from stacks.preflight.intent import AdapterSource, EvalSource, ModelSource
from stacks.preflight.result import Finding, failed, passed, unknown

COMMIT = re.compile(r"^[0-9a-f]{40}$")
TOKEN_FIX = ("export HF_TOKEN=$(pulumi config get hfToken -s {stack}) before preflight (it cannot decrypt the "
             "stack's secret), and accept the model's licence on the Hub with that account")


def revision_url(base: str, model_id: str, revision: str) -> str:
    """The Hub's model-info endpoint at one revision (huggingface_hub's HfApi.model_info); only over HTTP(S),
    never `file:` or another scheme urllib would open."""
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise ValueError(f"the Hub URL {base!r} is not http(s)")
    return f"{base.rstrip('/')}/api/models/{model_id}/revision/{urllib.parse.quote(revision, safe='')}"


def staged_files(files: list[str], allow: tuple[str, ...], ignore: tuple[str, ...]) -> list[str]:
    """What snapshot_download keeps: names matching an allow pattern and no ignore pattern (fnmatch,
    as huggingface_hub's filter_repo_objects matches them)."""
    return [f for f in files
            if any(fnmatch.fnmatch(f, p) for p in allow) and not any(fnmatch.fnmatch(f, p) for p in ignore)]


def _get_json(ctx: Context, url: str) -> Any:
    """One authenticated GET of `url` (an http(s) URL from revision_url or file_url), its JSON body."""
    request = urllib.request.Request(url)  # noqa: S310 - http(s) only (revision_url, file_url)
    if ctx.hub_token:
        request.add_header("Authorization", f"Bearer {ctx.hub_token}")
    with urllib.request.urlopen(request, timeout=ctx.timeout_seconds) as response:  # noqa: S310 - http(s) only
        return json.load(response)


def _check(ctx: Context, source: ModelSource) -> Finding:
    check = "model.hub"
    subject = f"{source.model_id}@{source.revision[:12]}"
    try:
        info = _get_json(ctx, revision_url(ctx.hub_url, source.model_id, source.revision))
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            if not ctx.hub_token and ctx.intent.hf_token_in_stack:
                return unknown(check, f"{subject}: the Hub refuses an anonymous read ({error.code}), and the stack's "
                               "hfToken is encrypted", TOKEN_FIX.format(stack=ctx.intent.stack))
            who = "the token" if ctx.hub_token else "an anonymous read (no hfToken in the stack)"
            return failed(check, f"{subject}: {who} cannot read it ({error.code}: gated, private or missing); the "
                          "staging Job would fail", "set hfToken to a token whose account accepted the licence, "
                          f"or fix {source.key}")
        if error.code == 404:
            return failed(check, f"{subject}: no such repository or revision on the Hub",
                          f"fix models[{source.model}].modelId or {source.key}")
        return unknown(check, f"{subject}: the Hub answered {error.code}", "retry later")
    sha = info.get("sha", "")
    if COMMIT.match(source.revision) and sha != source.revision:
        return failed(check, f"{subject}: the Hub resolves it to {sha}", f"pin {source.key} to a full commit SHA")
    files = [s.get("rfilename", "") for s in info.get("siblings", [])]
    kept = staged_files(files, source.allow, source.ignore)
    weights = [f for f in kept if f.endswith(".safetensors")]
    if source.needs_weights and not weights:
        return failed(check, f"{subject}: of {len(files)} file(s) the staging Job's patterns keep no .safetensors "
                      f"({len(kept)} kept): vLLM would find no weights",
                      "pick a revision with safetensors weights (the Job skips .bin/.pth checkpoints)")
    if not kept:
        return failed(check, f"{subject}: the staging Job's patterns keep none of its {len(files)} file(s)",
                      f"fix {source.key}")
    return passed(check, f"{subject}: readable; the Job stages {len(kept)} of {len(files)} file(s)"
                  + (f", {len(weights)} safetensors shard(s)" if weights else ""))


def model_sources(ctx: Context) -> list[Finding]:
    return [_check(ctx, source) for source in ctx.intent.sources]


def file_url(base: str, repo_id: str, revision: str, filename: str) -> str:
    """A file of a repository at a revision (huggingface_hub's hf_hub_url: <endpoint>/<repo>/resolve/<rev>/<file>);
    only over HTTP(S)."""
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise ValueError(f"the Hub URL {base!r} is not http(s)")
    return f"{base.rstrip('/')}/{repo_id}/resolve/{urllib.parse.quote(revision, safe='')}/{filename}"


def _refused(ctx: Context, check: str, subject: str, error: urllib.error.HTTPError, what: str, then: str,
             fix: str) -> Finding:
    """A file the Hub would not give: could not check while the token is the stack's encrypted one, failed when
    refused (401, 403) or missing (404), could not check on any other answer."""
    if error.code in (401, 403) and not ctx.hub_token and ctx.intent.hf_token_in_stack:
        return unknown(check, f"{subject}: the Hub refuses an anonymous read ({error.code}), and the stack's hfToken "
                       "is encrypted", TOKEN_FIX.format(stack=ctx.intent.stack))
    if error.code in (401, 403, 404):
        return failed(check, f"{subject}: {what} ({error.code}); {then}", fix)
    return unknown(check, f"{subject}: the Hub answered {error.code}", "retry later")


def _adapter(ctx: Context, source: AdapterSource) -> Finding:
    check = "lora.adapters"
    if source.repo_id is None or source.revision is None:
        # The preview role reads no S3 object (security/preview-role-deny-policy.json); the staging Job checks it.
        return unknown(check, f"{source.adapter} ({source.s3_uri}): on S3, which the preview's role may not read; "
                       "the staging Job checks its manifest and adapter_config.json before vLLM loads it",
                       f"check it by hand: aws s3 cp {source.s3_uri}adapter_config.json -")
    subject = f"{source.adapter} ({source.repo_id}@{source.revision[:12]})"
    try:
        config = _get_json(ctx, file_url(ctx.hub_url, source.repo_id, source.revision, "adapter_config.json"))
    except urllib.error.HTTPError as error:
        return _refused(ctx, check, subject, error, "adapter_config.json cannot be read at that commit",
                        "the staging Job would fail", f"fix {source.key}.modelId or .revision, or hfToken's access")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return failed(check, f"{subject}: adapter_config.json is not JSON", f"fix {source.key}")
    if not isinstance(config, dict):
        return failed(check, f"{subject}: adapter_config.json is not a JSON object", f"fix {source.key}")
    problems = lora_adapter_config_problems(config, source.base_model_id, source.max_lora_rank)
    if problems:
        return failed(check, f"{subject}: {'; '.join(problems)}",
                      f"pin an adapter trained on {source.base_model_id}, or raise "
                      f"models[{source.model}].lora.maxLoraRank")
    return passed(check, f"{subject}: adapter_config.json fits {source.base_model_id} at maxLoraRank "
                  f"{source.max_lora_rank}")


def adapter_sources(ctx: Context) -> list[Finding]:
    return [_adapter(ctx, source) for source in ctx.intent.adapters]


def dataset_url(base: str, repo_id: str, revision: str) -> str:
    """A dataset's info at a revision with each file's LFS digest (huggingface_hub hf_api.py `dataset_info`:
    GET <endpoint>/api/datasets/<repo>/revision/<rev>, `blobs=True` for files_metadata); only over HTTP(S)."""
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise ValueError(f"the Hub URL {base!r} is not http(s)")
    return f"{base.rstrip('/')}/api/datasets/{repo_id}/revision/{urllib.parse.quote(revision, safe='')}?blobs=true"


def _digests(info: dict[str, Any]) -> dict[str, str | None]:
    """Each file's LFS SHA-256 in a dataset info (None: a small file kept in git, which the Hub lists without one)."""
    return {s.get("rfilename", ""): (s.get("lfs") or {}).get("sha256") for s in info.get("siblings", [])}


def _main_pins(ctx: Context, source: EvalSource) -> str:
    """What to pin from the dataset's main branch (its commit and this file's digest), or '' when it cannot say."""
    try:
        info = _get_json(ctx, dataset_url(ctx.hub_url, source.dataset, "main"))
    except (urllib.error.URLError, OSError, json.JSONDecodeError):
        return ""
    digest = _digests(info).get(source.path)
    return (f"; main is at {info.get('sha', '?')}" + (f", where {source.path} has sha256 {digest}" if digest else ""))


def _eval_file(ctx: Context, source: EvalSource) -> Finding:
    check = "eval.tasks"
    subject = f"{source.task} ({source.dataset}@{source.revision[:12]}:{source.path})"
    try:
        info = _get_json(ctx, dataset_url(ctx.hub_url, source.dataset, source.revision))
    except urllib.error.HTTPError as error:
        return _refused(ctx, check, subject, error, "no such dataset or commit readable on the Hub",
                        f"the eval's staging Job would fail{_main_pins(ctx, source)}",
                        f"fix {source.key}.dataset or .revision")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return unknown(check, f"{subject}: the Hub's answer is not JSON", "retry later")
    digests = _digests(info)
    if source.path not in digests:
        return failed(check, f"{subject}: the dataset has no such file at that commit",
                      f"fix {source.key}.files[{source.path}].path")
    found = digests[source.path]
    if found is None:
        return unknown(check, f"{subject}: a file kept in git, whose SHA-256 the Hub does not list; the staging Job "
                       "checks the pinned one", f"check it by hand: sha256sum {source.path}")
    if found != source.sha256:
        return failed(check, f"{subject}: the Hub's sha256 is {found}, the stack pins {source.sha256}; the staging "
                      "Job would refuse it", f"pin {source.key}.files[{source.path}].sha256 to {found}")
    return passed(check, f"{subject}: the Hub's sha256 is the pinned one")


def eval_sources(ctx: Context) -> list[Finding]:
    return [_eval_file(ctx, source) for source in ctx.intent.eval_files]
