"""The policy rules over offline renders: `python -m stacks.offline.policy_check [stack ...]`, no cloud and no CLI.

Exits 1 when a mandatory rule fails, 2 on an invalid stack file; advisory findings are printed only.
Unlike the pack it sees retainOnDelete and secretness, because the render records both.
"""

from __future__ import annotations

import sys
from typing import Any

from policies import rules, streams
from stacks import environment
from stacks.config import files as stack_files
from stacks.config.problems import CommandLineParser, ConfigError
from stacks.offline import render


def report(result: Any, environment: str) -> tuple[str, int]:
    """One line per rule, its messages below it; exit code 1 if any mandatory rule failed."""
    found = rules.violations(result, environment)
    lines = [f"stack {result.stack} ({environment}):"]
    failed = 0
    for rule in rules.RULES:
        messages = found[rule.name]
        lines.append(f"  {rule.name} [{rule.enforcement}]: " + (f"{len(messages)} violation(s)" if messages else "ok"))
        lines += [f"    - {message}" for message in messages]
        failed |= int(bool(messages) and rule.enforcement == "mandatory")
    # A stack-wide rule: the bound (a route) and its drains (pods, pickers, Envoy, the load balancer) live
    # on different resources.
    messages = streams.stream_drain_problems(result.resources)
    lines.append(f"  {streams.RULE_NAME} [mandatory]: " + (f"{len(messages)} violation(s)" if messages else "ok"))
    lines += [f"    - {message}" for message in messages]
    failed |= int(bool(messages))
    return "\n".join(lines) + "\n", failed


def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m stacks.offline.policy_check", description=__doc__.splitlines()[0])
    parser.add_argument("stacks", nargs="*", metavar="stack",
                        help="stack names or paths to stack files (default: every Pulumi.<stack>.yaml)")
    args = parser.parse_args(argv)
    status = 0
    for stack in args.stacks or stack_files.stack_names():
        try:
            path = stack_files.find_stack_file(stack)
            env_name = environment.load_stack_file(path)[1].environment.value
            text, failed = report(render.render_stack(path), env_name)
        except ConfigError as error:
            sys.stderr.write(f"{error}\n")
            return 2
        sys.stdout.write(text)
        status |= failed
    return status


if __name__ == "__main__":
    sys.exit(main())
