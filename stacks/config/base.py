"""Shared pieces of the configuration schema: the base model every section derives from, the
constrained string types (DNS labels, subnet ids, zones, versions) and the environment enum.
Every other schema module imports from here; this one imports nothing of the schema.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

# A Kubernetes label/annotation-safe DNS-1123 name: namespaces, release names.
DnsLabel = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63)
]


KubernetesVersion = Annotated[str, StringConstraints(pattern=r"^1\.(2[89]|3[0-9])$")]


ChartVersion = Annotated[str, StringConstraints(pattern=r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")]


SubnetId = Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")]


SecurityGroupId = Annotated[str, StringConstraints(pattern=r"^sg-[0-9a-f]{8,17}$")]


AvailabilityZone = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")]


CapacityReservationId = Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-f]{8,17}$")]


LabelKey = Annotated[
    str,
    StringConstraints(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"),
]


LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")]


InstanceTypeName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")]


HttpsUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$")]


class ConfigModel(BaseModel):
    """Base for every config section: unknown keys rejected, values frozen, camelCase in YAML."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_enum_values=False,
    )


class Environment(StrEnum):
    """Which rules apply: prod and staging must pin everything; only prod protects data."""

    DEV = "dev"
    STAGING = "staging"
    PROD = "prod"


ImageTag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")]


ImageDigest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


Hostname = Annotated[
    str,
    StringConstraints(
        max_length=253, pattern=r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
    ),
]


PathPrefix = Annotated[str, StringConstraints(pattern=r"^/([a-z0-9][-a-z0-9._]*(/[a-z0-9][-a-z0-9._]*)*)?$")]


AcmCertificateArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]+$")
]


IamRoleArn = Annotated[str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")]


# S3 general purpose bucket names (S3 user guide, bucketnamingrules.html): 3-63 characters, lower-case
# letters, digits, dots and hyphens, starting and ending with a letter or digit. Dots are refused here:
# a dotted name breaks virtual-hosted-style TLS (the wildcard certificate covers one label).
S3BucketName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")]


AwsRegion = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]
