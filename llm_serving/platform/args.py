"""The shape of every args type in the library: a frozen, validated dataclass that reads like a stack file.

`args_type` makes a pydantic dataclass: values are checked when they are constructed (in Python, from a
stack file, or from another language through the package), keys are camelCase in YAML and JSON and
snake_case in Python, unknown keys are refused, instances are frozen and keyword-only, and the docstring
under each field is its description (the configuration reference, the package schema and editors read it
there). Annotations stay plain (`str`, `int`, `list[...]`, `dict[str, ...]`, `Optional[...]`, enums,
other args types, `Input[str]` for secrets): those are the types Pulumi's schema analyzer can carry to
other languages. Constraints therefore live in `Field(...)`, spelled with the patterns below, and items of
lists and maps are checked by `check_each` and `check_labels`.

No `from __future__ import annotations` here or in any module that defines args or components: the
analyzer reads annotations as objects (pulumi.provider.experimental.analyzer, `inspect.get_annotations`).
"""

import re
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, Required, TypedDict, TypeVar, cast, dataclass_transform

import pydantic
from pulumi import Output
from pydantic import ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# A secret or any value another resource computes: a plain string, or an Output (pulumi.Input[str]
# spelled out, so pydantic can check it and the analyzer still sees an Input).
StrInput = str | Awaitable[str] | Output[str]

ARGS_CONFIG = ConfigDict(
    extra="forbid",
    alias_generator=to_camel,
    validate_by_name=True,
    validate_by_alias=True,
    use_attribute_docstrings=True,
    arbitrary_types_allowed=True,
    # A ValidationError's text never quotes the input (a secret may be one); the stack's problems
    # (platform/problems.py) name each value themselves and mask the secrets.
    hide_input_in_errors=True,
)

T = TypeVar("T")


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(Field,))
def args_type(cls: type[T]) -> type[T]:
    """A component's args, or a part of them (see the module docstring)."""
    # (pydantic types the class it returns as its PydanticDataclass protocol: it is `cls`, with validation added.)
    return cast(type[T], pydantic.dataclasses.dataclass(frozen=True, kw_only=True, config=ARGS_CONFIG)(cls))


def validate(cls: type[T], values: Any) -> T:
    """`values` (an instance, or a mapping with camelCase or snake_case keys) as `cls`; a component calls
    this on its args, which the package's provider hands over as a plain mapping."""
    if isinstance(values, cls):
        return values
    return pydantic.TypeAdapter(cls).validate_python(values)


def to_values(value: Any) -> Any:
    """An args instance as the plain camelCase values a stack file holds."""
    return pydantic.TypeAdapter(type(value)).dump_python(value, by_alias=True, mode="json", exclude_none=True)


def fields_of(cls: type) -> dict[str, Any]:
    """The pydantic fields of an args type (name -> FieldInfo), in declaration order."""
    return dict(getattr(cls, "__pydantic_fields__", {}))


class InstallMode(StrEnum):
    """Whether the stack installs a platform part from its chart, or uses the one the cluster already runs."""

    INSTALL = "install"
    """The stack installs it, at the version pinned in llm_serving/platform/versions.py, and owns it."""
    EXISTING = "existing"
    """The cluster runs it already; the stack installs nothing and checks what it relies on in preflight."""


class Environment(StrEnum):
    """Which rules apply: prod and staging must pin everything; only prod protects data."""

    DEV = "dev"
    STAGING = "staging"
    PROD = "prod"


class Constraint(TypedDict, total=False):
    """A constrained string, as keyword arguments of `Field(...)` (the names of pydantic's parameters, so a
    type checker matches each `Field(**CONSTRAINT)` against them); `check_each` and `check_labels` read it too."""

    pattern: Required[str]
    max_length: int


# Constrained strings, as keyword arguments of `Field(...)`.
DNS_LABEL: Constraint = {"pattern": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", "max_length": 63}
KUBERNETES_VERSION: Constraint = {"pattern": r"^1\.(2[89]|3[0-9])$"}
CHART_VERSION: Constraint = {"pattern": r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$"}
SUBNET_ID: Constraint = {"pattern": r"^subnet-[0-9a-f]{8,17}$"}
SECURITY_GROUP_ID: Constraint = {"pattern": r"^sg-[0-9a-f]{8,17}$"}
AVAILABILITY_ZONE: Constraint = {"pattern": r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$"}
CAPACITY_RESERVATION_ID: Constraint = {"pattern": r"^cr-[0-9a-f]{8,17}$"}
LABEL_KEY: Constraint = {
    "pattern": r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
}
LABEL_VALUE: Constraint = {"pattern": r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"}
INSTANCE_TYPE_NAME: Constraint = {"pattern": r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"}
HTTPS_URL: Constraint = {"pattern": r"^https?://[^\s]+$"}
IMAGE_TAG: Constraint = {"pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"}
IMAGE_DIGEST: Constraint = {"pattern": r"^sha256:[0-9a-f]{64}$"}
# `registry/repository:tag` with the registry spelt out, as versions.py lists chart images (Docker's reference
# grammar, distribution/reference: lower-case path components; a tag of up to 128 word characters, dots, dashes).
IMAGE_REFERENCE: Constraint = {
    "pattern": r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+"
               r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$",
}
HOSTNAME: Constraint = {
    "pattern": r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?$",
    "max_length": 253,
}
PATH_PREFIX: Constraint = {"pattern": r"^/([a-z0-9][-a-z0-9._]*(/[a-z0-9][-a-z0-9._]*)*)?$"}
ACM_CERTIFICATE_ARN: Constraint = {"pattern": r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]+$"}
IAM_ROLE_ARN: Constraint = {"pattern": r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$"}
# S3 general purpose bucket names (S3 user guide, bucketnamingrules.html): 3-63 characters, lower-case
# letters, digits, dots and hyphens, starting and ending with a letter or digit. Dots are refused here:
# a dotted name breaks virtual-hosted-style TLS (the wildcard certificate covers one label).
S3_BUCKET_NAME: Constraint = {"pattern": r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$"}
AWS_REGION: Constraint = {"pattern": r"^[a-z]{2}(-[a-z]+)+-\d$"}
CIDR_BLOCK: Constraint = {"pattern": r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$"}


def _matcher(constraint: Constraint) -> Callable[[Any], bool]:
    pattern = re.compile(constraint["pattern"])
    longest = constraint.get("max_length")
    return lambda value: isinstance(value, str) and bool(pattern.match(value)) and (
        longest is None or len(value) <= longest)


def pydantic_core_error(message: str, pattern: str) -> Exception:
    """The error pydantic raises for a pattern mismatch, with the item named in its message."""
    return PydanticCustomError("string_pattern_mismatch", message, {"pattern": pattern})


def check_each(field: str, constraint: Constraint) -> Any:
    """A validator of `field` (a list of strings): each item matches `constraint`."""
    ok = _matcher(constraint)

    def check(cls: type, values: list[Any]) -> list[Any]:
        for value in values:
            if not ok(value):
                raise pydantic_core_error(f"item {value!r} is not valid", constraint["pattern"])
        return values

    return field_validator(field)(check)


def check_labels(field: str, key: Constraint | None, value: Constraint | None) -> Any:
    """A validator of `field` (a mapping, such as Kubernetes labels): keys and values match their constraints."""
    key_ok = _matcher(key) if key else (lambda _: True)
    value_ok = _matcher(value) if value else (lambda _: True)

    def check(cls: type, labels: dict[str, Any]) -> dict[str, Any]:
        for k, v in labels.items():
            if not key_ok(k):
                raise pydantic_core_error(f"key {k!r} is not valid", key.get("pattern", "") if key else "")
            if not value_ok(v):
                raise pydantic_core_error(f"value {v!r} of {k!r} is not valid",
                                          value.get("pattern", "") if value else "")
        return labels

    return field_validator(field)(check)


def check_in(field: str, allowed: tuple[Any, ...]) -> Any:
    """A validator of `field`: its value is one of `allowed` (a closed set of numbers AWS accepts)."""

    def check(cls: type, value: Any) -> Any:
        if value not in allowed:
            raise PydanticCustomError("enum", "not an allowed value", {"expected": ", ".join(map(str, allowed))})
        return value

    return field_validator(field)(check)


def is_args_type(value: Any) -> bool:
    """Whether `value` is an args type (a class made by `args_type`)."""
    return isinstance(value, type) and pydantic.dataclasses.is_pydantic_dataclass(value)
