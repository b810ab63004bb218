"""`python -m stacks verify <stack> --url URL`: the deploy gate's checks from a workstation.

The same probe the Job runs (llm_serving/verification/probe.py) against one address of a stack's
model, with the load test at the stack's planned concurrency and lengths unless overridden. The API
key comes from a file or an environment variable, never an argument (the process list shows those).
Exit 0 when every check passes, 1 when one fails (one line each), 2 on bad input, 130 on Ctrl-C, which
stops the load and prints the report of what completed (`interrupted: results so far`). `--revision NAME`
checks one revision of a model that runs two side by side: the header that reaches it is sent with every request,
and its own plan is the comparison.

Progress goes to stderr, a line as each check and phase starts and ends and the load test's count (on a
terminal one line rewritten in place), so stdout holds the report alone. With `--json` stdout is one
JSON object on every exit: the report with `exitCode` (and `interrupted`), or
`{"error": {"kind": ..., "problems": [...]}, "exitCode": ...}` (docs/verification.md). A closed stdout
(`| head -1`) is the entry point's: stacks/__main__.py exits 1 without a traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from llm_serving import verification
from llm_serving.edge import REVISION_HEADER
from llm_serving.stack import revisions
from llm_serving.stack import verification as stack_verification
from llm_serving.verification import Settings, Target
from stacks import environment
from stacks.cli.arguments import positive
from stacks.config.problems import CommandLineParser, ConfigError

DEFAULT_KEY_ENV = "LLM_SERVING_API_KEY"
JSON_FLAG = "--json"


def _parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="python -m stacks verify",
        allow_abbrev=False,
        description="Check a deployed model (models list, key enforced, streaming, completion, fields) and run a "
        "short load test at the planned concurrency, beside the plan's figures and the objectives.",
    )
    parser.add_argument("stack", help="stack name (dev, prod, staging) or path to a Pulumi.<stack>.yaml")
    parser.add_argument("--url", required=True, help="the model's OpenAI API, ending in /v1, e.g. "
                        "https://llm.example.com/v1 or http://localhost:8000/v1 (a port-forward)")
    parser.add_argument("--model", help="the model's name in the stack (required when it serves several)")
    parser.add_argument("--revision", help="one revision of the model (models[].revisions[].name): every request "
                        f"carries {REVISION_HEADER}: NAME, which the edge sends to that revision alone")
    parser.add_argument("--api-key-file", help="file holding the API key")
    parser.add_argument("--api-key-env", default=DEFAULT_KEY_ENV,
                        help=f"environment variable holding the API key (default {DEFAULT_KEY_ENV})")
    parser.add_argument("--no-auth-check", action="store_true",
                        help="skip the no-key and wrong-key requests (an address that another layer guards)")
    parser.add_argument("--concurrency", type=positive, help="concurrent requests (default: the planned "
                        "SLO-bound concurrency per replica x minimum replicas)")
    parser.add_argument("--duration", type=positive, help="seconds of load after the ramp (default "
                        "verification.durationSeconds)")
    parser.add_argument("--requests", type=positive, help="stop after this many requests")
    parser.add_argument("--prompt-tokens", type=positive, help="prompt length (default verification.promptTokens)")
    parser.add_argument("--output-tokens", type=positive, help="output length (default verification.outputTokens)")
    parser.add_argument("--no-load", action="store_true", help="smoke checks only")
    parser.add_argument(JSON_FLAG, action="store_true", help="print the report as JSON (what plan --calibration "
                        "reads); errors and Ctrl-C too print one JSON object")
    return parser


def settings_for(args: argparse.Namespace, config: object) -> tuple[Settings, str | None]:
    """The probe's settings for one address of the stack's model, and why nothing is planned (if so)."""
    models = {m.name: m for m in config.models}  # type: ignore[attr-defined]
    if args.model is None and len(models) > 1:
        raise verification.UsageError(f"--model: stack {args.stack} serves {', '.join(sorted(models))}; name one")
    name = args.model if args.model is not None else next(iter(models))
    if name not in models:
        raise verification.UsageError(f"--model {name!r}: not a model of stack {args.stack}; "
                               f"its models: {', '.join(sorted(models))}")
    model = models[name]
    headers: dict[str, str] = {}
    expanded = revisions.expanded(config)  # type: ignore[arg-type]
    if args.revision is not None:
        named = [r.name for r in model.revisions]
        if args.revision not in named:
            raise verification.UsageError(f"--revision {args.revision!r}: model {name} runs "
                                          + (f"the revisions {', '.join(named)}" if named else "no revisions"))
        # The revision as the stack runs it (its own image, flags and plan); its replicas answer to the model's name.
        config = expanded
        wanted = revisions.object_name(model, named.index(args.revision))
        model = next(m for m in config.models if m.name == wanted)
        headers = {REVISION_HEADER: args.revision}
    planned = stack_verification.planned_load(
        config, model, concurrency=args.concurrency, prompt_tokens=args.prompt_tokens,  # type: ignore[arg-type]
        output_tokens=args.output_tokens, duration_seconds=args.duration, max_requests=args.requests)
    adapters, aliases = stack_verification.served(model)
    settings = Settings(
        model=name,
        revision=args.revision,
        # The URL may be a port-forward to vLLM, which lists and answers the adapters but knows no alias (the
        # endpoint picker rewrites those): the aliases are carried, not asked (the deploy gate asks them at the edge).
        targets=(Target("url", args.url.rstrip("/"), check_auth=not args.no_auth_check, headers=headers),),
        adapters=adapters,
        aliases=aliases,
        load=None if args.no_load else planned.plan,
        request_timeout_seconds=stack_verification.request_timeout_seconds(config, planned.plan.output_tokens),  # type: ignore[arg-type]
        # No fingerprint: this checks whatever the URL serves, which the stack file cannot vouch for, so `promote`
        # (which takes only a report of the up of the file it edits) refuses it.
        deployed=None,
    )
    return settings, planned.note


def _error(kind: str, problems: list[str], code: int) -> dict[str, object]:
    """The JSON of an exit without a report: `kind` usage, config or interrupted, the lines stderr got."""
    document: dict[str, object] = {"error": {"kind": kind, "problems": problems}, "exitCode": code}
    if kind == "interrupted":
        document["interrupted"] = True
    return document


def _print_json(document: dict[str, object], out: TextIO) -> None:
    print(json.dumps(document, indent=2, sort_keys=True), file=out)


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None, *,
         stack_path: Callable[[str], Path] | None = None) -> int:
    """Run `verify`; `stack_path` turns a stack name into its file (the command line's own lookup)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    # Asked before parsing, so that argparse's own errors (before there is a parsed --json) are JSON too. argparse
    # takes `--json` as that flag wherever it stands (no option here takes a value starting with --).
    captured = io.StringIO() if JSON_FLAG in argv else None
    try:
        args = _parser().use_streams(out, captured if captured is not None else err).parse_args(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else verification.EXIT_USAGE
        if captured is not None:
            err.write(captured.getvalue())
            if code != 0:  # --help is text, JSON or not
                _print_json(_error("usage", captured.getvalue().splitlines(), code), out)
        return code
    try:
        settings, note, key = _prepared(args, stack_path)
    except ConfigError as error:
        return _refused("config", [problem.line() for problem in error.problems], args, out, err)
    except verification.UsageError as error:
        return _refused("usage", [f"verify: {error}"], args, out, err)
    except KeyboardInterrupt:  # loading the stack file (Pulumi's imports take a while): nothing ran to report
        err.write("\ninterrupted\n")
        if args.json:
            _print_json(_error("interrupted", ["interrupted before any check ran"], verification.EXIT_INTERRUPTED),
                        out)
        return verification.EXIT_INTERRUPTED
    try:
        # On a terminal the load test's count is one line rewritten in place; piped or logged, a line now and then.
        report = verification.run(settings, key, verification.Lines(err, live=err.isatty()))
        code = verification.EXIT_FAIL if report["failures"] else verification.EXIT_PASS
    except verification.Interrupted as stopped:
        report, code = stopped.report, verification.EXIT_INTERRUPTED
    except verification.UsageError as error:
        return _refused("usage", [f"verify: {error}"], args, out, err)
    except KeyboardInterrupt:  # between the checks' own handlers (setting up, assembling the report): no report
        err.write("\ninterrupted\n")
        if args.json:
            _print_json(_error("interrupted", ["interrupted before a report existed"], verification.EXIT_INTERRUPTED),
                        out)
        return verification.EXIT_INTERRUPTED
    report["stack"] = args.stack
    if note:
        report["note"] = note
    if args.json:
        _print_json({**report, "exitCode": code}, out)
    else:
        out.write(verification.render_text(report))
    return code


def _prepared(args: argparse.Namespace, stack_path: Callable[[str], Path] | None) -> tuple[Settings, str | None, str]:
    """The probe's settings, the note on its load and the API key, all checked before any request."""
    _, config = environment.load_stack_file(stack_path(args.stack) if stack_path else Path(args.stack))
    settings, note = settings_for(args, config)
    if not args.url.startswith(("http://", "https://")) or not args.url.rstrip("/").endswith("/v1"):
        # A base URL without /v1 answers 404 to every check, which would read as the API key not being enforced.
        raise verification.UsageError(f"--url {args.url!r}: expected http://... or https://... ending in /v1")
    key = verification.read_key(args.api_key_file, None if args.api_key_file is not None else args.api_key_env)
    return settings, note, key


def _refused(kind: str, lines: list[str], args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for line in lines:
        print(line, file=err)
    if args.json:
        _print_json(_error(kind, lines, verification.EXIT_USAGE), out)
    return verification.EXIT_USAGE
