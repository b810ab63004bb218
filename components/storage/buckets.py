"""Weights bucket facts and IAM documents: object prefixes, the bucket policy, the readers' and the
writer's role policies (pure).

Actions and condition keys as the Service Authorization Reference lists them for Amazon S3
(docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html: s3:GetObject,
s3:PutObject, s3:ListBucket with the s3:prefix condition key, s3:AbortMultipartUpload,
s3:ListMultipartUploadParts) and the global aws:SecureTransport key; the reference folder vendors no IAM
action list to check them against.
"""

from __future__ import annotations

from typing import Any

# S3 serves at least 5,500 GET/HEAD and 3,500 PUT requests per second per partitioned prefix (S3 user
# guide, optimizing-performance.html). The streamer's GETs are 8 MiB ranges, so a prefix serves 44,000 MiB/s
# to the replicas reading it at once: one of the three bounds of the planner's S3 read figure (s3_throughput).
S3_GET_REQUESTS_PER_SECOND_PER_PREFIX = 5500
S3_PUT_REQUESTS_PER_SECOND_PER_PREFIX = 3500
def bucket_name(cluster_name: str, account_id: str, region: str) -> str:
    """The bucket this program creates: `<cluster>-weights-<account>-<region>`, the cluster's name cut to
    leave the whole within S3's 63 characters (bucketnamingrules.html) and without a trailing hyphen."""
    suffix = f"-weights-{account_id}-{region}"
    head = cluster_name.lower()[: 63 - len(suffix)].rstrip("-.")
    return head + suffix


def model_prefix(model_id: str, revision: str) -> str:
    """Where one revision lives in the bucket: a new revision never overwrites the one serving."""
    if not model_id or not revision or "/" in revision:
        raise ValueError(f"a model prefix needs a model id and a revision without '/', got {model_id!r} {revision!r}")
    return f"{model_id}/{revision}/"


def model_uri(bucket: str, model_id: str, revision: str) -> str:
    """The model path vLLM is started with: `vllm serve s3://bucket/prefix/ --load-format runai_streamer`."""
    return f"s3://{bucket}/{model_prefix(model_id, revision)}"


def bucket_policy(bucket_arn: str) -> dict[str, Any]:
    """Only TLS: any request over plain HTTP is refused, whoever signs it (S3 user guide,
    security-best-practices: enforce encryption of data in transit with aws:SecureTransport)."""
    return {
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [bucket_arn, f"{bucket_arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }],
    }


def reader_policy(bucket_arn: str, prefixes: list[str]) -> dict[str, Any]:
    """A serving pod's role: read the objects of its own revisions and list only under them (the
    streamer lists the prefix to find the shards). No write, no delete, no other model's weights."""
    if not prefixes:
        raise ValueError("a reader needs at least one prefix")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject",
             "Resource": [f"{bucket_arn}/{p}*" for p in sorted(prefixes)]},
            {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn,
             "Condition": {"StringLike": {"s3:prefix": [f"{p}*" for p in sorted(prefixes)]}}},
        ],
    }


def writer_policy(bucket_arn: str, prefixes: list[str]) -> dict[str, Any]:
    """The staging Job's role: upload (multipart) and read back under its revisions' prefixes, list them
    to resume; no delete, so a staging bug can never remove a revision that serves."""
    if not prefixes:
        raise ValueError("a writer needs at least one prefix")
    objects = [f"{bucket_arn}/{p}*" for p in sorted(prefixes)]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "StageWeights", "Effect": "Allow",
             "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
             "Resource": objects},
            {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn,
             "Condition": {"StringLike": {"s3:prefix": [f"{p}*" for p in sorted(prefixes)]}}},
        ],
    }
