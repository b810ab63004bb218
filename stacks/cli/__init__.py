"""Command line of the environment layer: `python -m stacks render | plan | clone | diff | preflight | verify |
pin-images | promote | check-github`.

Every command exits 2 on invalid input with one line per problem, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from types import ModuleType

from stacks import clone, environment
from stacks.config import ServingStackArgs
from stacks.config import files as stack_files
from stacks.config.problems import CommandLineParser, ConfigError, Problem


def _kubernetes_minor(value: str) -> str:
    if not re.fullmatch(r"1\.\d{1,2}", value):
        raise argparse.ArgumentTypeError(f"expected a Kubernetes minor such as 1.34, got {value!r}")
    return value


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


def _directory(value: str) -> Path:
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a directory path, got ''")
    return Path(value)


def render_parser() -> CommandLineParser:
    parser = CommandLineParser(prog="python -m stacks render", description="Offline render of a stack.")
    parser.add_argument("stacks", nargs="*", metavar="stack",
                        help="stack names or paths to Pulumi.<stack>.yaml files (default: every stack file)")
    parser.add_argument("--out", type=_directory, help="output directory of one stack (default build/<stack>)")
    parser.add_argument("--quiet", action="store_true", help="print only the output paths")
    parser.add_argument("--cluster-version", type=_kubernetes_minor,
                        help="Kubernetes minor the placeholder cluster runs (default: the "
                        "stack's cluster.kubernetesVersion); another one is rejected as a real preview would")
    return parser


def _render(argv: list[str]) -> int:
    from stacks.offline import render

    args = render_parser().parse_args(argv)
    targets = args.stacks or list(stack_files.stack_names())
    if args.out is not None and len(targets) != 1:
        raise ConfigError([Problem("--out", f"one output directory for {len(targets)} stacks", str(args.out),
                                   "one stack with --out, or no --out (each stack writes build/<stack>/)")])
    # Every stack's config first: nothing is created while any of them is invalid.
    loaded = [(path, environment.load_stack_file(path)[1]) for path in map(stack_files.find_stack_file, targets)]
    for path, config in loaded:
        _render_one(render, path, config, args)
    return 0


def _render_one(render: ModuleType, path: Path, config: ServingStackArgs, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    out = _output_dir(args.out or stack_files.PROJECT_DIR / "build" / stack)
    result = render.render_stack(path, cluster_version=args.cluster_version)
    manifests, resources = render.write(result, out)
    if not args.quiet:
        from stacks.cli.plan import stack_cost_summary

        region = stack_files.read_stack_file(path).other.get("aws:region")
        sys.stdout.write(render.summary(result) + stack_cost_summary(config, region if isinstance(region, str)
                                                                     else None))
        sys.stdout.write(f"\nrendered in {time.perf_counter() - started:.2f} s\n")
    sys.stdout.write(f"wrote {manifests}\nwrote {resources}\n")


def _plan(argv: list[str]) -> int:
    from stacks.cli import plan as plan_cli

    return plan_cli.main(argv)


def clone_parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="python -m stacks clone",
        description="Write Pulumi.<to>.yaml that extends <from>, with overrides, and validate it.",
    )
    parser.add_argument("base", help="stack to clone, e.g. prod")
    parser.add_argument("new", help="name of the new stack, e.g. staging-eu")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override, e.g. gpuNodeGroup.scaling.maxNodes=2 or models[llama-70b].replicas=1 (value parsed as "
        "YAML); repeatable. A clone of prod must set environment",
    )
    parser.add_argument(
        "--create-cluster", metavar="ZONE,ZONE[,ZONE]",
        help="the clone creates its own VPC and EKS cluster over these zones (cluster.mode create), e.g. for "
             "a new account or region; needs --set 'cluster.create.publicAccessCidrs=[<your CIDR>]' and, for "
             "another region, --set aws:region=...",
    )
    parser.add_argument(
        "--keep", action="append", default=[], metavar="KEY.PATH",
        help="in another aws:region than the base's, keep this value of the base's region on purpose (it holds "
             "there too), e.g. cluster.name; repeatable (stacks/config/regions.py lists the region-bound keys)",
    )
    return parser


def _clone(argv: list[str]) -> int:
    args = clone_parser().parse_args(argv)
    zones = None if args.create_cluster is None else [z.strip() for z in args.create_cluster.split(",") if z.strip()]
    cloned = clone.clone(args.base, args.new, args.set, stack_files.PROJECT_DIR, zones, keep=args.keep)
    for warning in cloned.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    sys.stdout.write(f"wrote {cloned.path}\n")
    for key in cloned.secrets:
        sys.stdout.write(
            f"set its own secret before a preview: pulumi config set --secret {stack_files.PROJECT}:{key} <value> "
            f"-s {args.new}\n"
        )
    return 0


def _diff(argv: list[str]) -> int:
    from stacks.offline import diff

    return diff.main(argv)


def _preflight(argv: list[str]) -> int:
    from stacks.cli import preflight

    return preflight.main(argv, stack_files.find_stack_file)


def _verify(argv: list[str]) -> int:
    from stacks.cli import verify

    return verify.main(argv, stack_path=stack_files.find_stack_file)


def _pin_images(argv: list[str]) -> int:
    from stacks import images

    return images.main(argv, stack_files.find_stack_file)


def _promote(argv: list[str]) -> int:
    from stacks.cli import promote

    return promote.main(argv, stack_files.find_stack_file)


def _check_github(argv: list[str]) -> int:
    from stacks import github_settings

    return github_settings.main(argv)


COMMANDS = {"render": _render, "plan": _plan, "clone": _clone, "diff": _diff, "preflight": _preflight,
            "verify": _verify, "pin-images": _pin_images, "promote": _promote,
            "check-github": _check_github}


HELP = """usage: .venv/bin/python -m stacks <command> [options]   (or `source .venv/bin/activate` first)

commands:
  render [<stack>...]
                   offline render into build/<stack>/ (manifests.yaml, resources.json), default every
                   stack file; no cloud, no CLI
  plan             size one vLLM replica: TP, KV cache, concurrency, startup budget, dynamics;
                   --stack <stack> plans a stack's model (options override its values), --list-models,
                   --list-gpus
  clone <from> <to> --set key.path=value [--create-cluster ZONE,ZONE,ZONE] [--keep key.path]
                   a new stack file that extends another, valid for the Pulumi CLI
  diff [<stack>...] what a change does to each stack's render (default: every stack file), as
                   `pulumi preview --diff` would mark it
  pin-images <stack> [--write]
                   resolve each model's vLLM image tag, and each image the stack's charts run, to its
                   digest through the registry's API and (--write) set models[].image.digest and
                   chartImageDigests in the stack file; prod and staging need them
  promote <stack> <model> --report FILE [--eval-report FILE] [--steps 10,25,50,100]
                   the next step of a model's second revision from its gates' JSON reports: the next
                   weight; after 100 the first revision converged onto it, the requests back up the
                   ladder, the revisions retired; or weight 0 on a failed gate or eval
  check-github <owner>/<repo>
                   the repository's environments and main's protection against the set-up checklist
                   (docs/operations.md); the token from $GITHUB_TOKEN
  preflight <stack>
                   read-only checks of the real account, cluster and Hub before an up (needs AWS credentials)
  verify <stack> --url URL
                   check a deployed model (streaming, auth, fields) and its SLO at the planned load;
                   the API key from --api-key-file or $LLM_SERVING_API_KEY, never an argument

A stack is a name (prod) or a path to a stack file. `<command> --help` describes each command's
options. Exit codes: 0 success, 1 diff found changes, a plan cannot be deployed as asked, a
preflight or verify check failed, or promote had nothing to do, 2 invalid input (one line per
problem) or no credentials, 130 interrupted (Ctrl-C; verify prints the results so far).
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
