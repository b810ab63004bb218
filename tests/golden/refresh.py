"""`make golden`: rewrite tests/golden/<stack>/ from fresh renders, after an intended change.

The golden files make every change to what a stack creates a visible diff in review.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stacks.config.files import PROJECT_DIR
from stacks.offline import render

GOLDEN_DIR = Path(__file__).resolve().parent
# Examples with a golden of their own (a stack that creates its cluster has no copy beside Pulumi.yaml).
EXAMPLES = tuple(PROJECT_DIR / "examples" / f"Pulumi.{name}.yaml"
                 for name in ("sandbox", "prod-s3", "multi-model", "revisions"))


def main() -> int:
    for path in (*sorted(PROJECT_DIR.glob("Pulumi.*.yaml")), *EXAMPLES):
        result = render.render_stack(path)
        manifests, resources = render.write(result, GOLDEN_DIR / result.stack)
        sys.stdout.write(f"refreshed {manifests.relative_to(PROJECT_DIR)} and {resources.name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
