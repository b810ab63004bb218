"""VllmDeployment: one model's vLLM Deployment, Service and PodDisruptionBudget.

Pinned image, engine args from typed settings, probes sized by the capacity planner, a drain that
lets open streams finish, and a rollout strategy sized from the GPUs the node group can supply.

Length: one pod template serves three workloads (the Deployment, a LeaderWorkerSet's leader and workers, the
compile cache's producer Job), so its volumes, mounts, placement and drain are built once here, beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.platform import ManifestFields

from . import compile_cache, engine, multinode, timing, weights
from .multinode import EFA_ENV, efa_resources, leader_worker_set, worker_container

# The node group's generation label (llm_serving/gpu/scheduling.py NODE_GENERATION_LABEL; the layers keep
# serving from importing gpu, and a test holds the two equal).
NODE_GENERATION_LABEL = "llm-serving/node-generation"


@dataclass(frozen=True)
class VllmDeploymentArgs:
    namespace: pulumi.Input[str]
    model_name: str
    image: str
    replicas: int
    settings: engine.EngineSettings
    startup_budget_seconds: int
    resources: dict
    node_selector: pulumi.Input[dict[str, str]]
    tolerations: pulumi.Input[list[dict[str, str]]]
    claim_name: pulumi.Input[str] | None  # None: the weights are streamed from S3, no volume
    api_key_secret: str  # Secret with key `api-key`: vLLM checks its own key in every auth mode
    cache_gib: int  # per-pod disk emptyDir: HOME, compile and kernel caches
    tmp_gib: int  # per-pod disk emptyDir at /tmp
    chat_template: str | None = None
    labels: dict[str, str] | None = None
    # Resources the pods must not start before (the weight pre-staging Job, the API key Secret).
    after: tuple[pulumi.Resource, ...] = ()
    # From rollout.choose_strategies: surge where the node group has room at peak, else one
    # replica at a time, else (dev only) Recreate.
    strategy: dict | None = None
    # How long `pulumi up` waits for a rollout (timing.rollout_await_seconds: the planned steps, the
    # last one up to the progress deadline).
    rollout_timeout_seconds: int = 3600
    # How long `pulumi destroy` (or a replacement) waits for the pods to drain and go (timing.model_drains).
    delete_timeout_seconds: int = 3600
    # Protect the workload (Pulumi's `protect`): a change that would delete it, or replace it delete-first (a
    # selector change: same name), stops the preview instead of taking every replica down at once.
    protect_workload: bool = False
    # What a surge pod may wait for before its container starts: a new node and an image pull.
    pre_start_seconds: int = 600
    pod_annotations: dict[str, pulumi.Input[str]] | None = None
    zone: str | None = None  # ReadWriteOnce weights: the replica must run where the volume is
    # Shared weights reachable only from some zones (EFS mount targets in the node group's zones) on nodes the
    # stack does not place itself: a required affinity keeps every pod there. Empty: any zone.
    zones: tuple[str, ...] = ()
    # The nodes the minimum replicas must spread over (planning.host_spread_domains); 0: a preference only.
    host_domains: int = 0
    extra_env: tuple[dict, ...] = ()
    efa_interfaces: int = 0  # multi-node groups: the node's EFA interfaces, all requested by each rank
    # S3 backend: the pods' service account, which Pod Identity maps to the read-only role of the model's
    # prefix (its association and then its admission guard first: in `after`).
    service_account: str | None = None
    # The shared compile cache's key (compile_cache.py): each pod seeds its own cache from it, and one Job
    # produces it; None: every pod compiles for itself.
    compile_cache: compile_cache.CompileCacheKey | None = None
    # What Pulumi waits for the producer Job: a node, an image pull and one cold start with a compile.
    compile_timeouts: timing.ProducerTimeouts = timing.producer_timeouts(0, 3600)
    # S3 (the key's in_bucket): the bucket the cache lives in, and the producer's own service account, which
    # Pod Identity maps to the role that writes only the cache's prefix.
    compile_cache_bucket: pulumi.Input[str] | None = None
    compile_cache_service_account: str | None = None


def selector_labels(model_name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": model_name, "app.kubernetes.io/component": "vllm"}


class VllmDeployment(pulumi.ComponentResource):
    """The serving pods of one model and the Service in front of them."""

    service_name: pulumi.Output[str]
    port: pulumi.Output[int]

    def __init__(self, name: str, args: VllmDeploymentArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:serving:VllmDeployment", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        selector = selector_labels(args.model_name)
        self.pod_selector = dict(selector)  # what selects exactly this model's pods (an InferencePool's selector)
        labels = {**(args.labels or {}), **selector, "app.kubernetes.io/part-of": "llm-serving"}
        probes = engine.probes(args.startup_budget_seconds)
        settings = args.settings
        multi = settings.pipeline_parallel_size > 1

        # The TP workers' transport, and the CPU tier of the KV cache, which vLLM keeps in /dev/shm too.
        shm_size = f"{engine.shm_size_gib(settings.tensor_parallel_size) + settings.kv_offloading_gib}Gi"
        volumes: list[dict] = [
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": shm_size},
            },
            {"name": "cache", "emptyDir": {"sizeLimit": f"{args.cache_gib}Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": f"{args.tmp_gib}Gi"}},
        ]
        mounts: list[dict] = [
            # Compile and kernel caches survive a container restart (not a new pod), per pod.
            {"name": "cache", "mountPath": engine.CACHE_MOUNT},
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": engine.TMP_MOUNT},
        ]
        if args.claim_name is not None:
            # Read-only at the volume too: serving pods never write weights, and the kubelet then
            # skips the fsGroup ownership walk over hundreds of GiB.
            volumes.insert(0, {"name": "weights",
                               "persistentVolumeClaim": {"claimName": args.claim_name, "readOnly": True}})
            mounts.insert(0, {"name": "weights", "mountPath": engine.MODELS_MOUNT, "readOnly": True})
        if args.chat_template is not None:
            template = k8s.core.v1.ConfigMap(
                f"{name}-chat-template",
                metadata={"name": f"{args.model_name}-chat-template", "namespace": args.namespace, "labels": labels},
                data={"chat-template.jinja": args.chat_template},
                opts=child,
            )
            volumes.append({"name": "chat-template", "configMap": {"name": template.metadata.name}})
            mounts.append(
                {
                    "name": "chat-template",
                    "mountPath": engine.CHAT_TEMPLATE_PATH,
                    "subPath": "chat-template.jinja",
                    "readOnly": True,
                }
            )

        health = {"path": "/health", "port": "http"}
        container = {
            "name": "vllm",
            "image": args.image,
            "imagePullPolicy": "IfNotPresent",
            "args": engine.engine_args(settings) + (engine.multinode_args(settings, leader=True) if multi else []),
            "ports": [{"name": "http", "containerPort": engine.PORT, "protocol": "TCP"}],
            "env": [
                # Everything was pre-staged: no Hub call at start-up, so a Hub outage or rate limit
                # cannot stop a pod from starting.
                {"name": "HF_HUB_OFFLINE", "value": "1"},
                *engine.writable_paths_env(),
                {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
                # The API server gives up on the engine core after 600 s by default, and loading the
                # weights counts (vllm#35616): a 70B cold start from EFS would restart forever.
                {"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": str(args.startup_budget_seconds)},
                {
                    # vLLM reads its key only from --api-key or VLLM_API_KEY (no file option); an arg
                    # would show in the pod spec and `ps`, so the env var from a Secret. Always set:
                    # where the gateway authenticates clients it injects this key, so a pod that
                    # bypasses the gateway still needs it for /v1.
                    "name": "VLLM_API_KEY",
                    "valueFrom": {"secretKeyRef": {"name": args.api_key_secret, "key": "api-key"}},
                },
                *args.extra_env,
                *(EFA_ENV if args.efa_interfaces else ()),
                *engine.lora_env(settings),
            ],
            "resources": efa_resources(args.resources, args.efa_interfaces),
            "volumeMounts": mounts,
            "startupProbe": {
                "httpGet": health,
                "periodSeconds": probes.startup_period_seconds,
                "failureThreshold": probes.startup_failure_threshold,
                "timeoutSeconds": 5,
            },
            "readinessProbe": {
                "httpGet": health,
                "periodSeconds": probes.readiness_period_seconds,
                "failureThreshold": probes.readiness_failure_threshold,
                "timeoutSeconds": probes.readiness_timeout_seconds,
            },
            "livenessProbe": {
                "httpGet": health,
                "periodSeconds": probes.liveness_period_seconds,
                "failureThreshold": probes.liveness_failure_threshold,
                "timeoutSeconds": probes.liveness_timeout_seconds,
            },
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(engine.PRE_STOP_SECONDS)]}}},
            "securityContext": engine.container_security_context(),
        }
        key = args.compile_cache if not multi else None
        init_containers = ([compile_cache.seed_init_container(key, args.image, [
            *engine.writable_paths_env(), *self._bucket_env(args, key)])] if key is not None else [])
        if key is not None:
            volumes += key.volumes(writable=False)

        annotations = {**(args.pod_annotations or {}), **engine.chat_template_annotation(args.chat_template)}

        def pod_template(pod_labels: dict[str, str], containers: list[dict]) -> dict:
            return {
                "metadata": {"labels": pod_labels, **({"annotations": annotations} if annotations else {})},
                "spec": {
                    "nodeSelector": pulumi.Output.from_input(args.node_selector).apply(
                        lambda selector: {**selector, "topology.kubernetes.io/zone": args.zone}
                        if args.zone
                        else selector
                    ),
                    "tolerations": args.tolerations,
                    **weights.stage_affinity(args.zone, args.zones),
                    # Replicas on different nodes and zones: losing one loses one replica, not all. Zones are a
                    # preference (a replica must never wait for GPU capacity in another zone). Hosts are required
                    # where the group can hold the minimum on as many nodes (host_domains; docs/decisions.md): with
                    # fewer nodes than minDomains the scheduler counts the minimum as 0 (Kubernetes docs, Pod
                    # Topology Spread Constraints), so a lost node's replica pends for a new node.
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            # Honor: a cordoned, NotReady or unreachable node (tainted) is no domain, so a dead node
                            # does not count as an empty one every replacement must avoid.
                            **({"whenUnsatisfiable": "DoNotSchedule", "minDomains": args.host_domains,
                                "nodeTaintsPolicy": "Honor"}
                               if args.host_domains > 1 else {"whenUnsatisfiable": "ScheduleAnyway"}),
                            "labelSelector": {"matchLabels": selector},
                        },
                        {
                            "maxSkew": 1,
                            "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": selector},
                        },
                    ],
                    "terminationGracePeriodSeconds": engine.termination_grace_seconds(
                        settings.shutdown_timeout_seconds
                    ),
                    # Kubernetes would inject VLLM_* variables for a Service named like the
                    # engine's own settings (vLLM docs, environment variables).
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    **({"serviceAccountName": args.service_account} if args.service_account else {}),
                    "securityContext": engine.pod_security_context(),
                    **({"initContainers": init_containers} if init_containers else {}),
                    "containers": containers,
                    "volumes": volumes,
                },
            }

        timeouts = pulumi.CustomTimeouts(
            create=f"{args.rollout_timeout_seconds}s", update=f"{args.rollout_timeout_seconds}s",
            # Pods drain for the stream bound before they go; the 10-minute default would fail first.
            delete=f"{args.delete_timeout_seconds}s",
        )
        deployment: pulumi.CustomResource  # a LeaderWorkerSet, or a Deployment
        if multi:
            # One LeaderWorkerSet group of pipeline-parallel-size pods per replica. The leader keeps
            # the labels the Service, the pool, the PodMonitor and the NetworkPolicies select.
            worker_labels = {**labels, "app.kubernetes.io/component": multinode.WORKER_COMPONENT}
            worker = worker_container(
                container, engine.engine_args(settings) + engine.multinode_args(settings, False),
                drain_seconds=engine.PRE_STOP_SECONDS + settings.shutdown_timeout_seconds,
                master_port=engine.MASTER_PORT,
            )
            group = leader_worker_set(
                name=args.model_name, namespace=args.namespace, labels=labels, replicas=args.replicas,
                size=settings.pipeline_parallel_size, leader_template=pod_template(labels, [container]),
                worker_template=pod_template(worker_labels, [worker]), strategy=args.strategy,
            )
            fence = multinode.group_network_policy(args.model_name, args.namespace)
            group_fence = k8s.networking.v1.NetworkPolicy(
                f"{name}-group-netpol", metadata=fence["metadata"], spec=fence["spec"], opts=child)
            deployment = k8s.apiextensions.CustomResource(
                f"{name}-leaderworkerset",
                api_version=group["apiVersion"],
                kind=group["kind"],
                metadata=group["metadata"],
                spec=group["spec"],
                opts=pulumi.ResourceOptions(
                    # The ranks find each other only once the group fence admits them.
                    parent=self, depends_on=[*args.after, group_fence], ignore_changes=["spec.replicas"],
                    custom_timeouts=timeouts, protect=args.protect_workload,
                ),
            )
        else:
            deployment = k8s.apps.v1.Deployment(
                f"{name}-deployment",
                metadata={"name": args.model_name, "namespace": args.namespace, "labels": labels},
                spec=cast(ManifestFields, {
                    "replicas": args.replicas,
                    "selector": {"matchLabels": selector},
                    "strategy": args.strategy or {"type": "RollingUpdate",
                                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                    # A new pod counts as available only after it has been ready for 30 s.
                    "minReadySeconds": 30,
                    # The startup budget plus what a surge pod may wait for first (a new node, an image
                    # pull) plus 5 minutes: past it the rollout counts as failed, and Pulumi's await
                    # (rollout_timeout_seconds) ends soon after.
                    "progressDeadlineSeconds": timing.progress_deadline_seconds(args.startup_budget_seconds,
                                                                                args.pre_start_seconds),
                    "revisionHistoryLimit": 5,
                    "template": pod_template(labels, [container]),
                }),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=list(args.after),
                    # The autoscaler owns the replica count; `pulumi up` must not reset it.
                    ignore_changes=["spec.replicas"],
                    # Never skip the await: `pulumi up` finishes only when every replica is ready. A
                    # rollout replaces pods in steps, each a node, an image pull and a cold start.
                    custom_timeouts=timeouts,
                    protect=args.protect_workload,
                ),
            )
        if key is not None:
            self._compile_job(name, args, key, container, volumes, pod_template(labels, [container])["spec"])
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": args.model_name, "namespace": args.namespace, "labels": labels},
            spec=cast(ManifestFields, {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": "http", "port": engine.PORT, "targetPort": "http", "protocol": "TCP"}],
            }),
            opts=child,
        )
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata={"name": args.model_name, "namespace": args.namespace, "labels": labels},
            # Node drains take one replica at a time; a single-replica model can still be drained.
            # For groups, one pod of any group: a group is down as soon as one of its pods is.
            spec=cast(ManifestFields, {"maxUnavailable": 1, "selector": {"matchLabels": (
                {multinode.LWS_NAME_LABEL: args.model_name} if multi else selector)}}),
            opts=child,
        )
        self.deployment = deployment
        self.service_name = service.metadata.name
        self.port = pulumi.Output.from_input(engine.PORT)
        self.register_outputs({"service_name": self.service_name, "port": self.port})

    @staticmethod
    def _bucket_env(args: VllmDeploymentArgs, key: compile_cache.CompileCacheKey) -> list[dict]:
        """S3: the cache's bucket and region for cache_sync.py's client (the region is the streamer's)."""
        if not key.in_bucket:
            return []
        return [*(e for e in args.extra_env if e["name"] in ("AWS_REGION", "AWS_DEFAULT_REGION")),
                {"name": compile_cache.BUCKET_ENV, "value": args.compile_cache_bucket}]

    def _compile_job(self, name: str, args: VllmDeploymentArgs, key: compile_cache.CompileCacheKey,
                     container: dict, volumes: list[dict], pod_spec: dict) -> None:
        """The one writer of the shared compile cache for `key` (compile_cache.producer_script): named after
        the key, so a key change is a new Job and an unchanged key is left alone. The Deployment does not
        wait for it: replicas that start first compile for themselves, later ones seed from it."""
        labels = {"app.kubernetes.io/name": args.model_name,
                  "app.kubernetes.io/component": compile_cache.PRODUCER_COMPONENT}
        writer = {
            **{k: v for k, v in container.items() if k not in ("args", "ports", "startupProbe", "readinessProbe",
                                                               "livenessProbe", "lifecycle")},
            "name": "compile",
            # On S3 the model path is the bucket's (an output until the bucket exists).
            "command": ["/bin/sh", "-c", pulumi.Output.all(*container["args"]).apply(
                lambda serving_args: compile_cache.producer_script(
                    key, list(serving_args), stale_lock_seconds=args.compile_timeouts.stale_lock_seconds))],
            # No API key: the producer listens on loopback only and serves nobody.
            "env": [*(e for e in container["env"] if e["name"] != "VLLM_API_KEY"),
                    *(e for e in self._bucket_env(args, key) if e["name"] == compile_cache.BUCKET_ENV)],
            # Read-write only where the cache lives: its own claim (EFS), else the weights claim (FSx, an
            # existing class), whose staged revisions the producer never touches.
            "volumeMounts": [
                *({**m, "readOnly": key.claim_name is not None} if m["name"] == "weights" else m
                  for m in container["volumeMounts"] if m["name"] != "chat-template"),
                *key.volume_mounts(writable=True),
            ],
        }
        claim = {"name": "weights", "persistentVolumeClaim": {"claimName": args.claim_name,
                                                               "readOnly": key.claim_name is not None}}
        spec = {k: v for k, v in pod_spec.items() if k not in ("containers", "initContainers", "volumes",
                                                                 "topologySpreadConstraints")}
        if args.compile_cache_service_account:
            spec["serviceAccountName"] = args.compile_cache_service_account
        # Any GPU node of the group, not the current generation's: pulumi-kubernetes replaces a Job on any
        # template change, and a generation label here would recreate the producer on every node update.
        spec["nodeSelector"] = pulumi.Output.from_input(spec["nodeSelector"]).apply(
            lambda selector: {k: v for k, v in selector.items() if k != NODE_GENERATION_LABEL})
        k8s.batch.v1.Job(
            f"{name}-compile-cache",
            metadata={"name": key.job_name(args.model_name), "namespace": args.namespace, "labels": labels,
                      # A failed producer (a node lost mid-compile) is replaced on the next `pulumi up`.
                      "annotations": {"pulumi.com/replaceUnready": "true"}},
            spec=cast(ManifestFields, {
                "backoffLimit": 2,
                # A replacement pod only once the failed one has gone: never two writers at once.
                "podReplacementPolicy": "Failed",
                "activeDeadlineSeconds": args.compile_timeouts.deadline_seconds,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {**spec, "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                             "containers": [writer],
                             "volumes": [*(claim if v["name"] == "weights" else v for v in volumes
                                           if v["name"] not in ("chat-template", "compile-cache",
                                                                compile_cache.SYNC_VOLUME)),
                                         *key.volumes(writable=True)]},
                },
            }),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(args.after),
                custom_timeouts=pulumi.CustomTimeouts(create=f"{args.compile_timeouts.await_seconds}s",
                                                      update=f"{args.compile_timeouts.await_seconds}s"),
            ),
        )
