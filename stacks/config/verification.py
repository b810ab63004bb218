"""Configuration of the deploy gate: after each model is Ready, a Job checks its API through the
edge and its Service and runs a short load test at the planned concurrency. Feeds
components/verification. Shapes and ranges only; defaults that depend on the stack are in
stacks/checks/verification.py.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from stacks.config.base import ConfigModel, HttpsUrl


class VerificationMode(StrEnum):
    """What a failing check does to `pulumi up`."""

    GATE = "gate"  # the Job fails, so the up fails with the failing lines
    REPORT = "report"  # the Job succeeds and reports; the up goes on
    OFF = "off"  # no Job


class VerificationConfig(ConfigModel):
    """The post-deploy verification Job, one per model (docs/verification.md)."""

    mode: VerificationMode | None = Field(
        default=None,
        description="`gate` (a failing check fails `pulumi up`), `report` (results only) or `off`; unset: "
        "`gate` in prod and staging, `report` in dev.",
    )
    duration_seconds: int = Field(
        default=60, ge=10, le=3600,
        description="Load-test time after the ramp-up, in seconds (requests started in the ramp are warm-up).",
    )
    max_requests: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Stop the load test after this many requests; unset: no cap."
    )
    concurrency: int | None = Field(
        default=None, ge=1, le=4096,
        description="Concurrent requests of the load test; unset: the planned SLO-bound concurrency per replica "
        "times the minimum replicas.",
    )
    prompt_tokens: int = Field(default=1024, ge=16, le=1_000_000, description="Prompt length of each load request.")
    output_tokens: int = Field(default=256, ge=8, le=100_000, description="Output tokens of each load request.")
    edge_url: HttpsUrl | None = Field(
        default=None,
        description="The model's API through the edge, ending in `/v1`; unset: https://<route host><pathPrefix>/v1.",
    )
