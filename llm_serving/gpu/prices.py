"""On-Demand prices of the GPU catalog's instance types (pure): llm_serving/gpu/prices.json, one data
file refreshed by `python -m tools.update_prices` from Karpenter's generated table of the AWS Price List
(us-east-1, aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go at a commit, with the
date and source of every price).

Capacity Blocks are priced per reservation (EC2 Capacity Blocks pricing page) and are not in the
file; a stack on CAPACITY_BLOCK or SPOT capacity pays something else, which `plan` says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PRICES_FILE = Path(__file__).with_name("prices.json")


@dataclass(frozen=True)
class Price:
    instance_type: str
    usd_per_hour: float | None  # None: no On-Demand price (e.g. p5e, reservation-only)
    region: str
    date: str
    source: str
    note: str = ""


@cache
def _table() -> dict[str, dict]:
    return json.loads(PRICES_FILE.read_text())


def instance_price(instance_type: str) -> Price | None:
    entry = _table().get(instance_type)
    if entry is None:
        return None
    return Price(instance_type, entry.get("usd_per_hour"), entry.get("region", ""), entry.get("date", ""),
                 entry.get("source", ""), entry.get("note", ""))
