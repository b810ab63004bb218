"""`python -m stacks promote <stack> <model> --report <file>`: one step of a second revision's rollout
(`models[].revisions`, llm_serving/stack/revisions.py), written into the stack file from its gate's report, so that
each step is a pull request whose offline diff (`make diff`) shows what the next `pulumi up` changes (issue #41).

The report is the gate's JSON: `python -m stacks verify --json` output, or the verification Job's last log line
(`kubectl logs job/<name> | tail -1`, `{"verification": {...}}`); a file holding the whole log is read from its last
line. It names the model (`model`), the revision it checked (`revision`, the revision's name) and its verdict
(`passed`); one that names another model or revision than the stack file's second one is refused.

- The gate passed: the second revision's weight goes to the next step of the ladder (`LADDER`, or `--steps`), the
  first revision's to the rest of 100. At 100 the next passing step retires the first revision: the second
  revision's fields become the model's own and `revisions` goes (docs/operations.md, "Promoting the second
  revision": the weights at 0/100 in one `up`, then the fields in the next, since two entries that run the same thing
  are refused). The promoted model is checked to run what the second revision ran (`revisions.expanded`): the same
  weights revision, tokenizer, image, quantization, KV dtype and engine flags.
- The gate failed: the second revision's weight goes to 0 (the first revision takes 100), and the revision stays,
  reachable through its header, for a look at why.

The stack file is edited as text, as `pin-images` does (stacks/images.py): only the weight values change, or the
`revisions` block goes and the model's keys it names are written; every other line, comments included, is kept.
After the edit the file is parsed again and must differ from before in exactly those values, and the stack must
validate as `load_stack_file` validates it, or nothing is written.

Exit codes: 0 the file changed, 1 nothing to do (a failed gate on a revision already at weight 0), 2 a bad report,
stack or step (one line each).
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
from llm_serving.stack import revisions
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


def read_report(path: Path) -> Report:
    """The gate's report in `path`: the whole file as JSON, else its last non-empty line (a saved Job log); the
    Job's `{"verification": ...}` envelope is opened."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _bad(path, f"cannot be read ({getattr(error, 'strerror', None) or error})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        try:
            document = json.loads(last)
        except json.JSONDecodeError:
            raise _bad(path, "is not JSON, nor does its last line hold the Job's JSON report") from None
    if isinstance(document, dict) and set(document) == {"verification"}:
        document = document["verification"]
    if not isinstance(document, dict):
        raise _bad(path, "holds no JSON object")
    missing = [key for key in ("model", "revision", "passed") if key not in document]
    if missing:
        raise _bad(path, f"has no {', '.join(missing)} (a report of the per-revision gate names the model, the "
                         "revision it checked and whether it passed)")
    model, revision, passed = document["model"], document["revision"], document["passed"]
    if not isinstance(model, str) or not isinstance(revision, str) or not isinstance(passed, bool):
        raise _bad(path, "needs model and revision as strings and passed as true or false, got "
                         f"{json.dumps({'model': model, 'revision': revision, 'passed': passed})}")
    failures = document.get("failures")
    reason = str(failures[0]) if isinstance(failures, list) and failures else ""
    return Report(model, revision, passed, reason)


def _bad(path: Path, message: str) -> ConfigError:
    return ConfigError([Problem("--report", message, str(path), "the gate's JSON report")])


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
                        help="the gate's JSON report: `verify --json` output, or the Job's last log line")
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
    report = read_report(args.report)
    if (report.model, report.revision) != (model.name, second.name):
        raise ConfigError([Problem("--report", f"checked model {report.model!r} revision {report.revision!r}, "
                                   f"not {model.name}'s second revision {second.name!r}", str(args.report),
                                   f"a report of the gate of {model.name} revision {second.name}")])
    text = path.read_text(encoding="utf-8")
    raw = _own_entry(text, model.name)["revisions"]
    name = f"{model.name}: {second.name}"
    if not report.passed:
        if second.weight == 0:
            out.write(f"{name} is at weight 0 already (the gate failed: {report.reason or 'see its report'}); "
                      "nothing to do\n")
            return 1
        weights = (100, 0)
        summary = (f"{name} {second.weight} -> 0 % ({first.name} 100 %): the gate failed"
                   f"{': ' + report.reason if report.reason else ''}; rolled back")
    elif second.weight < 100:
        step = next(s for s in (*args.steps, 100) if s > second.weight)
        weights = (100 - step, step)
        then = (f"promote again to make {second.name} the model's own and retire {first.name}" if step == 100
                else "promote again")
        summary = (f"{name} {second.weight} -> {step} % ({first.name} {100 - step} %): the gate passed; after the "
                   f"up and its next passing gate, {then}")
    else:
        return _retire(path, text, config, model, raw[1], out)
    after = set_weights(text, model.name, weights)
    expected = _expected(text, model.name, lambda entry: [r.update(weight=w)
                                                          for r, w in zip(entry["revisions"], weights, strict=True)])
    _checked(path, after, expected, f"models[{model.name}].revisions")
    path.write_text(after, encoding="utf-8")
    out.write(f"{summary}; wrote {path}\n")
    return 0


def _retire(path: Path, text: str, config: ServingStackArgs, model: ModelArgs, raw: dict[str, Any],
            out: TextIO) -> int:
    """The second revision, at 100 % with a passing gate, becomes the model itself."""
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
    ran = next(m for m in revisions.expanded(config).models if revisions.revision_model_of(m) == model.name)
    now = next(m for m in promoted.models if m.name == model.name)
    differ = [f for f in fields_of(ModelArgs) if f not in ("name", "revisions", "allow_workload_replacement")
              and getattr(ran, f) != getattr(now, f)]
    if differ:
        raise ConfigError([Problem(f"models[{model.name}]", "the promoted model would not run what the revision ran "
                                   "(nothing was written)", differ, "set these keys by hand")])
    path.write_text(after, encoding="utf-8")
    second = model.revisions[1].name
    out.write(f"{model.name}: {second} is the model's own now ({', '.join(fields) or 'no field of its own'}); "
              f"{model.revisions[0].name} and models[{model.name}].revisions removed; wrote {path}\n")
    return 0


def revision_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys a revision's entry sets for itself (as the stack file holds it), which become the model's own."""
    return {key: raw[key] for key in REVISION_KEYS if raw.get(key) is not None}


def _resolved_entry(path: Path, model: str) -> dict[str, Any]:
    """The model's entry after `extends` is merged, as the stack file's keys spell it."""
    resolved = stack_files.resolve(stack_files.read_stack_file(path), path.resolve().parent)
    return next(m for m in resolved.values.get("models") or [] if m.get("name") == model)
