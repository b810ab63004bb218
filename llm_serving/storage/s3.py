"""WeightsBucket: the S3 bucket the weights are staged to and streamed from, and who may touch it.

A bucket the program creates (SSE-S3, versioned, public access blocked, owner-enforced, TLS-only,
retained on destroy and protected in prod) or an existing one by name; per model a write role for its
staging Job and a read-only role for its serving pods, each scoped to the model's revision prefix and
bound to one service account through EKS Pod Identity; with a shared compile cache, a role for its
producer Job that writes only under the cache's prefix (the serving role reads it). AdapterSources: the role a
model's staging Job reads its LoRA adapters from S3 with, on any backend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from llm_serving.platform import pod_identity_role

from . import buckets


@dataclass(frozen=True)
class BucketAccess:
    """One service account's access: `writer` stages, `cache_writer` produces the compile cache under
    `cache_prefixes[0]` (and reads the revision), else it only reads (the revision and `cache_prefixes`)."""

    name: str  # component-local name of the role, e.g. "llama-70b-read"
    namespace: str
    service_account: str
    prefixes: tuple[str, ...]
    writer: bool = False
    cache_prefixes: tuple[str, ...] = ()
    cache_writer: bool = False

    def policy(self, bucket_arn: str) -> dict:
        if self.writer:
            return buckets.writer_policy(bucket_arn, list(self.prefixes))
        if self.cache_writer:
            (cache,) = self.cache_prefixes
            return buckets.compile_cache_writer_policy(bucket_arn, list(self.prefixes), cache,
                                                       lock=buckets.CACHE_LOCK, marker=buckets.CACHE_MARKER)
        return buckets.reader_policy(bucket_arn, list(self.prefixes), list(self.cache_prefixes))

    @property
    def purpose(self) -> str:
        return "Stages weights" if self.writer else "Produces the compile cache" if self.cache_writer else \
            "Reads weights"


@dataclass(frozen=True)
class WeightsBucketArgs:
    cluster_name: str
    bucket_name: str | None  # an existing bucket; None: create one named after the cluster and account
    protect: bool
    tags: dict[str, str]
    access: tuple[BucketAccess, ...]


class WeightsBucket(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]

    def __init__(self, name: str, args: WeightsBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:storage:WeightsBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        guards: list[pulumi.Resource] = []
        if args.bucket_name is None:
            invoke = pulumi.InvokeOptions(parent=self)
            bucket = aws.s3.Bucket(
                f"{name}-bucket",
                # Bucket names are global: the cluster, the account and the region make this one unique
                # and the same on every `up` (a name change would replace the retained bucket).
                bucket=pulumi.Output.all(aws.get_caller_identity_output(opts=invoke).account_id,
                                         aws.get_region_output(opts=invoke).region).apply(
                    lambda v: buckets.bucket_name(args.cluster_name, v[0], v[1])),
                tags={**args.tags, "Name": f"{args.cluster_name}-{name}"},
                # Re-uploading hundreds of GB is slow: `pulumi destroy` leaves the bucket and its objects.
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=True),
            )
            bucket_id: pulumi.Output[str] = bucket.bucket
            arn: pulumi.Output[str] = bucket.arn
            guards += [
                aws.s3.BucketPublicAccessBlock(
                    f"{name}-public-access-block", bucket=bucket_id, block_public_acls=True,
                    block_public_policy=True, ignore_public_acls=True, restrict_public_buckets=True, opts=child),
                # ACLs off: every object belongs to the bucket's account, whoever uploaded it.
                aws.s3.BucketOwnershipControls(
                    f"{name}-ownership", bucket=bucket_id, rule={"object_ownership": "BucketOwnerEnforced"},
                    opts=child),
                aws.s3.BucketServerSideEncryptionConfiguration(
                    f"{name}-encryption", bucket=bucket_id,
                    rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"},
                            "bucket_key_enabled": True}], opts=child),
                # An overwritten or deleted shard can be restored from its previous version.
                aws.s3.BucketVersioning(
                    f"{name}-versioning", bucket=bucket_id, versioning_configuration={"status": "Enabled"},
                    opts=child),
            ]
            guards.append(aws.s3.BucketPolicy(
                f"{name}-policy", bucket=bucket_id,
                policy=arn.apply(lambda a: json.dumps(buckets.bucket_policy(a))),
                # After the public access block, so the policy is never evaluated on an open bucket.
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(guards))))
        else:
            bucket_id = pulumi.Output.from_input(args.bucket_name)
            partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition
            arn = pulumi.Output.concat("arn:", partition, ":s3:::", args.bucket_name)
        # What each access's workloads wait for: the association's admission guard, the last of its role, policy,
        # association and guard; their pods are admitted only once EKS injects credentials into them
        # (llm_serving/platform/pod_identity.py).
        self.admission_guards: dict[str, list[pulumi.Resource]] = {}
        for access in args.access:
            self.admission_guards[access.name] = pod_identity_role(
                f"{name}-{access.name}", cluster_name=args.cluster_name, namespace=access.namespace,
                service_account=access.service_account,
                # (A default argument binds this entry; mypy cannot type a lambda with one.)
                policy=arn.apply(lambda a, entry=access: json.dumps(entry.policy(a))),  # type: ignore[misc]
                description=(f"{access.purpose} in the bucket for "
                             f"{access.namespace}/{access.service_account} of {args.cluster_name}"),
                tags=args.tags, parent=self, association_after=list(guards),
            ).ready
        self.bucket_name = bucket_id
        self.register_outputs({"bucket_name": self.bucket_name})


@dataclass(frozen=True)
class AdapterSourcesArgs:
    cluster_name: str
    namespace: str
    service_account: str  # the model's staging Job's
    sources: tuple[tuple[str, str], ...]  # (bucket, prefix ending in /) of each adapter on S3
    tags: dict[str, str]


class AdapterSources(pulumi.ComponentResource):
    """A role that reads a model's LoRA adapters from their S3 prefixes (buckets.adapter_source_policy), bound by Pod
    Identity to the model's staging Job's service account. `ready` is what the Job waits for: the association's
    admission guard, so its pod is admitted only with credentials."""

    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: AdapterSourcesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:storage:AdapterSources", name, None, opts)
        partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition
        self.ready = pod_identity_role(
            name, cluster_name=args.cluster_name, namespace=args.namespace, service_account=args.service_account,
            policy=partition.apply(lambda p: json.dumps(buckets.adapter_source_policy(p, list(args.sources)))),
            description=(f"Reads LoRA adapters from S3 for {args.namespace}/{args.service_account} of "
                         f"{args.cluster_name}"),
            tags=args.tags, parent=self,
        ).ready
        self.register_outputs({})
