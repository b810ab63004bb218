"""One shape for every Prometheus alerting rule this project emits (pure, no Pulumi import).

Severity label, summary, description and a runbook link named after the alert, so every alert a
person is paged for reads the same way and links to its runbook section.
"""

from __future__ import annotations

from typing import Any


def alert_rule(
    *,
    alert: str,
    expr: str,
    for_minutes: int,
    severity: str,
    summary: str,
    description: str,
    runbook_base_url: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PrometheusRule `rules[]` entry; `labels` add to the severity label."""
    return {
        "alert": alert,
        "expr": expr,
        "for": f"{for_minutes}m",
        "labels": {"severity": severity, **(labels or {})},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{runbook_base_url}#{alert.lower()}",
        },
    }
