"""Preflight: read-only checks of the real account, cluster and Hub before `pulumi up`.

`intent` says what the program will ask for, `catalog` lists the checks (AWS in aws_checks, the
cluster in kube_checks, the Hub in hub), `result` prints them; stacks/cli/preflight.py is the command.
"""

from stacks.preflight.catalog import CHECKS, Check, aws_actions, run
from stacks.preflight.context import Context, KubeReader
from stacks.preflight.intent import Intent, intent
from stacks.preflight.result import Finding, Outcome

__all__ = ["CHECKS", "Check", "Context", "Finding", "Intent", "KubeReader", "Outcome", "aws_actions", "intent",
           "run"]
