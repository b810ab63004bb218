"""Refresh llm_serving/gpu/prices.json from ../shared/reference/aws/instance-prices.json:
`python -m tools.update_prices`. Keeps, per catalog instance type, the On-Demand price, region, date,
source and note; an instance type without an On-Demand price keeps null and the reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llm_serving.gpu import known_instance_type_names

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference" / "aws" / "instance-prices.json"
TARGET = ROOT / "llm_serving" / "gpu" / "prices.json"
KEYS = ("region", "usd_per_hour", "date", "source", "note", "price_cut_note")


def derive(reference: dict) -> dict:
    prices = {}
    for name in known_instance_type_names():
        entry = reference.get(name)
        if entry is None:
            prices[name] = {"usd_per_hour": None, "note": "not in the reference price table"}
            continue
        prices[name] = {key: entry[key] for key in KEYS if key in entry}
    return prices


def main() -> int:
    if not REFERENCE.is_file():
        sys.stderr.write(f"no reference price table at {REFERENCE}\n")
        return 2
    TARGET.write_text(json.dumps(derive(json.loads(REFERENCE.read_text())), indent=2, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {TARGET}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
