"""The rules of rules.py as pulumi-policy ResourceValidationPolicies, built without starting the engine.

__main__.py hands `build_policies()` to PolicyPack; tests call it directly and feed the policies the
same ResourceValidationArgs the analyzer builds (pulumi-policy 1.21.0).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pulumi
from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

try:  # imported as the package `policies` (tests, check.py)
    from . import rules
except ImportError:  # run by the Pulumi CLI, which puts only this directory on sys.path
    import rules  # type: ignore[no-redef, import-not-found]  # (the CLI's sys.path; mypy sees the package)

PROJECT = "llm-serving"
LEVELS = {"mandatory": EnforcementLevel.MANDATORY, "advisory": EnforcementLevel.ADVISORY}
UNKNOWNS = frozenset({
    UNKNOWN_ARCHIVE_VALUE, UNKNOWN_ARRAY_VALUE, UNKNOWN_ASSET_VALUE, UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE, UNKNOWN_OBJECT_VALUE, UNKNOWN_STRING_VALUE,
})


def plain(value: Any) -> Any:
    """The analyzer's props in the render's form: plain dicts, lists and integers; unknowns left as sentinels.

    `args.props` raises on the first unknown value it is asked for; reading the raw values instead lets
    a rule judge everything that is known and lets `first_unknown` decide afterwards.
    """
    if isinstance(value, Mapping):
        # pulumi_policy's proxies hand out their raw target under this key (proxy.py, 1.21.0).
        target = value if isinstance(value, dict) else value["__target"]
        return {key: plain(item) for key, item in target.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        target = value if isinstance(value, list | tuple) else value["__target"]  # type: ignore[call-overload]
        return [plain(item) for item in target]
    if isinstance(value, float) and value.is_integer():
        # Protobuf's Struct carries every number as a double; the manifest (and the render) has integers.
        return int(value)
    return value


def first_unknown(value: Any, path: tuple[str, ...] = ()) -> tuple[str, list[str]] | None:
    """(sentinel, property path) of the first value not known until an earlier resource exists."""
    if isinstance(value, str) and value in UNKNOWNS:
        return value, list(path)
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        found = first_unknown(item, (*path, str(key)))
        if found:
            return found
    return None


def stack_environment() -> str:
    """This stack's `llm-serving:environment`, which the engine passes to the pack as stack config."""
    return rules.resolve_environment(pulumi.Config(PROJECT).get("environment"), os.environ.get("PULUMI_STACK"))


def _validator(rule: rules.Rule, environment: str | None) -> Any:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if not rule.applies_to(args.resource_type):
            return
        inputs = plain(args.props)
        context = rules.RuleContext(
            environment=environment or stack_environment(),
            name=args.name,
            protect=bool(args.opts.protect),
            # The analyzer protocol has no retainOnDelete (AnalyzerResourceOptions), and validations get
            # secrets unwrapped to plain text: both are checked on the offline render only.
            retain_on_delete=None,
            secrets_visible=False,
        )
        messages = rule.check(args.resource_type, inputs, context)
        unknown = first_unknown(inputs)
        if messages and unknown:
            # At preview an input can depend on a resource not created yet, and that value may be what
            # fails the rule: the engine reports this as advisory and `pulumi up` re-runs it when known.
            raise UnknownValueError(*unknown)
        for message in messages:
            report_violation(message, None)  # no urn: the resource under validation

    return validate


def build_policies(environment: str | None = None) -> list[ResourceValidationPolicy]:
    """One policy per rule; `environment` fixes the stack's environment (tests), else it is read per call."""
    return [
        ResourceValidationPolicy(
            name=rule.name,
            description=rule.description,
            enforcement_level=LEVELS[rule.enforcement],
            validate=_validator(rule, environment),
        )
        for rule in rules.RULES
    ]
