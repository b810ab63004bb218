"""ModelWeights: a retained PersistentVolumeClaim (or an S3 prefix) and a Job that pre-stages one pinned revision.

Weights land in a directory named after the revision and are marked complete last, so a rollout
never reads half-written weights and re-running the same revision downloads nothing. A model's LoRA adapters are
staged by the same Job, each into its own directory, before the model; for adapters on S3 the volume Job runs as the
model's staging service account, whose Pod Identity role (llm_serving.storage.AdapterSources) reads their prefixes.

Length: the two Jobs (a volume, an S3 bucket) share their naming, requirements and environment, and differ in
every part of their pod; one component keeps the pair side by side.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.platform import ManifestFields

from . import engine
from .stage_scripts import (  # noqa: F401  (re-exported: tests and the package read them here)
    ADAPTER_PATTERNS,
    ALLOW_PATTERNS,
    IGNORE_PATTERNS,
    REQUIREMENTS_DIR,
    S3_SCRATCH_GIB,
    S3_STAGE_EPHEMERAL_GIB,
    STAGE_ADAPTER,
    STAGE_REQUIREMENTS,
    STAGE_S3_SCRIPT,
    STAGE_SCRIPT,
    STAGE_SCRIPT_WITH_ADAPTERS,
    STAGE_VERIFY,
    TOKENIZER_PATTERNS,
)

STAGE_HOME = "/home/stage"
ZONE_LABEL = "topology.kubernetes.io/zone"
# The lock holds x86_64 wheels (hf-xet is per platform): the Job runs on amd64 nodes.
ARCH_SELECTOR = {"kubernetes.io/arch": "amd64"}


def requirements_data(adapters: bool) -> dict[str, str]:
    """The ConfigMap's files: the lock and the verifier, and the adapter check for a model with adapters."""
    return {"requirements.txt": STAGE_REQUIREMENTS, "stage_verify.py": STAGE_VERIFY,
            **({"stage_adapter.py": STAGE_ADAPTER} if adapters else {})}


def requirements_configmap_name(model_name: str, adapters: bool = False) -> str:
    """Named after its content: a new lock or verifier is a new ConfigMap and a new Job template."""
    digest = hashlib.sha256("".join(requirements_data(adapters).values()).encode()).hexdigest()[:10]
    return f"{model_name}-stage-requirements-{digest}"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"


@dataclass(frozen=True)
class StagedAdapter:
    """One LoRA adapter the Job stages beside the weights (models[].lora.adapters): a Hub repository at a commit, or
    an S3 prefix pinned by its manifest's SHA-256."""

    target: str  # engine.staged_adapter_path
    model_id: str | None = None
    revision: str | None = None  # a 40-character commit
    bucket: str | None = None
    prefix: str | None = None  # ends in "/"
    manifest_sha256: str | None = None

    @property
    def key(self) -> str:
        """What names the adapter in the Job's name: a Hub adapter's as it always was."""
        if self.bucket is not None:
            return f"s3://{self.bucket}/{self.prefix}@sha256:{self.manifest_sha256}"
        return f"{self.model_id}@{self.revision}"

    def job_entry(self) -> dict[str, str]:
        """The adapter in the Job's ADAPTERS (stage_scripts.ADAPTER_PROGRAM)."""
        if self.bucket is not None:
            return {"bucket": self.bucket, "prefix": self.prefix or "", "manifest_sha256": self.manifest_sha256 or "",
                    "target": self.target}
        return {"model_id": self.model_id or "", "revision": self.revision or "", "target": self.target}


def region_env(region: pulumi.Input[str]) -> list[dict[str, Any]]:
    """The region for a pod's AWS clients, which Pod Identity does not give (its credentials only): botocore reads
    AWS_DEFAULT_REGION alone (botocore configprovider.py: 'region': ('region', 'AWS_DEFAULT_REGION', ...)), the CLI
    and the other SDKs AWS_REGION."""
    return [{"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region}]


def from_s3(adapters: tuple[StagedAdapter, ...]) -> bool:
    """Whether any adapter comes from S3: the volume Job then runs under a service account with a read role."""
    return any(a.bucket is not None for a in adapters)


@dataclass(frozen=True)
class ModelWeightsArgs:
    namespace: pulumi.Input[str]
    model_name: str
    model_id: str
    revision: str
    tokenizer_revision: str | None
    stage_image: str  # the small Python image the download runs in (versions.STAGE_IMAGE)
    storage_class: pulumi.Input[str]
    access_mode: str
    size_gib: int
    download_deadline_seconds: int
    hf_token_secret: str | None  # name of a Secret with key `token`
    protect: bool  # prod: the claim cannot be deleted by `pulumi destroy` or a replace
    # Resources that must exist first (the NetworkPolicy fencing the Job that holds the HF token).
    after: tuple[pulumi.Resource, ...] = ()
    zone: str | None = None  # ReadWriteOnce: the zone the volume is created in
    # Zones where the file system can be mounted (EFS mount targets exist only in the GPU node group's
    # zones); the Job is kept to them. () : the claim is reachable from every zone.
    stage_zones: tuple[str, ...] = ()
    # A claim the storage backend already made, shared by every model (FSx for Lustre); None: this
    # component creates the model's own claim.
    shared_claim: pulumi.Input[str] | None = None
    # On the Job's pod template (the HF token's revision): a rotated token replaces the Job, whose
    # new pod reads the new token (or finds the revision staged and exits).
    pod_annotations: dict[str, pulumi.Input[str]] | None = None
    # Pins the Job to the nodes whose role the file-system policy lets write (weightsStorage.efs).
    node_selector: dict[str, str] | None = None
    # S3 backend: no claim; the Job uploads under `s3_prefix` (and the tokenizer's under its own prefix)
    # of `bucket` as `service_account`, which Pod Identity maps to the write role for those prefixes.
    bucket: pulumi.Input[str] | None = None
    s3_prefix: str | None = None
    s3_tokenizer_prefix: str | None = None
    service_account: str | None = None
    region: pulumi.Input[str] | None = None  # the bucket's (the cluster's) region, for boto3
    # LoRA adapters staged by the same Job before the model (volume backends only), and the rank each may have.
    # With an adapter from S3 the volume Job runs as `service_account` too (Pod Identity maps it to a role that reads
    # the adapters' prefixes; `after` holds that association's admission guard) and `adapter_egress` (the Pod
    # Identity agent and S3, llm_serving.edge.object_storage_egress) is opened for this model's Job alone.
    adapters: tuple[StagedAdapter, ...] = ()
    max_lora_rank: int = 0
    adapter_egress: tuple[dict[str, Any], ...] = ()


def stage_affinity(zone: str | None, stage_zones: tuple[str, ...]) -> dict[str, Any]:
    """A required node affinity to the zones the file system is mounted in. Without it the Job, which
    selects only the architecture, may start on a CPU node in another zone; EFS has no mount target
    there and the mount hangs until the Job's deadline (the pod never starts, so nothing fails sooner)."""
    if zone is not None or not stage_zones:
        return {}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": sorted(stage_zones)}]}]}}}}


def staging_claim_name(model_name: str) -> str:
    """The claim the staging Job writes (and, on EFS, the directory the serving access point reads)."""
    return f"{model_name}-weights"


def job_name(model_name: str, revision: str, tokenizer_revision: str | None,
             adapters: tuple[StagedAdapter, ...] = (), max_lora_rank: int = 0) -> str:
    """One Job per pinned revision: a Job's pod template is immutable, and a new revision must be
    a new download while the old weights keep serving. A model's adapters (and the rank they are checked
    against) are part of the name, so adding or changing one is a new Job that stages it."""
    key = f"{revision}/{tokenizer_revision or ''}"
    if adapters:
        key += "/" + ",".join(a.key for a in adapters) + f"/r{max_lora_rank}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{model_name}-stage-{digest}"



# A read-only root filesystem: HOME, the Hub's cache and /tmp live on small emptyDirs.
STAGE_HOME_ENV = [
    {"name": "HOME", "value": STAGE_HOME},
    {"name": "HF_HOME", "value": f"{STAGE_HOME}/huggingface"},
    {"name": "TMPDIR", "value": engine.TMP_MOUNT},
]


class ModelWeights(pulumi.ComponentResource):
    """The weights claim and the Job that fills it; serving depends on `job`."""

    claim_name: pulumi.Output[str]
    model_path: pulumi.Output[str]

    def __init__(self, name: str, args: ModelWeightsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:serving:ModelWeights", name, None, opts)
        claim_name: pulumi.Input[str]
        if args.bucket is not None:
            if args.adapters:
                raise ValueError("LoRA adapters are staged on a volume; the S3 backend has none (the stack's rules)")
            self._stage_s3(name, args)
            self.claim_name = pulumi.Output.from_input("")
            self.model_path = pulumi.Output.from_input(args.bucket).apply(lambda b: f"s3://{b}/{args.s3_prefix}")
            self.register_outputs({"model_path": self.model_path})
            return
        if args.shared_claim is not None:
            claim_name = args.shared_claim
            claim_after: list[pulumi.Resource] = []
        else:
            claim = self._claim(name, args)
            claim_name = claim.metadata.name
            claim_after = [claim]
        target = engine.staged_model_path(args.model_id, args.revision)
        self._stage(name, args, claim_name, claim_after, target)
        self.claim_name = pulumi.Output.from_input(claim_name)
        self.model_path = pulumi.Output.from_input(target)
        self.register_outputs({"claim_name": self.claim_name, "model_path": self.model_path})

    def _claim(self, name: str, args: ModelWeightsArgs) -> k8s.core.v1.PersistentVolumeClaim:
        return k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata={
                "name": staging_claim_name(args.model_name),
                "namespace": args.namespace,
                "labels": {"app.kubernetes.io/name": args.model_name, "app.kubernetes.io/component": "weights"},
                # With a WaitForFirstConsumer storage class the claim stays Pending until the Job's
                # pod mounts it; awaiting Bound here would deadlock. The Job's await covers it.
                "annotations": {"pulumi.com/skipAwait": "true"},
            },
            spec=cast(ManifestFields, {
                "accessModes": [args.access_mode],
                "storageClassName": args.storage_class,
                "resources": {"requests": {"storage": f"{args.size_gib}Gi"}},
            }),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.after),
                # Re-downloading hundreds of GB is slow and may hit the Hub's rate limits: the claim
                # outlives the stack's resources, and prod refuses to delete it at all.
                retain_on_delete=True,
                protect=args.protect,
            ),
        )

    def _requirements(self, name: str, args: ModelWeightsArgs) -> k8s.core.v1.ConfigMap:
        """The staging program's pinned requirements and its verifier, immutable and named by their hash."""
        return k8s.core.v1.ConfigMap(
            f"{name}-stage-requirements",
            metadata={"name": requirements_configmap_name(args.model_name, bool(args.adapters)),
                      "namespace": args.namespace, "labels": {"app.kubernetes.io/name": args.model_name}},
            data=requirements_data(bool(args.adapters)),
            immutable=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )

    def _stage(self, name: str, args: ModelWeightsArgs, claim_name: pulumi.Input[str],
               claim_after: list[pulumi.Resource], target: str) -> None:
        """The Job that stages the revision into the claim (self.job)."""
        env: list[dict[str, Any]] = [
            {"name": "MODEL_ID", "value": args.model_id},
            {"name": "REVISION", "value": args.revision},
            {"name": "TARGET", "value": target},
            {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        ]
        if args.tokenizer_revision and args.tokenizer_revision != args.revision:
            env += [
                {"name": "TOKENIZER_REVISION", "value": args.tokenizer_revision},
                {
                    "name": "TOKENIZER_TARGET",
                    "value": engine.staged_tokenizer_path(args.model_id, args.tokenizer_revision),
                },
            ]
        if args.adapters:
            env += [{"name": "ADAPTERS", "value": json.dumps([a.job_entry() for a in args.adapters],
                                                             separators=(",", ":"))},
                    {"name": "MAX_LORA_RANK", "value": str(args.max_lora_rank)}]
        s3_adapters = from_s3(args.adapters)
        if s3_adapters and args.region is not None:
            # boto3 needs a region; Pod Identity gives credentials only. A bucket elsewhere answers with its own
            # region, which botocore follows (botocore utils.py S3RegionRedirectorv2, x-amz-bucket-region).
            env += region_env(args.region)
        env += STAGE_HOME_ENV
        requirements = self._requirements(name, args)
        reader: list[pulumi.Resource] = self._adapter_reader(name, args) if s3_adapters else []
        mounts = [
            {"name": "requirements", "mountPath": REQUIREMENTS_DIR, "readOnly": True},
            {"name": "weights", "mountPath": engine.MODELS_MOUNT},
            {"name": "home", "mountPath": STAGE_HOME},
            {"name": "tmp", "mountPath": engine.TMP_MOUNT},
        ]
        volumes: list[dict] = [
            {"name": "requirements",
             "configMap": {"name": requirements_configmap_name(args.model_name, bool(args.adapters))}},
            {"name": "weights", "persistentVolumeClaim": {"claimName": claim_name}},
            {"name": "home", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ]
        if args.hf_token_secret:
            # The token as a file, not an env var: huggingface_hub reads HF_TOKEN_PATH, so the secret
            # never appears in the container's environment (Checkov CKV_K8S_35).
            env.append({"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/token"})
            mounts.append({"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True})
            volumes.append(
                {
                    "name": "hf-token",
                    "secret": {"secretName": args.hf_token_secret, "items": [{"key": "token", "path": "token"}],
                               "defaultMode": 0o440},
                }
            )
        name_of_job = job_name(args.model_name, args.revision, args.tokenizer_revision, args.adapters,
                               args.max_lora_rank)
        self.job = k8s.batch.v1.Job(
            f"{name}-stage",
            metadata={
                "name": name_of_job,
                "namespace": args.namespace,
                "labels": {"app.kubernetes.io/name": args.model_name, "app.kubernetes.io/component": "stage-weights"},
                # A Job that failed (Hub down, token revoked) is replaced on the next `pulumi up`
                # instead of failing every later update until someone deletes it by hand.
                "annotations": {"pulumi.com/replaceUnready": "true"},
            },
            spec=cast(ManifestFields, {
                "backoffLimit": 4,
                "activeDeadlineSeconds": args.download_deadline_seconds,
                "template": {
                    "metadata": {
                        "labels": {
                            "app.kubernetes.io/name": args.model_name,
                            "app.kubernetes.io/component": "stage-weights",
                        },
                        **({"annotations": dict(args.pod_annotations)} if args.pod_annotations else {}),
                    },
                    "spec": {
                        "restartPolicy": "OnFailure",
                        **({"serviceAccountName": args.service_account} if s3_adapters else {}),
                        "nodeSelector": {**(args.node_selector or {}), **ARCH_SELECTOR,
                                         **({ZONE_LABEL: args.zone} if args.zone else {})},
                        **stage_affinity(args.zone, args.stage_zones),
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "securityContext": engine.pod_security_context(),
                        "containers": [
                            {
                                "name": "stage",
                                "image": args.stage_image,
                                "command": ["/bin/sh", "-c",
                                            STAGE_SCRIPT_WITH_ADAPTERS if args.adapters else STAGE_SCRIPT],
                                "env": env,
                                "resources": {
                                    "requests": {"cpu": "2", "memory": "8Gi"},
                                    "limits": {"memory": "8Gi"},
                                },
                                "securityContext": engine.container_security_context(),
                                "volumeMounts": mounts,
                            }
                        ],
                        "volumes": volumes,
                    },
                },
            }),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*claim_after, requirements, *reader, *args.after],
                # Pulumi waits for the Job to succeed; the download may take as long as its deadline.
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{args.download_deadline_seconds + 300}s",
                    update=f"{args.download_deadline_seconds + 300}s",
                ),
            ),
        )

    def _stage_account(self, name: str, args: ModelWeightsArgs) -> tuple[pulumi.Resource, dict[str, str]]:
        """The service account a staging Job that reads or writes S3 runs as, and the labels of that Job's pods."""
        labels = {"app.kubernetes.io/name": args.model_name, "app.kubernetes.io/component": "stage-weights"}
        account = k8s.core.v1.ServiceAccount(
            f"{name}-stage-account",
            metadata={"name": args.service_account, "namespace": args.namespace, "labels": labels},
            # EKS Pod Identity injects its own projected token (audience pods.eks.amazonaws.com) into pods
            # of an associated account; the Kubernetes API token is never needed.
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )
        return account, labels

    def _adapter_reader(self, name: str, args: ModelWeightsArgs) -> list[pulumi.Resource]:
        """For adapters from S3: the service account the volume Job runs as (Pod Identity binds it to the role that
        reads the adapters' prefixes) and a fence that opens this model's Job, and no other pod, to the Pod Identity
        agent and S3 (NetworkPolicies add up: the staging fence keeps DNS and HTTPS)."""
        if not (args.service_account and args.adapter_egress):
            raise ValueError("adapters from S3 need the staging service account and its egress to the agent and S3")
        account, labels = self._stage_account(name, args)
        fence = k8s.networking.v1.NetworkPolicy(
            f"{name}-stage-adapter-sources",
            metadata={"name": f"{args.model_name}-stage-adapter-sources", "namespace": args.namespace,
                      "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
            spec=cast(ManifestFields, {"podSelector": {"matchLabels": labels}, "policyTypes": ["Egress"],
                                       "egress": list(args.adapter_egress)}),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )
        return [account, fence]

    def _stage_s3(self, name: str, args: ModelWeightsArgs) -> None:
        """The Job that uploads the revision to the bucket (self.job), under its own service account."""
        if not (args.s3_prefix and args.service_account):
            raise ValueError("the S3 backend needs the revision's prefix and the staging service account")
        account, labels = self._stage_account(name, args)
        scratch = "/var/stage"
        disk = f"{S3_STAGE_EPHEMERAL_GIB}Gi"  # the scratch volume, HOME with the installed lock, and /tmp
        env = [
            {"name": "MODEL_ID", "value": args.model_id},
            {"name": "REVISION", "value": args.revision},
            {"name": "BUCKET", "value": args.bucket},
            {"name": "PREFIX", "value": args.s3_prefix},
            {"name": "SCRATCH", "value": scratch},
            *(region_env(args.region) if args.region is not None else []),
            {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
        ]
        if args.tokenizer_revision and args.tokenizer_revision != args.revision and args.s3_tokenizer_prefix:
            env += [{"name": "TOKENIZER_REVISION", "value": args.tokenizer_revision},
                    {"name": "TOKENIZER_PREFIX", "value": args.s3_tokenizer_prefix}]
        env += STAGE_HOME_ENV
        requirements = self._requirements(name, args)
        mounts = [
            {"name": "requirements", "mountPath": REQUIREMENTS_DIR, "readOnly": True},
            {"name": "scratch", "mountPath": scratch},
            {"name": "home", "mountPath": STAGE_HOME},
            {"name": "tmp", "mountPath": engine.TMP_MOUNT},
        ]
        volumes: list[dict] = [
            {"name": "requirements", "configMap": {"name": requirements_configmap_name(args.model_name)}},
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{S3_SCRATCH_GIB}Gi"}},
            {"name": "home", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ]
        if args.hf_token_secret:
            env.append({"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/token"})
            mounts.append({"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True})
            volumes.append({"name": "hf-token", "secret": {"secretName": args.hf_token_secret, "defaultMode": 0o440,
                                                            "items": [{"key": "token", "path": "token"}]}})
        self.job = k8s.batch.v1.Job(
            f"{name}-stage",
            metadata={"name": job_name(args.model_name, args.revision, args.tokenizer_revision),
                      "namespace": args.namespace, "labels": labels,
                      "annotations": {"pulumi.com/replaceUnready": "true"}},
            spec=cast(ManifestFields, {
                "backoffLimit": 4,
                # Each retry in a new pod: EKS injects Pod Identity credentials when it admits a pod, and an
                # association "may take several seconds to be effective" (EKS API reference,
                # CreatePodIdentityAssociation). The association's admission guard refuses a pod without them
                # before it exists (llm_serving/platform/pod_identity.py); were one admitted all the same,
                # OnFailure would retry in that same pod until the deadline, while a new pod after the Job
                # controller's back-off (10 s, then doubling) is admitted afresh. A retry starts its copy over
                # (scratch is the pod's).
                "podReplacementPolicy": "Failed",
                "activeDeadlineSeconds": args.download_deadline_seconds,
                "template": {
                    "metadata": {"labels": labels,
                                 **({"annotations": dict(args.pod_annotations)} if args.pod_annotations else {})},
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": args.service_account,
                        "nodeSelector": {**(args.node_selector or {}), **ARCH_SELECTOR},
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "securityContext": engine.pod_security_context(),
                        "containers": [{
                            "name": "stage",
                            "image": args.stage_image,
                            "command": ["/bin/sh", "-c", STAGE_S3_SCRIPT],
                            "env": env,
                            "resources": {
                                "requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": disk},
                                "limits": {"memory": "8Gi", "ephemeral-storage": disk},
                            },
                            "securityContext": engine.container_security_context(),
                            "volumeMounts": mounts,
                        }],
                        "volumes": volumes,
                    },
                },
            }),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[account, requirements, *args.after],
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{args.download_deadline_seconds + 300}s",
                    update=f"{args.download_deadline_seconds + 300}s",
                ),
            ),
        )
