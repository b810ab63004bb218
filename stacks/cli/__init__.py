"""Command line of the environment layer: `python -m stacks render | plan | clone | diff | verify`.

Every command exits 2 on invalid input with one line per problem, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import time
from pathlib import Path

from stacks import clone, environment
from stacks.config import files as stack_files
from stacks.config.problems import ConfigError, Problem


def _stack_path(target: str) -> Path:
    """A stack name (`prod`) or a path to a stack file; an unknown name lists the stacks that exist."""
    path = Path(target)
    if path.suffix == ".yaml" or path.exists():
        return path
    path = stack_files.stack_file_path(target)
    if not path.is_file():
        known = stack_files.stack_names()
        close = difflib.get_close_matches(target, known, n=1)
        hint = f'did you mean "{close[0]}"? ' if close else ""
        raise ConfigError([Problem("stack", f"no stack file Pulumi.{target}.yaml; {hint}stacks here: "
                                   f"{', '.join(known)}", target, "one of the stacks, or a path to a stack file")])
    return path


def _output_dir(out: Path) -> Path:
    """Checked before rendering: a render that cannot be written should fail before it starts."""
    if out.exists() and not out.is_dir():
        raise ConfigError([Problem("--out", "is a file, not a directory", str(out), "a directory path")])
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError([Problem("--out", f"cannot create it ({error.strerror})", str(out),
                                   "a directory you can write to")]) from None
    if not os.access(out, os.W_OK):
        raise ConfigError([Problem("--out", "is not writable", str(out), "a directory you can write to")])
    return out


def _render(argv: list[str]) -> int:
    from stacks.offline import render

    parser = argparse.ArgumentParser(prog="python -m stacks render", description="Offline render of a stack.")
    parser.add_argument("stack", help="stack name (dev, prod, staging) or path to a Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=Path, help="output directory (default build/<stack>)")
    parser.add_argument("--quiet", action="store_true", help="print only the output paths")
    parser.add_argument("--cluster-version", help="Kubernetes minor the placeholder cluster runs (default: the "
                        "stack's cluster.kubernetesVersion); another one is rejected as a real preview would")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    path = _stack_path(args.stack)
    _, config = environment.load_stack_file(path)  # config problems first: nothing is created for an invalid stack
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    out = _output_dir(args.out or stack_files.PROJECT_DIR / "build" / stack)
    result = render.render_stack(path, cluster_version=args.cluster_version)
    manifests, resources = render.write(result, out)
    if not args.quiet:
        from stacks.cli.plan import stack_cost_summary

        sys.stdout.write(render.summary(result) + stack_cost_summary(config))
        sys.stdout.write(f"\nrendered in {time.perf_counter() - started:.2f} s\n")
    sys.stdout.write(f"wrote {manifests}\nwrote {resources}\n")
    return 0


def _plan(argv: list[str]) -> int:
    from stacks.cli import plan as plan_cli

    return plan_cli.main(argv)


def _clone(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stacks clone",
        description="Write Pulumi.<to>.yaml that extends <from>, with overrides, and validate it.",
    )
    parser.add_argument("base", help="stack to clone, e.g. prod")
    parser.add_argument("new", help="name of the new stack, e.g. staging-eu")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override, e.g. gpuNodeGroup.scaling.maxNodes=2 (value parsed as YAML); repeatable",
    )
    args = parser.parse_args(argv)
    path, secrets = clone.clone(args.base, args.new, args.set, stack_files.PROJECT_DIR)
    sys.stdout.write(f"wrote {path}\n")
    for key in secrets:
        sys.stdout.write(
            f"set its own secret before a preview: pulumi config set --secret {stack_files.PROJECT}:{key} <value> "
            f"-s {args.new}\n"
        )
    return 0


def _diff(argv: list[str]) -> int:
    from stacks.offline import diff

    return diff.main(argv)


def _verify(argv: list[str]) -> int:
    from stacks.cli import verify

    return verify.main(argv, stack_path=_stack_path)


COMMANDS = {"render": _render, "plan": _plan, "clone": _clone, "diff": _diff, "verify": _verify}


HELP = """usage: .venv/bin/python -m stacks <command> [options]   (or `source .venv/bin/activate` first)

commands:
  render <stack>   offline render into build/<stack>/ (manifests.yaml, resources.json); no cloud, no CLI
  plan             size one vLLM replica: TP, KV cache, concurrency, startup budget, dynamics
  clone <from> <to> --set key.path=value
                   a new stack file that extends another, valid for the Pulumi CLI
  diff <stack>     what a change does to a stack's render, as `pulumi preview --diff` would mark it
  verify <stack> --url URL
                   check a deployed model (streaming, auth, fields) and its SLO at the planned load;
                   the API key from --api-key-file or $LLM_SERVING_API_KEY, never an argument

`<command> --help` describes each command's options. Exit codes: 0 success, 1 diff found changes
or a verify check failed, 2 invalid input (one line per problem).
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--help"], ["-h"], ["help"]):
        sys.stdout.write(HELP)
        return 0
    if not argv or argv[0] not in COMMANDS:
        unknown = f"unknown command {argv[0]!r}\n" if argv else ""
        sys.stderr.write(unknown + HELP)
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except ConfigError as error:
        for problem in error.problems:
            sys.stderr.write(problem.line() + "\n")
        return 2
