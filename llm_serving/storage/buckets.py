"""Weights bucket facts and IAM documents: object prefixes, the bucket policy, the readers' and the
writer's role policies (pure).

Actions and condition keys as the Service Authorization Reference lists them for Amazon S3
(docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html: s3:GetObject,
s3:PutObject, s3:ListBucket with the s3:prefix condition key, s3:AbortMultipartUpload,
s3:ListMultipartUploadParts, s3:DeleteObject; the s3:if-match and s3:if-none-match condition keys of
conditional writes and deletes) and the global aws:SecureTransport key; every action and key is checked
against the Service Authorization Reference's lists in tests/components/test_iam_documents.py.
"""

from __future__ import annotations

from typing import Any

# S3 serves at least 5,500 GET/HEAD and 3,500 PUT requests per second per partitioned prefix (S3 user
# guide, optimizing-performance.html). The streamer's GETs are 8 MiB ranges, so a prefix serves 44,000 MiB/s
# to the replicas reading it at once: one of the three bounds of the planner's S3 read figure (s3_throughput).
S3_GET_REQUESTS_PER_SECOND_PER_PREFIX = 5500
S3_PUT_REQUESTS_PER_SECOND_PER_PREFIX = 3500
# The compile cache's lock and marker under its prefix (llm_serving/serving/cache_sync.py; a test holds
# them equal: storage cannot import serving).
CACHE_LOCK = ".llm-serving-lock"
CACHE_MARKER = ".llm-serving-complete"

def s3_prefix_list_name(region: str) -> str:
    """The AWS-managed prefix list of S3 in `region`, also the name of its gateway endpoint service: a gateway
    endpoint's route sends "traffic destined for the service to the gateway endpoint using the prefix list for the
    service", and where prefix lists cannot be referenced "you can get the IP address range for Amazon S3 from the
    prefix list for Amazon S3" (VPC user guide, privatelink/gateway-endpoints.html and vpc-endpoints-s3.html,
    Considerations). A NetworkPolicy, like a network ACL, takes CIDRs only."""
    return f"com.amazonaws.{region}.s3"


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


def _listing(bucket_arn: str, prefixes: list[str]) -> dict[str, Any]:
    # Listing under the prefixes: the streamer lists a revision to find its shards, and cache_sync asks
    # whether a compile cache's marker or lock exists by listing its exact key (whether a
    # prefix-conditioned s3:ListBucket turns GetObject's 403 for a missing key into a 404 is not
    # documented: S3 API reference, GetObject "Permissions").
    return {"Sid": "ListWeights", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{p}*" for p in sorted(prefixes)]}}}


def reader_policy(bucket_arn: str, prefixes: list[str], cache_prefixes: list[str] | None = None) -> dict[str, Any]:
    """A serving pod's role: read the objects of its own revisions and list only under them (the
    streamer lists the prefix to find the shards). No write, no delete, no other model's weights.
    `cache_prefixes`: also read its shared compile caches (compile-cache/<key>/), never write them."""
    if not prefixes:
        raise ValueError("a reader needs at least one prefix")
    caches = sorted(cache_prefixes or [])
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject",
             "Resource": [f"{bucket_arn}/{p}*" for p in sorted(prefixes)]},
            *([{"Sid": "ReadCompileCache", "Effect": "Allow", "Action": "s3:GetObject",
                "Resource": [f"{bucket_arn}/{p}*" for p in caches]}] if caches else []),
            _listing(bucket_arn, [*prefixes, *caches]),
        ],
    }


def compile_cache_writer_policy(bucket_arn: str, prefixes: list[str], cache_prefix: str, *, lock: str,
                                marker: str) -> dict[str, Any]:
    """The compile-cache producer's role: read the revision like a replica (it runs the same `vllm serve`),
    write only under its one cache prefix, and touch the lock and the marker only conditionally.

    The lock must be written with If-None-Match or If-Match (condition keys s3:if-none-match and s3:if-match,
    S3 user guide conditional-writes-enforce.html), so a writer can never overwrite another's lock
    unconditionally; a stale one is taken over with If-Match: its ETag (cache_sync.acquire). The marker (the
    manifest) may only be created: a PutObject of it without If-None-Match is denied, and so is one with
    If-Match, which S3 honours on PutObject to overwrite a matching object (conditional-writes.html: "If-Match"
    on general purpose buckets; s3:if-match is its own condition key), so not even this role can replace a
    published manifest. The only delete is of the lock, with If-Match naming an ETag: `If-Match: *` would
    delete whatever lock is there (conditional-delete-enforce.html, example 2), another writer's included, so
    it is refused. Conditional writes with If-Match and conditional deletes need s3:GetObject beside
    (conditional-writes.html, conditional-deletes.html): granted on the prefix."""
    if not prefixes or not cache_prefix.endswith("/"):
        raise ValueError("a compile-cache writer needs the revision's prefixes and one cache prefix ending in /")
    lock_arn, marker_arn = f"{bucket_arn}/{cache_prefix}{lock}", f"{bucket_arn}/{cache_prefix}{marker}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadWeights", "Effect": "Allow", "Action": "s3:GetObject",
             "Resource": [f"{bucket_arn}/{p}*" for p in sorted(prefixes)]},
            {"Sid": "WriteCompileCache", "Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"],
             "Resource": [f"{bucket_arn}/{cache_prefix}*"]},
            {"Sid": "OnlyConditionalLockWrites", "Effect": "Deny", "Action": "s3:PutObject", "Resource": lock_arn,
             "Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}}},
            # Two statements, since the keys of one condition block must all hold (IAM user guide,
            # reference_policies_elements_condition_logic_multiple-context-keys-or-values.html).
            {"Sid": "OnlyCreateTheMarker", "Effect": "Deny", "Action": "s3:PutObject", "Resource": marker_arn,
             "Condition": {"Null": {"s3:if-none-match": "true"}}},
            {"Sid": "NeverOverwriteTheMarker", "Effect": "Deny", "Action": "s3:PutObject", "Resource": marker_arn,
             "Condition": {"Null": {"s3:if-match": "false"}}},
            {"Sid": "ReleaseOwnLock", "Effect": "Allow", "Action": "s3:DeleteObject", "Resource": lock_arn,
             "Condition": {"Null": {"s3:if-match": "false"}, "StringNotEquals": {"s3:if-match": "*"}}},
            _listing(bucket_arn, [*prefixes, cache_prefix]),
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
            _listing(bucket_arn, prefixes),
        ],
    }


def adapter_source_policy(partition: str, sources: list[tuple[str, str]]) -> dict[str, Any]:
    """A staging Job's role for LoRA adapters on S3 (`lora.adapters[].s3`): read the objects under each adapter's
    prefix, and list exactly that prefix; no other key, no write, in whatever bucket (of this account or another
    whose bucket policy grants the role) the adapters live.

    s3:GetObject on the object ARNs `<bucket>/<prefix>*` (Service Authorization Reference, list_amazons3.html:
    GetObject's resource type is `object`); s3:ListBucket on the bucket ARN (resource type `bucket`) with its
    s3:prefix condition key, StringEquals the prefix itself: the Job lists with `Prefix=<prefix>` only (pagination
    keeps it), and the exact match allows no listing of any other prefix, not even one below. The listing is what
    lets the Job refuse a prefix holding an object its manifest does not list, and name a missing file: a GetObject
    carries no s3:prefix, so this grant does not turn its 403 for a missing key into a 404 (S3 API reference,
    GetObject "Permissions"; IAM condition operators: a condition on a key absent from the request is false)."""
    if not sources or any(not prefix.endswith("/") for _, prefix in sources):
        raise ValueError("an adapter reader needs at least one (bucket, prefix) with the prefix ending in /")
    buckets: dict[str, list[str]] = {}
    for bucket, prefix in sorted(set(sources)):
        buckets.setdefault(bucket, []).append(prefix)
    arn = f"arn:{partition}:s3:::"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ReadAdapters", "Effect": "Allow", "Action": "s3:GetObject",
             "Resource": [f"{arn}{bucket}/{prefix}*" for bucket, prefixes in buckets.items() for prefix in prefixes]},
            *({"Sid": f"ListAdapterPrefixes{index}", "Effect": "Allow", "Action": "s3:ListBucket",
               "Resource": f"{arn}{bucket}", "Condition": {"StringEquals": {"s3:prefix": prefixes}}}
              for index, (bucket, prefixes) in enumerate(buckets.items())),
        ],
    }
