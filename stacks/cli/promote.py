"""`python -m stacks promote <stack> <model> --report <file> [--eval-report <file>]`: one step of a second
revision's rollout (`models[].revisions`, llm_serving/stack/revisions.py), written into the stack file from its gates'
reports, so that each step is a pull request whose offline diff (`make diff`) shows what the next `pulumi up` changes
(issue #41).

A report is a gate's JSON: the verification Job's last log line (`kubectl logs job/<name> | tail -1`,
`{"verification": {...}}`); a file holding the whole log is read from its last line. It carries the fingerprint of
what the Job checked (`deployed`), which must be the one the stack file gives now (`python -m stacks verify --json`
output carries none: it checks whatever its URL serves, and is refused). `--eval-report` is the eval Job's
(`{"eval": {...}}`, llm_serving/verification/eval_gate.py), required for a model with `eval`. Each names the model
(`model`), the revision it checked (`revision`) and its verdict (`passed`); one that names another model or revision
than the step's is refused.

The steps (docs/operations.md, "Rolling out a revision"):
1. Both gates passed: the second revision's weight goes to the next step of the ladder (`LADDER`, or `--steps`), the
   first revision's to the rest of 100. A gate failed: the second revision's weight goes to 0 (the first takes 100),
   and the revision stays, reachable through its header, for a look at why.
2. At 100, the next passing step converges: the first revision's keys become the second's, so its pods roll onto
   what the second runs while they take no request.
3. The first revision's own gate passed on its rolled pods (`--report` names the first revision now): the requests
   move back to it up the same ladder, from pods that run the same thing to pods that run the same thing.
4. The next step retires: the first revision's keys become the model's own and `revisions` goes. The model's pods do
   not change (the promoted model is checked to run what the first revision ran), and the second revision's objects,
   which take no request, are deleted. No step ever sends requests to pods that are rolling.

The stack file is edited as text, as `pin-images` does (stacks/images.py): only the weight values change, the first
revision's keys are rewritten, or the `revisions` block goes and the model's keys it names are written; every other
line, comments included, is kept. After the edit the file is parsed again and must differ from before in exactly
those values, and the stack must validate as `load_stack_file` validates it, or nothing is written.

Exit codes: 0 the file changed, 1 nothing to do (a failed gate on a revision already at weight 0, or on the first
revision's rolled pods), 2 a bad report, stack or step (one line each).

Length: the reports, the four kinds of edit and the checks after each are one state machine over one stack file's
text; split, each part would re-read the file's layout the others rely on.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from llm_serving.platform.args import fields_of
from llm_serving.serving import ModelArgs
from llm_serving.stack import evaluation, model_parts, revisions
from stacks import environment, images
from stacks.config import ServingStackArgs
from stacks.config import files as stack_files
from stacks.config.problems import CommandLineParser, ConfigError, Problem

# The second revision's share after each passing gate, in percent. 10 first: the share the docs' and the issue's
# example gives a new revision (90/10); then each step at most 2.5 times the last, so a regression the gate misses at
# one step reaches at most that many more requests before the next gate; the last step is 100 (Flagger's
# `analysis.stepWeights` is the same kind of list, docs.flagger.app/usage/deployment-strategies; a ladder that never
# reaches 100 reported success without promoting, fluxcd/flagger#189, so `--steps` must end at 100).
LADDER = (10, 25, 50, 100)
# The keys a revision may set for itself, as the stack file spells them (RevisionArgs; revisions.OVERRIDES).
REVISION_KEYS = ("revision", "tokenizerRevision", "image", "quantization", "kvCacheDtype", "extraArgs")
# A `weight: <n>` outside a comment (a comment starts at a `#` after a space or at the line's start: YAML 1.2.2,
# section 6.6).
_WEIGHT = re.compile(r"(?<![\w-])(weight:[ \t]*)(\d+)")
_COMMENT = re.compile(r"(^|[ \t])#.*$")


@dataclass(frozen=True)
class Report:
    model: str
    revision: str
    passed: bool
    reason: str  # the first failing check's line, when it failed and said which
    kind: str = "verification"  # or "eval": the accuracy gate's report (llm_serving/verification/eval_gate.py)
    deployed: str | None = None  # the fingerprint of what the gate checked (llm_serving/stack/model_parts.py)


def read_report(path: Path, kind: str = "verification", option: str = "--report") -> Report:
    """A gate's report in `path`: the whole file as JSON, else its last non-empty line (a saved Job log); the Job's
    `{"verification": ...}` (or, `kind` eval, `{"eval": ...}`) envelope is opened."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _bad(path, f"cannot be read ({getattr(error, 'strerror', None) or error})", option) from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        try:
            document = json.loads(last)
        except json.JSONDecodeError:
            raise _bad(path, "is not JSON, nor does its last line hold the Job's JSON report", option) from None
    if isinstance(document, dict) and len(document) == 1 and set(document) <= {"verification", "eval"}:
        if kind not in document:
            raise _bad(path, f"is the {next(iter(document))} Job's report, not the {kind} Job's", option)
        document = document[kind]
    if not isinstance(document, dict):
        raise _bad(path, "holds no JSON object", option)
    missing = [key for key in ("model", "revision", "passed") if key not in document]
    if missing:
        raise _bad(path, f"has no {', '.join(missing)} (a report of the per-revision gate names the model, the "
                         "revision it checked and whether it passed)", option)
    model, revision, passed = document["model"], document["revision"], document["passed"]
    if not isinstance(model, str) or not isinstance(revision, str) or not isinstance(passed, bool):
        raise _bad(path, "needs model and revision as strings and passed as true or false, got "
                         f"{json.dumps({'model': model, 'revision': revision, 'passed': passed})}", option)
    failures = document.get("failures")
    reason = str(failures[0]) if isinstance(failures, list) and failures else ""
    deployed = document.get("deployed")
    return Report(model, revision, passed, reason, kind, deployed if isinstance(deployed, str) else None)


def _bad(path: Path, message: str, option: str = "--report") -> ConfigError:
    return ConfigError([Problem(option, message, str(path), "the gate's JSON report")])


def ladder(value: str) -> tuple[int, ...]:
    """`--steps 10,25,50,100`: rising percentages, the last 100."""
    try:
        steps = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rising percentages such as 10,25,50,100, got {value!r}") from None
    if not steps or steps[-1] != 100 or any(not 0 < s <= 100 for s in steps) or list(steps) != sorted(set(steps)):
        raise argparse.ArgumentTypeError(f"expected rising percentages between 1 and 100 ending at 100, got {value!r}")
    return steps


# --- the edits, as text ------------------------------------------------------------------------------------

def _model_block(lines: list[str], model: str) -> tuple[int, int, int, int, int]:
    """(model item, its end, its keys' indent, its `revisions:` line, that block's end)."""
    item, item_end, key_indent = images.model_item(lines, model, "promote the stack that lists the model")
    found = next((i for i in range(item + 1, item_end) if images.indent(lines[i]) == key_indent
                  and lines[i].lstrip().startswith("revisions:")), None)
    if found is None:
        raise ConfigError([Problem(f"models[{model}].revisions", "is not in this stack file (the stack it extends "
                                   "lists them?): promote the stack that lists them", None, "models[].revisions")])
    return item, item_end, key_indent, found, images.block_end(lines, found, key_indent)


def set_weights(text: str, model: str, weights: tuple[int, int]) -> str:
    """`text` with the model's two revisions' `weight:` values set to `weights`, in their order."""
    lines = text.splitlines(keepends=True)
    _, _, _, start, end = _model_block(lines, model)
    spots = []  # (line, match) of each weight outside comments, in the file's order
    for i in range(start, end):
        code = _COMMENT.sub("", lines[i].rstrip("\n"))
        spots += [(i, match) for match in _WEIGHT.finditer(code)]
    if len(spots) != 2:
        raise ConfigError([Problem(f"models[{model}].revisions", "the stack file's layout defeated the edit (one "
                                   "`weight: <n>` per revision expected); nothing was written", len(spots),
                                   "set the weights by hand")])
    for (i, match), weight in reversed(list(zip(spots, weights, strict=True))):
        line = lines[i]
        lines[i] = line[:match.start(2)] + str(weight) + line[match.end(2):]
    return "".join(lines)


def _dumped(key: str, value: Any, indent: int) -> list[str]:
    """`key: value` as block YAML at `indent`."""
    text = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, width=1000)
    return [" " * indent + line + "\n" for line in text.splitlines()]


def retire_first(text: str, model: str, fields: dict[str, Any]) -> str:
    """`text` with the model's `revisions` block (and the comment lines right above it) removed and each of `fields`
    (stack-file keys) written as the model's own: in place of the model's line for that key when it has one, else
    where `revisions` was."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    item, item_end, key_indent, start, end = _model_block(lines, model)
    # The comment lines right above `revisions:` speak of it, and go with it.
    while start - 1 > item and lines[start - 1].lstrip().startswith("#") and images.indent(lines[start - 1]) \
            == key_indent:
        start -= 1
    replaced: dict[int, tuple[int, list[str]]] = {start: (end, [])}
    for key, value in fields.items():
        own = next((i for i in range(item + 1, item_end) if images.indent(lines[i]) == key_indent
                    and re.match(rf"{re.escape(key)}:(\s|$)", lines[i].lstrip())), None)
        if own is None:
            replaced[start][1].extend(_dumped(key, value, key_indent))
        else:
            replaced[own] = (images.block_end(lines, own, key_indent), _dumped(key, value, key_indent))
    for begin in sorted(replaced, reverse=True):
        stop, new = replaced[begin]
        lines[begin:stop] = new
    return "".join(lines)


def _expected(before: str, model: str, change: Any) -> Any:
    """The parsed stack file `before`, its model's own entry changed by `change(entry)`."""
    document = copy.deepcopy(stack_files.parse_yaml(before))
    entry = next(m for m in document["config"][f"{stack_files.PROJECT}:models"] if m.get("name") == model)
    change(entry)
    return document


def _checked(path: Path, after: str, expected: Any, what: str) -> ServingStackArgs:
    """The stack `after` would be, once its parse is `expected` and it validates as load_stack_file validates."""
    if stack_files.parse_yaml(after) != expected:
        raise ConfigError([Problem(what, "the stack file's layout defeated the edit; nothing was written", None,
                                   "edit it by hand")])
    own = stack_files.split_config(path.name.removeprefix("Pulumi.").removesuffix(".yaml"), path,
                                   stack_files.parse_yaml(after)["config"])
    try:
        return environment.validate(stack_files.resolve(own, path.resolve().parent))
    except ConfigError as error:
        raise ConfigError([dataclasses.replace(p, message=f"after the edit (nothing was written): {p.message}")
                           for p in error.problems]) from None


# --- the command -------------------------------------------------------------------------------------------

def parser() -> CommandLineParser:
    parser = CommandLineParser(prog="python -m stacks promote",
                               description="Write the next step of a model's second revision into the stack file "
                                           "from its gate's report: the next weight, or weight 0 on a failed gate.")
    parser.add_argument("stack", help="a stack name or a path to its Pulumi.<stack>.yaml")
    parser.add_argument("model", help="the model whose second revision the report checked")
    parser.add_argument("--report", required=True, type=Path,
                        help="the gate's JSON report: the verification Job's last log line")
    parser.add_argument("--eval-report", type=Path,
                        help="the eval Job's JSON report (its last log line), for a model with models[].eval")
    parser.add_argument("--steps", type=ladder, default=LADDER, metavar="N,N,...,100",
                        help=f"the second revision's weights, step by step (default {','.join(map(str, LADDER))})")
    return parser


def _own_entry(text: str, model: str) -> dict[str, Any]:
    document = stack_files.parse_yaml(text) or {}
    entries = (document.get("config") or {}).get(f"{stack_files.PROJECT}:models") or []
    entry = next((m for m in entries if isinstance(m, dict) and m.get("name") == model), None)
    if entry is None or not entry.get("revisions"):
        raise ConfigError([Problem(f"models[{model}].revisions", "are not in this stack file's own list (the stack "
                                   "it extends lists them?): promote the stack that lists them", None,
                                   "the stack file that sets models[].revisions")])
    return entry


def _checked_report(report: Report, model: ModelArgs, revision: str, option: str, path: Path,
                    expected: str) -> None:
    """The report is of `model`'s `revision`, and of what the stack file deploys now (`expected`, its fingerprint):
    a report of an older step, or from before the `up` of this file, is refused."""
    if (report.model, report.revision) != (model.name, revision):
        raise ConfigError([Problem(option, f"checked model {report.model!r} revision {report.revision!r}, "
                                   f"not {model.name}'s revision {revision!r}", str(path),
                                   f"a report of the {report.kind} of {model.name} revision {revision}")])
    if report.deployed != expected:
        raise ConfigError([Problem(option, f"is the {report.kind} of another deploy (deployed "
                                   f"{report.deployed or 'not said'}) than this stack file's ({expected}): an older "
                                   "step's, or from before this file's `pulumi up`", str(path),
                                   "the report of the up of this very file")])


def _fingerprints(config: ServingStackArgs, model: ModelArgs) -> tuple[str, str, str | None]:
    """What the first revision's gate, the second's and the eval vouch for, as the stack file deploys them."""
    expanded = revisions.expanded(config)
    first = next(m for m in expanded.models if m.name == model.name)
    second = next(m for m in expanded.models if revisions.revision_model_of(m) == model.name)
    plan = next((p for p in evaluation.plans(expanded) if p.owner.name == model.name), None)
    return (model_parts.gate_fingerprint(expanded, first), model_parts.gate_fingerprint(expanded, second),
            model_parts.eval_fingerprint(expanded, plan) if plan is not None else None)


def _write_weights(path: Path, text: str, model: str, weights: tuple[int, int], summary: str, out: TextIO) -> int:
    after = set_weights(text, model, weights)
    expected = _expected(text, model, lambda entry: [r.update(weight=w)
                                                     for r, w in zip(entry["revisions"], weights, strict=True)])
    _checked(path, after, expected, f"models[{model}].revisions")
    path.write_text(after, encoding="utf-8")
    out.write(f"{summary}; wrote {path}\n")
    return 0


def main(argv: list[str], stack_path: Any, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    args = parser().use_streams(out, stderr or sys.stderr).parse_args(argv)
    path: Path = stack_path(args.stack)
    _, config = environment.load_stack_file(path)
    model = next((m for m in config.models if m.name == args.model), None)
    if model is None:
        raise ConfigError([Problem("model", "the stack serves no such model", args.model,
                                   ", ".join(m.name for m in config.models))])
    if len(model.revisions) != 2:
        raise ConfigError([Problem(f"models[{model.name}].revisions", "there is no second revision to promote",
                                   len(model.revisions), "two revisions (docs/operations.md, revisions)")])
    first, second = model.revisions
    text = path.read_text(encoding="utf-8")
    raw = _own_entry(text, model.name)["revisions"]
    report = read_report(args.report)
    first_gate, second_gate, eval_gate = _fingerprints(config, model)
    if revisions.same_runs(model):
        # The retirement's middle steps: the first revision runs what the second ran; its own gate is the evidence.
        _checked_report(report, model, first.name, "--report", args.report, first_gate)
        if not report.passed:
            why = f"its gate failed{': ' + report.reason if report.reason else ''}"
            if first.weight == 0:
                out.write(f"{model.name}: {first.name} runs what {second.name} runs, but {why}; it takes no request "
                          f"and {second.name} keeps them all: nothing to do (fix the first revision's pods, then "
                          "`pulumi up` again)\n")
                return 1
            return _write_weights(path, text, model.name, (0, 100), f"{model.name}: {first.name} {first.weight} -> "
                                  f"0 % ({second.name} 100 %): {why}; rolled back", out)
        if first.weight < 100:
            # Back up the same ladder, so KEDA scales the first revision's replicas with its share (it sat at its
            # floor while it took nothing) instead of meeting every request at once.
            step = next(s for s in (*args.steps, 100) if s > first.weight)
            then = f"promote again to retire {second.name}" if step == 100 else "promote again"
            return _write_weights(path, text, model.name, (step, 100 - step), f"{model.name}: {first.name} "
                                  f"{first.weight} -> {step} % ({second.name} {100 - step} %): it runs what "
                                  f"{second.name} runs and its gate passed; after the up and its next passing gate, "
                                  f"{then}", out)
        return _retire(path, text, config, model, raw[0], out)
    _checked_report(report, model, second.name, "--report", args.report, second_gate)
    evaluated = None
    if args.eval_report is not None:
        if eval_gate is None:
            raise ConfigError([Problem("--eval-report", f"{model.name} has no eval of its second revision "
                                       "(models[].eval)", str(args.eval_report), "no --eval-report")])
        evaluated = read_report(args.eval_report, "eval", "--eval-report")
        _checked_report(evaluated, model, second.name, "--eval-report", args.eval_report, eval_gate)
    failed = [r for r in (report, evaluated) if r is not None and not r.passed]
    name = f"{model.name}: {second.name}"
    if failed:
        why = "; ".join(f"the {r.kind} failed{': ' + r.reason if r.reason else ''}" for r in failed)
        if second.weight == 0:
            out.write(f"{name} is at weight 0 already ({why}); nothing to do\n")
            return 1
        return _write_weights(path, text, model.name, (100, 0), f"{name} {second.weight} -> 0 % ({first.name} "
                              f"100 %): {why}; rolled back", out)
    if eval_gate is not None and evaluated is None:
        raise ConfigError([Problem("--eval-report", f"{model.name} has an eval: a step needs its passing report as "
                                   "well as the gate's", None, "the eval Job's last log line, saved to a file")])
    if second.weight < 100:
        step = next(s for s in (*args.steps, 100) if s > second.weight)
        then = (f"promote again to move {first.name} onto what {second.name} runs" if step == 100
                else "promote again")
        return _write_weights(path, text, model.name, (100 - step, step), f"{name} {second.weight} -> {step} % "
                              f"({first.name} {100 - step} %): the gate passed; after the up and its next passing "
                              f"gate, {then}", out)
    return _converge(path, text, model, raw, out)


def converge_first(text: str, model: str, fields: dict[str, Any]) -> str:
    """`text` with the first revision's own keys (`REVISION_KEYS`) replaced by `fields`: on its one line for a flow
    mapping (`- {name: stable, weight: 0}`, its comment kept), else as the block item's lines after its name."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    _, _, _, start, end = _model_block(lines, model)
    dashes = [i for i in range(start + 1, end) if lines[i].lstrip().startswith("- ")]
    # The revisions' own items, not a list nested in one (extraArgs).
    items = [i for i in dashes if images.indent(lines[i]) == images.indent(lines[dashes[0]])] if dashes else []
    if len(items) != 2:
        raise ConfigError([Problem(f"models[{model}].revisions", "the stack file's layout defeated the edit (two "
                                   "block items expected); nothing was written", len(items), "edit it by hand")])
    head = lines[items[0]]
    item_indent = images.indent(head) + 2
    flow = re.match(r"^(\s*- )(\{.*\})(\s*(#.*)?)$", head.rstrip("\n"))
    if flow:
        entry = {k: v for k, v in yaml.safe_load(flow[2]).items() if k not in REVISION_KEYS}
        dumped = yaml.safe_dump({**entry, **fields}, default_flow_style=True, sort_keys=False, width=1000).strip()
        lines[items[0]] = f"{flow[1]}{dumped}{flow[3]}\n"
    elif re.match(r"^\s*- name:", head):
        kept = [head]
        i = items[0] + 1
        while i < items[1]:
            own_key = images.indent(lines[i]) == item_indent and any(
                re.match(rf"{k}:(\s|$)", lines[i].lstrip()) for k in REVISION_KEYS)
            if own_key:
                i = images.block_end(lines, i, item_indent)
                continue
            kept.append(lines[i])
            i += 1
        added = [line for key, value in fields.items() for line in _dumped(key, value, item_indent)]
        lines[items[0]:items[1]] = [head, *added, *kept[1:]]
    else:
        raise ConfigError([Problem(f"models[{model}].revisions", "the stack file's layout defeated the edit (the "
                                   "first revision's item starts with its name, or is one flow mapping); nothing was "
                                   "written", None, "edit it by hand")])
    return "".join(lines)


def _converge(path: Path, text: str, model: ModelArgs, raw: list[dict[str, Any]], out: TextIO) -> int:
    """The second revision at 100 % with a passing gate: the first revision's keys become the second's, so its pods
    roll onto it while they take no request (weight 0); the next steps move the requests back and retire the second."""
    first, second = model.revisions
    fields = revision_fields(raw[1])
    after = converge_first(text, model.name, fields)

    def change(entry: dict[str, Any]) -> None:
        own = entry["revisions"][0]
        for key in REVISION_KEYS:
            own.pop(key, None)
        own.update(fields)

    _checked(path, after, _expected(text, model.name, change), f"models[{model.name}].revisions")
    path.write_text(after, encoding="utf-8")
    out.write(f"{model.name}: {first.name} now runs what {second.name} runs ({', '.join(fields)}), at weight 0 "
              f"while its pods roll; after the up and its passing gate, promote again with {first.name}'s report to "
              f"move the requests back to it; wrote {path}\n")
    return 0


def _retire(path: Path, text: str, config: ServingStackArgs, model: ModelArgs, raw: dict[str, Any],
            out: TextIO) -> int:
    """The first revision, which runs what the second ran and takes every request, becomes the model itself: its keys
    the model's own, `revisions` gone. Its pods do not change (the promoted model is checked to run what the first
    revision runs), and the second revision's objects, which take no request, are deleted by the next up."""
    fields = revision_fields(raw)
    own = stack_files.parse_yaml(text)["config"]
    if f"{stack_files.PROJECT}:extends" in own and "image" in fields:
        # The extended stack's image keys merge under the file's (stacks/config/files.py deep_merge): a revision's
        # image is whole, so each key it leaves out is nulled, which restores that key's default.
        base_image = _resolved_entry(path, model.name).get("image") or {}
        fields["image"] = {**{key: None for key in base_image if key not in fields["image"]}, **fields["image"]}
    after = retire_first(text, model.name, fields)

    def change(entry: dict[str, Any]) -> None:
        entry.pop("revisions")
        entry.update(fields)

    promoted = _checked(path, after, _expected(text, model.name, change), f"models[{model.name}]")
    ran = next(m for m in revisions.expanded(config).models if m.name == model.name)
    now = next(m for m in promoted.models if m.name == model.name)
    differ = [f for f in fields_of(ModelArgs) if f not in ("name", "revisions", "allow_workload_replacement")
              and getattr(ran, f) != getattr(now, f)]
    if differ:
        raise ConfigError([Problem(f"models[{model.name}]", "the promoted model would not run what the revision ran "
                                   "(nothing was written)", differ, "set these keys by hand")])
    path.write_text(after, encoding="utf-8")
    first, second = (r.name for r in model.revisions)
    out.write(f"{model.name}: what {second} ran is the model's own now ({', '.join(fields) or 'no field of its own'}),"
              f" on {first}'s pods unchanged; models[{model.name}].revisions removed, and {second}'s objects go with "
              f"the next up; wrote {path}\n")
    return 0


def revision_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys a revision's entry sets for itself (as the stack file holds it), which become the model's own."""
    return {key: raw[key] for key in REVISION_KEYS if raw.get(key) is not None}


def _resolved_entry(path: Path, model: str) -> dict[str, Any]:
    """The model's entry after `extends` is merged, as the stack file's keys spell it."""
    resolved = stack_files.resolve(stack_files.read_stack_file(path), path.resolve().parent)
    return next(m for m in resolved.values.get("models") or [] if m.get("name") == model)
