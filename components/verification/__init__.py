"""The deploy gate: the probe (smoke checks and an SLO load test, standard library only), its
manifests, and per model the VerificationJob that Pulumi awaits after the model is Ready and routed."""

from . import probe
from .job import AWAIT_SLACK_SECONDS, VerificationJob, VerificationJobArgs, await_seconds
from .objects import PROBE_SOURCE, SELECTOR, network_policy
from .probe import Check, LoadPlan, Settings, Target

__all__ = [
    "AWAIT_SLACK_SECONDS",
    "Check",
    "LoadPlan",
    "PROBE_SOURCE",
    "SELECTOR",
    "Settings",
    "Target",
    "VerificationJob",
    "VerificationJobArgs",
    "await_seconds",
    "network_policy",
    "probe",
]
