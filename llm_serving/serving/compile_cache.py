"""The shared compile cache: vLLM's torch.compile artifacts for one (model, revision, engine, layout,
GPU), produced once by one Job and copied read-only into every later replica (pure, no Pulumi import).

What vLLM 0.33.0 writes (vllm==0.33.0 wheel, vllm/envs.py, vllm/compilation/backends.py, decorators.py,
compiler_interface.py): everything under `$VLLM_CACHE_ROOT/torch_compile_cache/` - per rank
`<hash>/rank_<r>_<dp>/` (vllm_compile_cache.py, the Inductor artifacts, cache_key_factors.json) and, with
AOT compile (on by default with the pinned torch 2.14), `torch_aot_compile/<hash>/rank_<r>_<dp>/model`
beside a shared `inductor_cache/`. vLLM's own hash covers its config, the engine's code, torch's config
and the environment, so a copied cache it does not match is ignored and compiled again (decorators.py
logs "Compiling model again due to a load failure"), never used wrongly. CUDA graphs are not cached:
they are captured at every start (the planner keeps their capture time).

vLLM loads those artifacts with `pickle.loads` (vllm/compilation/caching.py): whoever can write a model's
cache can run code in that model's serving pods. So the seed copies a cache only when every file matches
the SHA-256 manifest its producer wrote (cache_sync.py, on every backend), and each model's cache is its
own: on EFS an access point rooted at `<COMPILE_CACHE_ROOT>/<model>` with its own volume and claim, which
only that model's producer mounts read-write and its serving pods read-only; on S3 the prefix
`compile-cache/<model>/<key>/`, which only that model's producer role may write. What each layer does and
does not stop: llm_serving/storage/objects.py file_system_policy and the README's threat model.

Why a copy and not vLLM reading the shared directory in place: vLLM is not read-only-safe there.
On a hit it still points TORCHINDUCTOR_CACHE_DIR at `<hash>/inductor_cache` and writes into it after
the load ("post-load execution, CUDA-graph capture, and later autotune/recompile all need to write
under {hash}/inductor_cache/", decorators.py), and on a miss it compiles and saves there. So every
serving pod mounts the shared copy read-only and an init container copies it into the pod's own cache
volume; vLLM then writes only its own copy. A partly written copy is never seeded: the writer renames a
finished directory, manifest inside, into place and marks it last.

The key (our directory) adds what vLLM's hash cannot see from a path: the revision (a moved branch
would bring other weights under the same name), the image (tag and digest), the layout, the GPU and
a digest of the engine flags, so any change of those starts cold in a new directory.

On S3 the same key is an object prefix, `compile-cache/<model>/<key>/` in the weights bucket: the producer
uploads instead of renaming, the seed downloads instead of copying, and the lock is a conditional write.
On every backend the transfers are cache_sync.py, shipped in a ConfigMap and run with the vLLM image's own
Python (and, on S3, its boto3).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import engine
from .cache_sync import EXIT_HELD, FILES_ROOT, MANIFEST, MARKER

# The producer Jobs' pods carry this component label (deployment.py), which their NetworkPolicy selects.
PRODUCER_COMPONENT = "compile-cache"

CACHE_ROOT_DIR = "compile-cache"  # under the weights claim, beside the staged revisions (FSx, an existing class)
# EFS: each model's cache has its own access point and claim, mounted here in that model's serving pods
# (read-only) and its producer (read-write); the access point's root is the model's directory.
SHARED_MOUNT = "/var/lib/llm-serving/compile-cache"
COMPLETE_MARKER = MARKER
# Where vLLM keeps the artifacts inside VLLM_CACHE_ROOT (backends.py, decorators.py); a finished copy keeps
# them under the same name (cache_sync.FILES_ROOT).
VLLM_COMPILE_SUBDIR = FILES_ROOT.rstrip("/")
SEED_CONTAINER = "compile-cache-seed"
# Where the pods find cache_sync.py (a ConfigMap, read-only), and the env var naming the bucket (S3).
SYNC_DIR = "/etc/llm-serving/compile-cache"
SYNC_VOLUME = "compile-cache-sync"
BUCKET_ENV = "LLM_SERVING_CACHE_BUCKET"
SYNC_SOURCE = Path(__file__).with_name("cache_sync.py").read_text()
# The vLLM image carries boto3: its Dockerfile installs runai-model-streamer[s3] (versions.py
# VLLM_IMAGE_HAS_S3_STREAMER), and runai-model-streamer-s3 0.15.7 requires boto3 (its wheel's METADATA;
# vllm 0.33.0's `runai` extra asks for runai-model-streamer[s3,gcs,azure]>=0.15.7). On a file system the
# script needs the standard library alone, so no S3 client is made.
SYNC_LAUNCHER = (f'import sys; sys.path.insert(0, "{SYNC_DIR}"); import boto3, cache_sync; '
                 'sys.exit(cache_sync.main(sys.argv[1:], boto3.client("s3")))')
LOCAL_SYNC_LAUNCHER = (f'import sys; sys.path.insert(0, "{SYNC_DIR}"); import cache_sync; '
                       'sys.exit(cache_sync.main(sys.argv[1:], None))')
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
ENGINE_VERSION_TAG = re.compile(r"^v?(\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class CompileCacheKey:
    """The inputs a cache belongs to; any change starts cold in another directory."""

    model_id: str
    revision: str
    image_tag: str
    image_digest: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_product: str  # nvidia.com/gpu.product, e.g. NVIDIA-H100-80GB-HBM3
    engine_flags: tuple[str, ...]  # the `vllm serve` arguments the cache was compiled with
    # Not inputs of the key: whose cache this is (models[].name: on S3 the prefix is the model's own, so its
    # producer's role writes no other model's cache even where two models share every input), where the pods see
    # the cache's storage (the weights mount's compile-cache directory, or SHARED_MOUNT for the model's own claim)
    # and that claim (None: the weights claim).
    model_name: str = ""
    mount_root: str = f"{engine.MODELS_MOUNT}/{CACHE_ROOT_DIR}"
    claim_name: str | None = None
    in_bucket: bool = False  # S3: an object prefix in the weights bucket (object_prefix), no volume

    def problems(self) -> list[str]:
        """Why this key cannot name a cache (an input is missing or not pinned); [] when it can."""
        found = []
        if not COMMIT_SHA.match(self.revision):
            found.append(f"revision {self.revision!r} is not a 40-character commit SHA: a branch or tag can move "
                         "to other weights under the same name")
        if not ENGINE_VERSION_TAG.match(self.image_tag):
            found.append(f"image tag {self.image_tag!r} carries no engine version (vX.Y.Z)")
        if not self.gpu_product or self.gpu_product == "unknown":
            found.append("the GPU product is unknown (nvidia.com/gpu.product)")
        if self.pipeline_parallel_size > 1:
            found.append("multi-node groups (pipelineParallelSize > 1) are not wired for the shared cache yet")
        return found

    @property
    def engine_version(self) -> str:
        match = ENGINE_VERSION_TAG.match(self.image_tag)
        if match is None:
            raise ValueError("; ".join(self.problems()))
        return match.group(1)

    @property
    def flags_digest(self) -> str:
        return hashlib.sha256("\0".join(self.engine_flags).encode()).hexdigest()[:12]

    def relative_dir(self) -> str:
        """The cache's directory under the cache root, readable by a person: model/revision/engine/layout."""
        if self.problems():
            raise ValueError("; ".join(self.problems()))
        image = f"vllm-{self.engine_version}" + (f"-{self.image_digest.split(':')[-1][:12]}" if self.image_digest
                                                 else "")
        layout = f"tp{self.tensor_parallel_size}-{self.gpu_product}-{self.flags_digest}"
        return f"{self.model_id}/{self.revision}/{image}/{layout}"

    def mounted_dir(self) -> str:
        """The same directory as the pods see it."""
        return f"{self.mount_root}/{self.relative_dir()}"

    def object_prefix(self) -> str:
        """S3: the cache's prefix in the weights bucket, `compile-cache/<model>/<key>/`, beside the revisions'
        `<model id>/<revision>/`: one model's producer role is scoped to it (buckets.compile_cache_writer_policy)."""
        if not self.model_name or "/" in self.model_name:
            raise ValueError(f"an S3 compile cache needs the model's name, got {self.model_name!r}")
        return f"{CACHE_ROOT_DIR}/{self.model_name}/{self.relative_dir()}/"

    def volume_mounts(self, *, writable: bool) -> list[dict]:
        """The transfer script and, on EFS, the model's own cache claim (at SHARED_MOUNT, read-only unless
        `writable`: the producer)."""
        script = {"name": SYNC_VOLUME, "mountPath": SYNC_DIR, "readOnly": True}
        if self.in_bucket or self.claim_name is None:
            return [script]
        return [{"name": "compile-cache", "mountPath": SHARED_MOUNT, "readOnly": not writable}, script]

    def volumes(self, *, writable: bool) -> list[dict]:
        script = {"name": SYNC_VOLUME, "configMap": {"name": sync_configmap_name()}}
        if self.in_bucket or self.claim_name is None:
            return [script]
        return [{"name": "compile-cache",
                 "persistentVolumeClaim": {"claimName": self.claim_name, "readOnly": not writable}}, script]

    def job_name(self, model_name: str) -> str:
        digest = hashlib.sha256(self.relative_dir().encode()).hexdigest()[:10]
        return f"{model_name}-compile-{digest}"


def vllm_compile_dir() -> str:
    """Where vLLM reads and writes its artifacts in a pod (VLLM_CACHE_ROOT, engine.writable_paths_env)."""
    return f"{engine.CACHE_MOUNT}/vllm/{VLLM_COMPILE_SUBDIR}"


def sync_configmap_name() -> str:
    """Named after its content: a new transfer script is a new ConfigMap, and a new pod template."""
    return f"{SYNC_VOLUME}-{hashlib.sha256(SYNC_SOURCE.encode()).hexdigest()[:10]}"


def sync_configmap(namespace: str) -> dict[str, Any]:
    """cache_sync.py for the seed and the producer, immutable."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": sync_configmap_name(), "namespace": namespace,
                         "labels": {"app.kubernetes.io/component": PRODUCER_COMPONENT,
                                    "app.kubernetes.io/part-of": "llm-serving"}},
            "data": {"cache_sync.py": SYNC_SOURCE}, "immutable": True}


def sync_function(key: CompileCacheKey) -> str:
    """The shell function `sync <command> [args]`: one cache_sync.py call; on S3 against the key's prefix in
    the bucket the pod is given in BUCKET_ENV."""
    if not key.in_bucket:
        return f"sync() {{ {shlex.join(['python3', '-c', LOCAL_SYNC_LAUNCHER])} \"$@\"; }}"
    launcher = shlex.join(["python3", "-c", SYNC_LAUNCHER])
    return (f"sync() {{ command=$1; shift; {launcher} \"$command\" \"${BUCKET_ENV}\" "
            f"{shlex.quote(key.object_prefix())} \"$@\"; }}")


def seed_script(key: CompileCacheKey) -> str:
    """Copy a finished shared cache into the pod's own cache volume when every file matches its manifest
    (cache_sync.seed_dir, cache_sync.seed); without one, or on any difference, copy nothing and say why (vLLM
    compiles). The marker is written last by the producer, so a half-written copy is never seeded."""
    local = shlex.quote(vllm_compile_dir())
    if key.in_bucket:
        return f"{sync_function(key)}\nsync seed {local}"
    return f"{sync_function(key)}\nsync seed-dir {shlex.quote(key.mounted_dir())} {local}"


def seed_init_container(key: CompileCacheKey, image: str, env: list[dict]) -> dict:
    """The serving pod's init container: the cache read-only (the weights mount only where the cache lives on
    it), its own cache volume writable."""
    return {
        "name": SEED_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", seed_script(key)],
        "env": env,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "securityContext": engine.container_security_context(),
        "volumeMounts": [
            *([{"name": "weights", "mountPath": engine.MODELS_MOUNT, "readOnly": True}]
              if not key.in_bucket and key.claim_name is None else []),
            *key.volume_mounts(writable=False),
            {"name": "cache", "mountPath": engine.CACHE_MOUNT},
            {"name": "tmp", "mountPath": engine.TMP_MOUNT},
        ],
    }


def producer_args(serving_args: list[str]) -> list[str]:
    """The serving pod's `vllm serve` arguments for the producer: the same flags (so vLLM's hash is the
    serving pods'), listening on loopback only (the Job has no API key), without the chat template
    (a ConfigMap file only serving pods mount; the frontend reads it, the compiled graph does not)."""
    args: list[str] = []
    skip = False
    for arg in serving_args:
        if skip:
            skip = False
            continue
        if arg == "--chat-template":
            skip = True
            continue
        args.append(arg)
    return [*args, "--host", "127.0.0.1"]


# How often a producer that finds another writer's lock looks again.
LOCK_POLL_SECONDS = 30


def producer_script(key: CompileCacheKey, serving_args: list[str], stale_lock_seconds: int,
                    poll_seconds: float = LOCK_POLL_SECONDS) -> str:
    """One writer: an exclusive `mkdir` lock (atomic on NFS and Lustre), a vLLM start until /health
    answers (compile and graph capture done), then its artifacts copied with their SHA-256 manifest (written
    last, cache_sync.publish_dir), renamed into place and marked after that.

    The lock goes with the writer on every exit it can see (EXIT, TERM, INT: the shell is the pod's PID 1,
    which ignores a signal it does not trap). A writer killed outright (SIGKILL after the grace period,
    OOM, a lost node) leaves it behind, so a lock older than `stale_lock_seconds` (the Job's deadline
    and a margin: no writer of this Job lives longer) is broken instead of refusing every later writer.
    A producer that finds a live writer's lock waits for it, every `poll_seconds`: until the cache is marked
    (the other writer's work serves), the lock is released (a writer that failed: this one takes over) or goes
    stale, within its own Job's deadline. Exiting at once failed the Job within seconds (its backoff limit) and
    with it the `up` (issue #42). A lock without its `started` file yet (a writer between mkdir and date) is as
    old as the directory.

    A cache counts as produced only with its manifest: one marked before manifests existed (which every seed
    now refuses) is produced again.
    """
    if key.in_bucket:
        return s3_producer_script(key, serving_args, stale_lock_seconds, poll_seconds)
    final = shlex.quote(key.mounted_dir())
    lock = shlex.quote(key.mounted_dir() + ".lock")
    staging = shlex.quote(key.mounted_dir() + ".partial")
    return "\n".join([
        "set -eu",
        sync_function(key),
        f"produced() {{ [ -f {final}/{COMPLETE_MARKER} ] && [ -f {final}/{MANIFEST} ]; }}",
        "if produced; then echo 'compile cache already produced'; exit 0; fi",
        f"mkdir -p \"$(dirname {final})\"",
        "said=",
        f"until mkdir {lock} 2>/dev/null; do",
        "  if produced; then echo 'compile cache produced by another writer'; exit 0; fi",
        # An empty read (the writer between creating and filling the file) counts as the directory's age too.
        f"  started=$(cat {lock}/started 2>/dev/null || true)",
        f"  [ -n \"$started\" ] || started=$(stat -c %Y {lock} 2>/dev/null || date +%s)",
        f"  if [ $(( $(date +%s) - started )) -gt {stale_lock_seconds} ]; then",
        f"    echo 'breaking a stale lock on {key.relative_dir()} (its writer is past its deadline)'",
        f"    rm -rf {lock}",
        "    continue",
        "  fi",
        f"  [ -n \"$said\" ] || echo 'another writer holds {key.relative_dir()}.lock: waiting for it'",
        "  said=1",
        f"  sleep {poll_seconds:g}",
        "done",
        # Written whole, then renamed: a waiter reads the old time, none or the new one, never a part.
        f"date +%s > {lock}/started.tmp && mv {lock}/started.tmp {lock}/started",
        "pid=",
        f"trap 'rm -rf {lock}' EXIT",
        *_serve_until_healthy(serving_args),
        f"rm -rf {staging}",
        f"sync publish-dir {shlex.quote(vllm_compile_dir())} {staging}",
        # One command a line: `set -e` is ignored for every command of an AND-OR list but the last (POSIX.1-2017,
        # Shell Command Language, "set -e"), so `rm && mv && touch` went on to say "produced" after a failed mv.
        f"rm -rf {final}",
        f"mv {staging} {final}",
        f"touch {final}/{COMPLETE_MARKER}",
        f"echo 'compile cache produced: {key.relative_dir()}'",
    ])


# The shell is the pod's PID 1, which ignores a signal it has no handler for (pid_namespaces(7)): without
# this trap a TERM would wait for the SIGKILL, and the EXIT trap (the lock's release) would never run.
TERM_TRAP = "trap '[ -n \"$pid\" ] && kill -TERM \"$pid\" 2>/dev/null; exit 143' TERM INT"


def _serve_until_healthy(serving_args: list[str], *, trap: bool = True) -> list[str]:
    """Start vLLM in the background, wait for /health (compile and graph capture done), stop it.
    `trap`: set TERM_TRAP first (unless the caller already did)."""
    serve = shlex.join(["vllm", "serve", *producer_args(serving_args)])
    health = f"http://127.0.0.1:{engine.PORT}/health"
    return [
        *([TERM_TRAP] if trap else []),
        f"{serve} &",
        "pid=$!",
        f"until python3 -c 'import urllib.request; urllib.request.urlopen(\"{health}\", timeout=5)' 2>/dev/null; do",
        "  kill -0 \"$pid\" 2>/dev/null || { echo 'vLLM exited before it was ready'; exit 1; }",
        "  sleep 10",
        "done",
        "kill -TERM \"$pid\"; wait \"$pid\" || true",
    ]


def s3_producer_script(key: CompileCacheKey, serving_args: list[str], stale_lock_seconds: int,
                       poll_seconds: float = LOCK_POLL_SECONDS) -> str:
    """The producer on S3 (cache_sync.py): nothing to do when the marker is there; else the lock (a
    conditional write; a stale one taken over by its ETag), vLLM until /health, every artifact uploaded
    with its checksum, the manifest marker last, and the lock released on every exit the shell sees. Another
    writer's live lock is waited for, as on a file system (producer_script)."""
    return "\n".join([
        "set -eu",
        sync_function(key),
        "state=$(sync state)",
        "if [ \"$state\" = produced ]; then echo 'compile cache already produced'; exit 0; fi",
        # The lock names its holder (the pod; the runtime sets HOSTNAME) for whoever reads it in the bucket.
        f"until etag=$(sync lock \"${{HOSTNAME:-{PRODUCER_COMPONENT}}}\" {stale_lock_seconds}); do",
        # Only a held lock is waited for (cache_sync.EXIT_HELD); an error (access denied, no conditional writes)
        # stops the producer at once.
        f"  rc=$?; [ \"$rc\" -eq {EXIT_HELD} ] || exit \"$rc\"",
        "  state=$(sync state)",
        "  if [ \"$state\" = produced ]; then echo 'compile cache produced by another writer'; exit 0; fi",
        f"  sleep {poll_seconds:g}",
        "done",
        "pid=",
        "trap 'sync unlock \"$etag\"' EXIT",
        TERM_TRAP,  # from here on a TERM exits through the EXIT trap, which releases the lock
        # Asked again under the lock: a writer that marked it between the first look and this lock has
        # finished (and released), and nothing would be gained by compiling again.
        "state=$(sync state)",
        "if [ \"$state\" = produced ]; then echo 'compile cache produced meanwhile'; exit 0; fi",
        *_serve_until_healthy(serving_args, trap=False),
        f"sync publish {shlex.quote(vllm_compile_dir())} \"$etag\"",
    ])


def producer_network_policy(namespace: str, object_storage_egress: list[dict] | None = None) -> dict[str, Any]:
    """The producer Jobs' fence: no ingress (their engine listens on loopback only) and, like the serving
    pods, DNS as the only egress; the weights and the cache come through the node's NFS mount, which
    NetworkPolicies do not see. On S3 also `object_storage_egress` (the Pod Identity agent and S3 over
    HTTPS, as the serving pods)."""
    selector = {"app.kubernetes.io/component": PRODUCER_COMPONENT}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": PRODUCER_COMPONENT, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                       *(object_storage_egress or [])],
        },
    }
