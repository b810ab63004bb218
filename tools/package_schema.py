"""`make schema`: write the package's schema (llm_serving.package.schema()) to provider/schema.json, the file a
reviewer reads to see what TypeScript, Go, C#, Java and YAML programs can set; a test fails when it is stale."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llm_serving import package

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "provider" / "schema.json"


def text() -> str:
    return json.dumps(package.schema(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    SCHEMA_FILE.write_text(text(), encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
