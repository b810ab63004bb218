"""What the Pulumi CLI itself requires of a stack file, checked offline (pure).

The CLI reads only the stack's own `Pulumi.<stack>.yaml` (it knows nothing of our `extends`), so:
- every config key parses as `<namespace>:<name>`: exactly one colon, or the legacy
  `<namespace>:config:<name>` (pulumi/pulumi sdk/go/common/resource/config/key.go, ParseKey);
- every key `Pulumi.yaml` declares without a default is in the stack's own file (project-level
  config declarations, Pulumi >= 3.44: a declared key without a default is required);
- a secret is a mapping with exactly one `secure` key holding a non-empty string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stacks.config.problems import Problem

# What committed and cloned stack files hold until `pulumi config set --secret` replaces it: the
# offline render accepts it as a secret, and `make preview` / `make up` refuse it (Makefile secrets-set).
PLACEHOLDER_SECRET = {"secure": "v1:placeholder:replace-with-pulumi-config-set-secret"}


def parse_key(key: str) -> tuple[str, str] | None:
    """(namespace, name) as the CLI parses a config key, or None when it cannot."""
    parts = key.split(":")
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    if len(parts) == 3 and parts[1] == "config" and parts[0] and parts[2]:
        return parts[0], parts[2]
    return None


def required_keys(project: dict[str, Any]) -> list[str]:
    """Config keys `Pulumi.yaml` declares without a default, fully qualified."""
    name = project.get("name", "")
    found = []
    for key, declaration in (project.get("config") or {}).items():
        if isinstance(declaration, dict) and "default" not in declaration:
            found.append(key if ":" in key else f"{name}:{key}")
    return sorted(found)


def _is_secret_shape(value: Any) -> bool:
    return isinstance(value, dict) and "secure" in value


def stack_file_problems(document: Any, project: dict[str, Any], file_name: str) -> list[Problem]:
    """Every reason the CLI would refuse this stack file's config."""
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        return [Problem("file", "no `config:` mapping", file_name, "a `config:` mapping")]
    project_prefix = f"{project.get('name', '')}:"
    problems = []
    for key, value in config.items():
        key = str(key)
        if parse_key(key) is None:
            problems.append(Problem("config", "the Pulumi CLI cannot parse this config key", key,
                                    "<namespace>:<name> with exactly one colon, e.g. aws:region"))
        if _is_secret_shape(value) and (set(value) != {"secure"} or not isinstance(value["secure"], str)
                                        or not value["secure"]):
            problems.append(Problem(key.removeprefix(project_prefix), "not a secret the CLI can read",
                                    "a malformed secure value", "{secure: <ciphertext>}"))
    for key in required_keys(project):
        if key not in config:
            problems.append(Problem(key.removeprefix(project_prefix), f"declared in Pulumi.yaml without a default, "
                                    f"so the CLI requires it in {file_name} itself (it does not follow extends)",
                                    None, "a value"))
    return problems


def load_project(project_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
