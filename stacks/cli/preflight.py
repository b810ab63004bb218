"""`python -m stacks preflight <stack>`: read-only checks of the real account and cluster before an up.

Exit 0 when nothing failed, 1 when a check failed, 2 when it cannot start (bad stack, no credentials).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from stacks import environment
from stacks.config.problems import CommandLineParser

DEFAULT_HUB = "https://huggingface.co"


def main(argv: list[str], stack_path: Callable[[str], Path]) -> int:
    """`stack_path` resolves the stack argument as every command does (stacks/cli/__init__.py)."""
    from stacks.preflight import catalog, result, session
    from stacks.preflight.context import Context
    from stacks.preflight.intent import intent

    parser = CommandLineParser(prog="python -m stacks preflight", description=(
        "Read-only checks of the AWS account, the cluster and the Hugging Face Hub that find, before "
        "`pulumi up`, what the offline render cannot know. Needs AWS credentials; HF_TOKEN for gated models."))
    parser.add_argument("stack", help="stack name (dev, prod, staging) or path to a Pulumi.<stack>.yaml")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    parser.add_argument("--summary", type=Path, metavar="FILE",
                        help="also append the report as a markdown table to FILE (e.g. $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--region", help="AWS region (default: the stack's aws:region)")
    parser.add_argument("--hub-url", default=os.environ.get("HF_ENDPOINT", DEFAULT_HUB),
                        help=f"Hugging Face Hub base URL (default: $HF_ENDPOINT or {DEFAULT_HUB})")
    args = parser.parse_args(argv)
    path = stack_path(args.stack)
    resolved, config = environment.load_stack_file(path)
    region = args.region or resolved.other.get("aws:region") or os.environ.get("AWS_REGION")
    if not region:
        sys.stderr.write(f"preflight {resolved.stack}: no AWS region: set aws:region in the stack file, pass "
                         "--region or export AWS_REGION; nothing was checked\n")
        return 2
    try:
        clients = session.aws_clients(region)
    except session.NoCredentials as error:
        sys.stderr.write(f"preflight {resolved.stack}: {error}\n")
        return 2
    ctx = Context(
        intent=intent(resolved.stack, region, config),
        eks=clients.eks, ec2=clients.ec2, quotas=clients.quotas, s3=clients.s3, ssm=clients.ssm, iam=clients.iam,
        account=clients.account,
        hub_url=args.hub_url, hub_token=os.environ.get("HF_TOKEN") or None,
        now=datetime.now(UTC), kube_factory=session.kube_reader(region),
    )
    findings = catalog.run(ctx)
    if args.json:
        sys.stdout.write(result.to_json(resolved.stack, findings))
    else:
        sys.stdout.write(f"preflight {resolved.stack} as {clients.identity} in {region}\n")
        sys.stdout.write(result.table(resolved.stack, findings))
    if args.summary:
        with args.summary.open("a") as out:
            out.write(result.markdown(resolved.stack, findings))
    return result.exit_code(findings)
