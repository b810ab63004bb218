"""The deploy gate: the probe (smoke checks and an SLO load test, standard library only), its
manifests, and per model the VerificationJob that Pulumi awaits after the model is Ready and routed; the accuracy
gate's program (eval_gate.py, lm-evaluation-harness from the hashed lock eval-requirements.txt)."""

from . import eval_gate, probe
from .args import (
    VerificationArgs,
    VerificationMode,
)
from .eval_job import EvalJob, EvalJobArgs
from .evaluation import EVAL_SELECTOR, EvalFile, eval_network_policy, file_target, task_set_dir
from .evaluation import INSTALL_SECONDS as EVAL_INSTALL_SECONDS
from .job import AWAIT_SLACK_SECONDS, VerificationJob, VerificationJobArgs, await_seconds
from .objects import EVAL_REQUIREMENTS, EVAL_SOURCE, PROBE_SOURCE, SELECTOR, network_policy
from .probe import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_PASS,
    EXIT_USAGE,
    Alias,
    Check,
    Interrupted,
    Lines,
    LoadCount,
    LoadPlan,
    Progress,
    Settings,
    Target,
    UsageError,
    read_key,
    render_text,
    run,
)

__all__ = [
    "AWAIT_SLACK_SECONDS",
    "Alias",
    "Check",
    "EVAL_INSTALL_SECONDS",
    "EVAL_REQUIREMENTS",
    "EVAL_SELECTOR",
    "EVAL_SOURCE",
    "EvalFile",
    "EvalJob",
    "EvalJobArgs",
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_PASS",
    "EXIT_USAGE",
    "Interrupted",
    "Lines",
    "LoadCount",
    "LoadPlan",
    "PROBE_SOURCE",
    "Progress",
    "SELECTOR",
    "Settings",
    "Target",
    "UsageError",
    "VerificationArgs",
    "VerificationJob",
    "VerificationJobArgs",
    "VerificationMode",
    "await_seconds",
    "eval_gate",
    "eval_network_policy",
    "file_target",
    "network_policy",
    "probe",
    "read_key",
    "render_text",
    "run",
    "task_set_dir",
]
