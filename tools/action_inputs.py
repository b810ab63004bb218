"""Regenerate tests/fixtures/upstream/action-inputs.json: the input names of GitHub actions the workflows use, each
from its action.yml at the commit the workflows pin.

`python -m tools.action_inputs <owner/name>@<commit>=<path to that commit's action.yml> ...` writes, per pinned
`owner/name@commit`, the sorted names under `inputs:`. Facts only: names, no upstream prose. The mirrors read for
the committed file: `git -C <clone of pulumi/actions> show v7.0.0:action.yml` (commit 8e5e406f...) and
`git -C <clone of pulumi/auth-actions> show v2.1.0:action.yml` (commit 14141591...).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "upstream" / "action-inputs.json"


def derive(sources: dict[str, str]) -> dict[str, list[str]]:
    """`owner/name@commit` -> action.yml text, to `owner/name@commit` -> its input names."""
    return {pin: sorted((yaml.safe_load(text) or {}).get("inputs") or {}) for pin, text in sorted(sources.items())}


def main(argv: list[str]) -> int:
    sources = {}
    for argument in argv:
        pin, _, path = argument.partition("=")
        sources[pin] = Path(path).read_text(encoding="utf-8")
    OUT.write_text(json.dumps(derive(sources), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
