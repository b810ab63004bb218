"""Pod Security Admission levels for the namespaces this program creates (pure, no Pulumi import).

Every namespace enforces a Pod Security Standard, so nothing added later (a debug pod, a chart
bump) can run with more privilege than the namespace was reviewed for. Our own workloads run under
`restricted`; a namespace that holds an upstream chart needing host access enforces the lowest level
that admits it and says why in an annotation, which the policy pack requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["restricted", "baseline", "privileged"]
LEVELS: tuple[str, ...] = ("restricted", "baseline", "privileged")
LABEL_PREFIX = "pod-security.kubernetes.io"
POD_SECURITY_REASON_ANNOTATION = "llm-serving/pod-security-reason"


@dataclass(frozen=True)
class PodSecurity:
    """The level a namespace enforces, and why when it is below `restricted`."""

    level: Level
    reason: str = ""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"pod security level {self.level!r}: expected one of {', '.join(LEVELS)}")
        if self.level != "restricted" and not self.reason.strip():
            raise ValueError(f"pod security level {self.level!r} needs a reason: which pod needs what")


RESTRICTED = PodSecurity("restricted")


def pod_security_labels(level: str) -> dict[str, str]:
    """enforce at `level`; warn and audit always at `restricted`, so the gap between what a namespace
    admits and the restricted profile shows up in `kubectl` warnings and the audit log.

    No `*-version` labels: they default to the API server's own version, so the profile follows the
    cluster's Kubernetes release (Kubernetes docs, "Enforce Pod Security Standards with Namespace
    Labels").
    """
    return {
        f"{LABEL_PREFIX}/enforce": level,
        f"{LABEL_PREFIX}/warn": "restricted",
        f"{LABEL_PREFIX}/audit": "restricted",
    }
