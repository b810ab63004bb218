"""Refresh llm_serving/gpu/prices.json from Karpenter's generated On-Demand price table.

    git -C <karpenter-provider-aws checkout> show <sha>:pkg/providers/pricing/zz_generated.pricing_aws.go > pricing.go
    python -m tools.update_prices pricing.go --commit <sha>

aws/karpenter-provider-aws regenerates that file from the AWS Price List API (On-Demand, Linux, shared tenancy;
`hack/code/prices_gen`), one map per region, headed `// generated at <time> for <region>`. Per catalog instance
type the tool writes the region's price, the snapshot's date and the source with the commit; a type the table
lacks gets null with a note. A note a maintainer wrote (`note`, `price_cut_note`) stays while the price is
unchanged.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from llm_serving.gpu import known_instance_type_names

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "llm_serving" / "gpu" / "prices.json"
REGION = "us-east-1"
EDITORIAL = ("note", "price_cut_note")
_GENERATED = re.compile(r"^// generated at (\S+) for (\S+)$", re.M)
_REGION = re.compile(r'^\t"([a-z0-9-]+)": \{$')
_PRICE = re.compile(r'"([a-z0-9.-]+)": ([0-9.]+)')


class TableError(ValueError):
    pass


def parse(go_source: str, region: str = REGION) -> tuple[str, dict[str, float]]:
    """(generated-at timestamp, instance type -> USD per hour) of `region` in the generated Go file."""
    header = _GENERATED.search(go_source)
    if header is None:
        raise TableError("no '// generated at <time> for <region>' line: not zz_generated.pricing_aws.go?")
    prices: dict[str, float] = {}
    current = None
    for line in go_source.splitlines():
        opened = _REGION.match(line)
        if opened:
            current = opened[1]
        elif current == region:
            prices.update({name: float(value) for name, value in _PRICE.findall(line)})
    if not prices:
        raise TableError(f"no prices for {region} in the table")
    return header[1], prices


def derive(go_source: str, commit: str, previous: dict[str, Any]) -> dict[str, Any]:
    generated_at, prices = parse(go_source)
    source = (f"AWS Price List API (On-Demand, Linux, shared tenancy) as captured in aws/karpenter-provider-aws "
              f"pkg/providers/pricing/zz_generated.pricing_aws.go @ {commit} ('generated at {generated_at} for "
              f"{REGION}')")
    found: dict[str, Any] = {}
    for name in known_instance_type_names():
        price = prices.get(name)
        entry: dict[str, Any] = {"date": generated_at[:10], "region": REGION, "source": source,
                                 "usd_per_hour": price}
        before = previous.get(name, {})
        if name in previous and before.get("usd_per_hour") == price:
            entry.update({key: before[key] for key in EDITORIAL if key in before})
        if price is None and "note" not in entry:
            entry["note"] = f"No On-Demand entry for {name} in this price table."
        found[name] = entry
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.update_prices", description=__doc__.splitlines()[0])
    parser.add_argument("go_file", type=Path, help="zz_generated.pricing_aws.go at the commit")
    parser.add_argument("--commit", required=True, help="the aws/karpenter-provider-aws commit it was read at")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        sys.stderr.write(f"--commit {args.commit!r}: expected a full 40-hex commit\n")
        return 2
    try:
        found = derive(args.go_file.read_text(), args.commit, json.loads(TARGET.read_text()))
    except (OSError, TableError) as error:
        sys.stderr.write(f"{args.go_file}: {error}\n")
        return 2
    TARGET.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {TARGET}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
