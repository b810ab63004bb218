"""What a stack says about its deploy gate: after each model is Ready and routed, a Job checks its API through
the edge and its Service and runs a short load test at the planned concurrency."""

from enum import StrEnum

from pydantic import Field

from llm_serving.platform.args import HTTPS_URL, args_type


class VerificationMode(StrEnum):
    """What a failing check does to `pulumi up`."""

    GATE = "gate"
    """The Job fails on a failing check, so the `pulumi up` fails with the failing lines."""
    REPORT = "report"
    """The Job succeeds and reports; the up goes on."""
    OFF = "off"
    """No Job."""


@args_type
class VerificationArgs:
    """The post-deploy verification Job, one per model (docs/verification.md)."""

    mode: VerificationMode | None = None
    """`gate` (a failing check fails `pulumi up`), `report` (results only) or `off`; unset: `gate` in prod and staging,
    `report` in dev."""
    duration_seconds: int = Field(default=60, ge=10, le=3600)
    """Load-test time after the ramp-up, in seconds (requests started in the ramp are warm-up)."""
    max_requests: int | None = Field(default=None, ge=1, le=1000000)
    """Stop the load test after this many requests; unset: no cap."""
    concurrency: int | None = Field(default=None, ge=1, le=4096)
    """Concurrent requests of the load test; unset: the planned SLO-bound concurrency per replica times the minimum
    replicas. The deploy-gate Job runs against pods that serve users, so it never sends more than one replica's spare
    batch (`--max-num-seqs` minus the SLO-bound concurrency), whatever is set here, and none when there is no spare."""
    prompt_tokens: int = Field(default=1024, ge=16, le=1000000)
    """Prompt length of each load request."""
    output_tokens: int = Field(default=256, ge=8, le=100000)
    """Output tokens of each load request."""
    edge_url: str | None = Field(default=None, **HTTPS_URL)
    """The model's API through the edge, ending in `/v1`; unset: https://<route host><pathPrefix>/v1."""

