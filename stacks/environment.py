"""Load one environment: read its stack file, resolve `extends`, validate the schema, run the checks.

The one place where the config layer (shapes) meets the checks layer (relations); the program,
the offline tools and the command line all load a stack through it, so all see the same problems.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from stacks import checks
from stacks.config import SECRET_KEYS, ServingStackArgs, StorageBackend, overrides
from stacks.config import validate as validate_args
from stacks.config.files import PROJECT_DIR, ResolvedConfig, StackFile, read_stack_file, resolve, stack_file_path
from stacks.config.problems import MISSING, PROJECT, ConfigError, Problem, from_validation_error, mask_problem


def bucket_region_problems(config: ServingStackArgs, stack_region: object) -> list[Problem]:
    """An existing weights bucket in another region than the stack's (`aws:region`, when the stack file sets
    it): every cold start would cross regions, at inter-region transfer prices and latency."""
    s3 = config.weights_storage.s3
    if config.weights_storage.backend is not StorageBackend.S3 or s3.bucket_region is None \
            or not isinstance(stack_region, str) or s3.bucket_region == stack_region:
        return []
    return [Problem("weightsStorage.s3.bucketRegion", f"the bucket is in another region than the cluster "
                    f"(aws:region {stack_region}): every cold start would stream across regions",
                    s3.bucket_region, f"a bucket in {stack_region}")]


def validate(resolved: ResolvedConfig) -> ServingStackArgs:
    """Validate merged values; every problem is collected into one `ConfigError`."""
    problems: list[Problem] = []
    # Keys the engine reports as secret, even misspelt or structured ones, are never echoed.
    secret_keys = frozenset(SECRET_KEYS) | resolved.secret_keys
    for key in SECRET_KEYS:
        if key in resolved.values and key not in resolved.secret_keys:
            problems.append(
                Problem(key, "must be a secret, not plaintext", "plaintext", "a value set with "
                        f"`pulumi config set --secret {PROJECT}:{key}`")
            )
    for key in sorted(resolved.uninherited_secrets):
        problems.append(
            Problem(
                key,
                f"secret not set on stack {resolved.stack}; secrets are not inherited from "
                f"{' -> '.join(resolved.chain[1:])}",
                MISSING,
                f"its own value: `pulumi config set --secret {PROJECT}:{key} <value> -s {resolved.stack}`",
            )
        )
    try:
        config = validate_args(ServingStackArgs, resolved.values)
    except ValidationError as exc:
        problems.extend(
            p
            for p in from_validation_error(exc, ServingStackArgs, resolved.values, secret_keys)
            # An uninherited secret is reported above with what to do; "missing" would repeat it.
            if not (p.path in resolved.uninherited_secrets and p.got is MISSING)
        )
        raise ConfigError([mask_problem(p, secret_keys) for p in problems]) from None
    # A missing uninherited secret is already reported above; don't report it twice.
    problems.extend(p for p in checks.check(config) if p.path not in resolved.uninherited_secrets)
    problems.extend(bucket_region_problems(config, resolved.other.get("aws:region")))
    problems = [mask_problem(p, secret_keys) for p in problems]
    if problems:
        raise ConfigError(problems)
    return config


def load_stack_file(
    path: Path, changes: Sequence[overrides.Override] = ()
) -> tuple[ResolvedConfig, ServingStackArgs]:
    """The CLI path: read a stack file from disk, resolve `extends`, apply the command line's
    overrides (`plan --stack ... --tp 8`) to the resolved values, validate."""
    own = read_stack_file(path)
    resolved = resolve(own, path.resolve().parent)
    values = resolved.values
    for change in changes:
        values = overrides.apply(values, change, create_items=False)
    resolved = dataclasses.replace(resolved, values=values)
    return resolved, validate(resolved)


def load_from_values(
    stack: str, values: dict[str, Any], secret_keys: set[str], project_dir: Path = PROJECT_DIR
) -> tuple[ResolvedConfig, ServingStackArgs]:
    """The program path: a stack's own values come from the Pulumi engine, bases from disk."""
    own = StackFile(stack, stack_file_path(stack, project_dir), values, frozenset(secret_keys))
    resolved = resolve(own, project_dir)
    return resolved, validate(resolved)

