"""Images already on the node and compile caches that travel with the revision: the pre-pull DaemonSet, the
compile cache's key, its seeding and its single producer, as pure builders and as prod renders them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from llm_serving.serving import CompileCacheKey, Footprint, Timing, image_pull_term, plan, prepull_daemonset
from llm_serving.serving.capacity import compile_cache_hit_seconds
from llm_serving.serving.compile_cache import (
    producer_args,
    producer_script,
    seed_script,
    sync_configmap_name,
    sync_function,
)
from llm_serving.serving.rollout import replica_add_seconds
from llm_serving.stack import planning
from llm_serving.stack import timing as stack_timing
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file

SHA = "1605565b47bb9346c5515c34102e054115b4f98b"


def _prod_key():
    config = load_stack_file(stack_file_path("prod"))[1]
    key = planning.compile_cache_wiring(config, config.models[0])
    assert key is not None
    return key


# The directory is named after everything the cache depends on (compile_cache.CompileCacheKey): the weights,
# the engine version, TP and GPU, and a digest of the engine flags.
PROD_KEY = _prod_key()
CACHE = PROD_KEY.mounted_dir()
assert CACHE.startswith(f"/var/lib/llm-serving/compile-cache/meta-llama/Llama-3.1-70B-Instruct/{SHA}/vllm-0.33.0/"
                        "tp4-NVIDIA-H100-80GB-HBM3-")
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
                        "readOnlyRootFilesystem": True, "runAsNonRoot": True}
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 2000, "fsGroup": 2000,
                  "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}


def key(**changes) -> CompileCacheKey:
    values = {"model_id": "meta-llama/Llama-3.1-70B-Instruct", "revision": SHA, "image_tag": "v0.33.0",
              "image_digest": None, "tensor_parallel_size": 4, "pipeline_parallel_size": 1,
              "gpu_product": "NVIDIA-H100-80GB-HBM3", "engine_flags": ("16384", "0.92"), "model_name": "llama-70b"}
    return CompileCacheKey(**{**values, **changes})


# --- the pre-pull DaemonSet ---------------------------------------------------------------------------


def test_prepull_pulls_each_image_once_in_init_containers_and_holds_it_with_a_sleeper():
    spec = prepull_daemonset(namespace="llm-serving", images=["vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.33.0",
                                                              "vllm/vllm-openai:v0.32.0"],
                             node_selector={"role": "gpu"}, tolerations=[])["spec"]["template"]["spec"]
    assert [(c["name"], c["image"], c["command"]) for c in spec["initContainers"]] == [
        ("pull-0", "vllm/vllm-openai:v0.32.0", ["/bin/sh", "-c", "exit 0"]),
        ("pull-1", "vllm/vllm-openai:v0.33.0", ["/bin/sh", "-c", "exit 0"]),
    ]
    assert [(c["name"], c["image"], c["command"]) for c in spec["containers"]] == [
        ("hold-0", "vllm/vllm-openai:v0.32.0", ["sleep", "infinity"]),
        ("hold-1", "vllm/vllm-openai:v0.33.0", ["sleep", "infinity"]),
    ]


def test_prepull_refuses_no_images():
    with pytest.raises(ValueError, match="at least one image"):
        prepull_daemonset(namespace="x", images=[], node_selector={}, tolerations=[])


def test_the_prepull_and_producer_pods_are_fenced_before_they_run(rendered):
    prod = rendered["prod"]
    # The pre-pull pods: nothing in, nothing out (the kubelet pulls, not the pod).
    prepull = prod.manifest("NetworkPolicy", "llm-serving-image-prepull")
    selector = {"app.kubernetes.io/name": "image-prepull", "app.kubernetes.io/part-of": "llm-serving"}
    assert prepull["spec"] == {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress", "Egress"]}
    assert prod.manifest("DaemonSet", "llm-serving-image-prepull")["spec"]["template"]["metadata"]["labels"] == selector
    # The producer Jobs: no ingress, DNS only out, like the serving pods; and the Job waits for its fence.
    producer = prod.manifest("NetworkPolicy", "compile-cache")
    assert producer["spec"] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "compile-cache"}},
        "policyTypes": ["Ingress", "Egress"],
        "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}
    (job,) = [r for r in prod.resources if r["type"] == "kubernetes:batch/v1:Job" and "-compile-" in
              r["inputs"]["metadata"]["name"]]
    assert job["inputs"]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "compile-cache"
    assert "kubernetes:networking.k8s.io/v1:NetworkPolicy::compile-cache-network-policy" in \
        prod.wiring[f"kubernetes:batch/v1:Job::{job['name']}"]["dependsOn"]


def test_prod_renders_the_prepull_daemonset_restricted_on_the_gpu_nodes(rendered):
    daemonset = rendered["prod"].manifest("DaemonSet", "llm-serving-image-prepull")
    deployment = rendered["prod"].manifest("Deployment", "llama-70b")
    pod, serving = daemonset["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]
    image = serving["containers"][0]["image"]
    assert image == "vllm/vllm-openai:v0.33.0"
    assert [c["image"] for c in pod["initContainers"] + pod["containers"]] == [image, image]
    assert pod["nodeSelector"] == serving["nodeSelector"]
    assert pod["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert pod["securityContext"] == RESTRICTED_POD
    assert all(c["securityContext"] == RESTRICTED_CONTAINER for c in pod["initContainers"] + pod["containers"])
    assert all(c["resources"] == {"requests": {"cpu": "1m", "memory": "8Mi"},
                                  "limits": {"cpu": "10m", "memory": "16Mi"}}
               for c in pod["initContainers"] + pod["containers"])
    assert (pod["automountServiceAccountToken"], pod["enableServiceLinks"]) == (False, False)
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    # The `up` never waits for images to reach every node.
    assert daemonset["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


# --- the planner's image and compile terms ----------------------------------------------------------------


def test_image_term_is_zero_on_a_running_node_only_when_pre_pulled():
    warm = Timing(node_ready_seconds=300, image_pull_seconds=300, image_prepulled=True)
    cold = Timing(node_ready_seconds=300, image_pull_seconds=300)
    assert (image_pull_term(warm, new_node=False), image_pull_term(warm, new_node=True)) == (0, 300)
    assert (image_pull_term(cold, new_node=False), image_pull_term(cold, new_node=True)) == (300, 300)


def test_prod_70b_cold_start_with_and_without_a_compile_cache_hit():
    result = plan("meta-llama/Llama-3.1-70B-Instruct", _p5(), 16384, storage_read_mib_per_second=500)
    # 141 GB at 500 MiB/s (269 s) + 180 s engine start (67 s of it torch.compile) + 60 s graph capture.
    assert (result.cold_start_seconds, result.compile_seconds, result.compile_cached_seconds) == (510, 67, 10)
    assert result.cold_start_cached_seconds == 453
    # The startup probe keeps the cold figure: a key change always compiles.
    assert result.startup_budget_seconds == 1020
    assert compile_cache_hit_seconds(510, 0, 10) == 510  # --enforce-eager: nothing to load


def test_adding_a_replica_on_a_warm_node_with_a_cache_hit_takes_the_cold_start_alone():
    model = Footprint("m", 4, 2, 4, cold_start_seconds=510, cached_cold_start_seconds=453)
    timing = Timing(node_ready_seconds=300, image_pull_seconds=300, image_prepulled=True)
    assert replica_add_seconds(model, timing, needs_node=False) == 453 + 30
    assert replica_add_seconds(model, timing, needs_node=True) == 300 + 300 + 453 + 30


def _p5():
    from llm_serving.gpu import lookup_instance_type

    return lookup_instance_type("p5.48xlarge")


# --- the compile cache's key ------------------------------------------------------------------------------------


def test_key_directory_names_every_input():
    assert key().relative_dir() == (f"meta-llama/Llama-3.1-70B-Instruct/{SHA}/vllm-0.33.0/"
                                    "tp4-NVIDIA-H100-80GB-HBM3-7fadb4be04ff")
    assert key(image_digest="sha256:" + "ab" * 32).relative_dir().split("/")[3] == "vllm-0.33.0-abababababab"


@pytest.mark.parametrize("change", [{"revision": "0" * 40}, {"image_tag": "v0.34.0"}, {"tensor_parallel_size": 8},
                                    {"gpu_product": "NVIDIA-H200"}, {"engine_flags": ("32768", "0.92")}])
def test_a_change_of_any_input_is_another_directory_and_another_job(change):
    assert key(**change).relative_dir() != key().relative_dir()
    assert key(**change).job_name("llama-70b") != key().job_name("llama-70b")


def test_key_refuses_inputs_that_are_not_pinned():
    assert key(revision="main", image_tag="latest", gpu_product="unknown", pipeline_parallel_size=2).problems() == [
        "revision 'main' is not a 40-character commit SHA: a branch or tag can move to other weights under the same "
        "name",
        "image tag 'latest' carries no engine version (vX.Y.Z)",
        "the GPU product is unknown (nvidia.com/gpu.product)",
        "multi-node groups (pipelineParallelSize > 1) are not wired for the shared cache yet",
    ]
    with pytest.raises(ValueError, match="not a 40-character commit SHA"):
        key(revision="main").relative_dir()


def test_seed_copies_only_a_finished_cache_checked_against_its_manifest():
    # The check itself, against real files: test_compile_cache_manifest.py.
    script = seed_script(key()).splitlines()
    assert script == [sync_function(key()), f"sync seed-dir /models/compile-cache/{key().relative_dir()} "
                                            "/var/cache/vllm/vllm/torch_compile_cache"]
    assert "boto3" not in script[0]  # the vLLM image's Python alone on a file system


def test_producer_serves_on_loopback_without_the_chat_template():
    assert producer_args(["/models/m", "--chat-template", "/etc/vllm/chat-template.jinja", "--port", "8000"]) == [
        "/models/m", "--port", "8000", "--host", "127.0.0.1"]


def test_producer_takes_an_exclusive_lock_and_marks_the_cache_last():
    lines = producer_script(key(), ["/models/m"], stale_lock_seconds=3660).splitlines()
    final = "/models/compile-cache/" + key().relative_dir()
    assert lines[1] == sync_function(key())
    assert lines[2] == (f"produced() {{ [ -f {final}/.llm-serving-complete ] && "
                        f"[ -f {final}/.llm-serving-manifest.json ]; }}")
    assert lines[3] == "if produced; then echo 'compile cache already produced'; exit 0; fi"
    assert lines[6] == f"until mkdir {final}.lock 2>/dev/null; do"
    assert lines[10] == "  if [ $(( $(date +%s) - started )) -gt 3660 ]; then"
    # The files and their manifest (written last) into the staging directory, renamed into place, marked after.
    assert lines[-6:-1] == [f"rm -rf {final}.partial",
                            f"sync publish-dir /var/cache/vllm/vllm/torch_compile_cache {final}.partial",
                            f"rm -rf {final}", f"mv {final}.partial {final}", f"touch {final}/.llm-serving-complete"]


def _run_producer(tmp_path, *, vllm: str, lock_started: int | None = None, terminate: bool = False,
                  while_waiting=None):
    """The producer script under a real /bin/sh, its cache root moved under tmp_path and `vllm` a stand-in.
    `while_waiting(root, lock)`: called once the producer says it waits for another writer's lock."""
    root = tmp_path / "cache"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\n{vllm}\n")
    (bin_dir / "vllm").chmod(0o755)
    script = producer_script(key(), ["/models/m"], stale_lock_seconds=3660, poll_seconds=0.05).replace(
        "/models/compile-cache", str(root))
    lock = root / (key().relative_dir() + ".lock")
    if lock_started is not None:
        lock.mkdir(parents=True)
        # -1: a writer between creating its lock and filling `started` (an empty file).
        (lock / "started").write_text(f"{lock_started}\n" if lock_started >= 0 else "")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    process = subprocess.Popen(["/bin/sh", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    if terminate:
        # Wait until the writer holds the lock and runs vLLM, then stop it as the kubelet would.
        for _ in range(200):
            if (lock / "started").exists() and (tmp_path / "vllm-running").exists():
                break
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
    if while_waiting is not None:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first == f"another writer holds {key().relative_dir()}.lock: waiting for it\n"
        while_waiting(root, lock)
        out, _ = process.communicate(timeout=30)
        return process.returncode, first + out, lock
    out, _ = process.communicate(timeout=30)
    return process.returncode, out, lock


def first_writer_finishes(root, lock):
    """What a finished writer leaves: its directory, the manifest inside, the marker last."""
    final = root / key().relative_dir()
    final.mkdir(parents=True)
    (final / ".llm-serving-manifest.json").write_text("{}")
    (final / ".llm-serving-complete").touch()


def test_a_second_writer_waits_for_the_first_and_uses_its_cache(tmp_path):
    # The first writer marks its cache while the second waits: the second is done, with nothing to compile
    # (its vLLM stand-in would fail), and leaves the first writer's lock alone.
    code, out, lock = _run_producer(tmp_path, vllm="exit 1", lock_started=int(time.time()),
                                    while_waiting=first_writer_finishes)
    assert (code, lock.exists()) == (0, True)
    assert out.splitlines()[-1] == "compile cache produced by another writer"


def test_a_lock_whose_started_file_is_still_empty_counts_as_new(tmp_path):
    # An empty read is not "started at 0": the lock is as old as its directory (now), so nobody breaks it.
    code, out, lock = _run_producer(tmp_path, vllm="exit 1", lock_started=-1, while_waiting=first_writer_finishes)
    assert (code, lock.exists()) == (0, True)
    assert "breaking a stale lock" not in out


def test_a_second_writer_takes_over_when_the_first_gives_up(tmp_path):
    # The first writer failed and released its lock: the waiting one takes it and compiles itself.
    code, out, lock = _run_producer(tmp_path, vllm="exit 1", lock_started=int(time.time()),
                                    while_waiting=lambda root, lock: shutil.rmtree(lock))
    assert (code, lock.exists()) == (1, False)  # its own vLLM stand-in failed; its lock went with it
    assert out.splitlines()[-1] == "vLLM exited before it was ready"


def test_a_stale_lock_is_broken_and_every_exit_removes_the_writers_lock(tmp_path):
    # A writer killed outright left its lock an hour and more ago: the next one breaks it, runs vLLM (here
    # a stand-in that exits at once) and takes its lock away with it.
    code, out, lock = _run_producer(tmp_path, vllm="exit 1", lock_started=int(time.time()) - 3700)
    assert (code, lock.exists()) == (1, False)
    assert out.splitlines() == [f"breaking a stale lock on {key().relative_dir()} (its writer is past its deadline)",
                                "vLLM exited before it was ready"]


def test_a_cache_marked_without_a_manifest_is_produced_again(tmp_path):
    # Marked before manifests existed: every seed refuses it now, so the producer compiles (here its stand-in
    # fails) instead of calling it produced and leaving every replica to compile cold.
    final = tmp_path / "cache" / key().relative_dir()
    final.mkdir(parents=True)
    (final / ".llm-serving-complete").touch()
    code, out, _ = _run_producer(tmp_path, vllm="exit 1")
    assert (code, out) == (1, "vLLM exited before it was ready\n")


def test_a_terminated_writer_removes_its_lock(tmp_path):
    running = tmp_path / "vllm-running"
    code, _, lock = _run_producer(tmp_path, vllm=f"touch {running}; exec sleep 60", terminate=True)
    assert (code, lock.exists()) == (143, False)


# --- as prod renders it --------------------------------------------------------------------------------------------


SYNC_MOUNT = {"name": "compile-cache-sync", "mountPath": "/etc/llm-serving/compile-cache", "readOnly": True}


def test_prod_seeds_every_replica_from_its_models_read_only_cache_claim(rendered):
    spec = rendered["prod"].manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]
    (seed,) = spec["initContainers"]
    assert seed["name"] == "compile-cache-seed" and seed["image"] == "vllm/vllm-openai:v0.33.0"
    # The model's own cache claim, read-only, and the transfer script; not the weights (the cache has its own).
    assert seed["volumeMounts"] == [
        {"name": "compile-cache", "mountPath": "/var/lib/llm-serving/compile-cache", "readOnly": True}, SYNC_MOUNT,
        {"name": "cache", "mountPath": "/var/cache/vllm"}, {"name": "tmp", "mountPath": "/tmp"}]
    assert seed["command"][2].endswith(f"sync seed-dir {CACHE} /var/cache/vllm/vllm/torch_compile_cache")
    assert seed["securityContext"] == RESTRICTED_CONTAINER
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["compile-cache"] == {"name": "compile-cache", "persistentVolumeClaim": {
        "claimName": "llama-70b-compile-cache", "readOnly": True}}
    assert volumes["compile-cache-sync"] == {"name": "compile-cache-sync", "configMap": {"name": sync_configmap_name()}}
    vllm = spec["containers"][0]
    assert {"name": "VLLM_CACHE_ROOT", "value": "/var/cache/vllm/vllm"} in vllm["env"]
    assert [m["name"] for m in vllm["volumeMounts"]] == ["weights", "cache", "shm", "tmp"]  # never the shared cache
    # The pods start only once the script's ConfigMap and the model's cache claim exist.
    depends = rendered["prod"].wiring["kubernetes:apps/v1:Deployment::llama-70b-deployment"]["dependsOn"]
    assert {"kubernetes:core/v1:ConfigMap::compile-cache-sync",
            "kubernetes:core/v1:PersistentVolumeClaim::weights-storage-compile-cache-llama-70b-claim"} <= set(depends)


def test_prod_produces_the_cache_with_one_job_that_writes_only_its_models_cache_claim(rendered):
    job = rendered["prod"].manifest("Job", PROD_KEY.job_name("llama-70b"))
    spec = job["spec"]
    # Its deadline: a new node (300 s) and an image pull (300 s) at worst, then one start within the startup budget.
    config = load_stack_file(stack_file_path("prod"))[1]
    deadline = stack_timing.producer_timeouts(config, config.models[0]).deadline_seconds
    assert deadline == 300 + 300 + planning.model_plan(config, config.models[0]).startup_budget_seconds
    assert (spec["backoffLimit"], spec["podReplacementPolicy"], spec["activeDeadlineSeconds"]) == (2, "Failed",
                                                                                                  deadline)
    pod = spec["template"]["spec"]
    (writer,) = pod["containers"]
    assert pod["restartPolicy"] == "Never"
    assert writer["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert writer["volumeMounts"][0] == {"name": "weights", "mountPath": "/models", "readOnly": True}
    assert writer["volumeMounts"][-2:] == [
        {"name": "compile-cache", "mountPath": "/var/lib/llm-serving/compile-cache", "readOnly": False}, SYNC_MOUNT]
    assert "VLLM_API_KEY" not in [e["name"] for e in writer["env"]]
    assert " --tensor-parallel-size 4 " in writer["command"][2] and " --host 127.0.0.1 &" in writer["command"][2]
    assert pod["volumes"][-2] == {"name": "compile-cache", "persistentVolumeClaim": {
        "claimName": "llama-70b-compile-cache", "readOnly": False}}


def test_prod_cache_lives_on_its_models_own_efs_access_point_and_volume(rendered):
    # Per model, on a stack of two: tests/stacks/test_compile_cache_isolation.py.
    prod = rendered["prod"]
    point = prod.resource("aws:efs/accessPoint:AccessPoint", "weights-storage-compile-cache-llama-70b")["inputs"]
    assert point["rootDirectory"] == {"path": "/llm-serving-compile-cache/llama-70b", "creationInfo": {
        "ownerUid": 2000, "ownerGid": 2000, "permissions": "750"}}
    assert point["posixUser"] == {"uid": 2000, "gid": 2000}
    volume = prod.manifest("PersistentVolume", "llm-serving-llama-70b-compile-cache")["spec"]
    assert (volume["persistentVolumeReclaimPolicy"], volume["mountOptions"]) == ("Retain", ["tls", "iam"])
    # Neither retained nor protected: they hold no data, and a retained pair fails the next create of its names
    # (test_compile_cache_isolation.py). Mounted only once the policy that scopes the GPU nodes' writes is in force.
    urns = [f"kubernetes:core/v1:{kind}::weights-storage-compile-cache-llama-70b-{name}"
            for kind, name in (("PersistentVolume", "volume"), ("PersistentVolumeClaim", "claim"))]
    for urn in urns:
        assert (prod.wiring[urn]["retainOnDelete"], prod.wiring[urn]["protect"]) == (False, False), urn
    assert "aws:efs/fileSystemPolicy:FileSystemPolicy::weights-storage-policy" in prod.wiring[urns[0]]["dependsOn"]


# --- refusals at preview ----------------------------------------------------------------------------------


def test_shared_compile_cache_with_an_unpinned_revision_is_refused_at_preview():
    from tests.stacks.checks.test_model_checks import lines

    assert lines(revision="main", compileCache="shared", environment="dev") == [
        "llm-serving:models[llama-70b].compileCache: no shared compile cache: revision 'main' is not a 40-character "
        "commit SHA: a branch or tag can move to other weights under the same name (got \"shared\"; expected auto or "
        "off, or pin the missing input)"
    ]
    # auto falls back to off instead (plan --stack says why), and a pinned key passes.
    assert lines(revision="main", compileCache="auto", environment="dev") == []
    assert lines(compileCache="shared") == []


def test_the_producer_job_ignores_the_node_generation_so_a_node_update_leaves_it_alone(rendered):
    from llm_serving.gpu.scheduling import NODE_GENERATION_LABEL
    from llm_serving.serving import deployment

    assert deployment.NODE_GENERATION_LABEL == NODE_GENERATION_LABEL
    prod = rendered["prod"]
    (job,) = [m for m in prod.manifests if m["kind"] == "Job" and "-compile-" in m["metadata"]["name"]]
    served = prod.manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]["nodeSelector"]
    assert NODE_GENERATION_LABEL in served
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        k: v for k, v in served.items() if k != NODE_GENERATION_LABEL}
