"""Prod's serving objects as rendered: the Deployment's exact container, the weights claim and
Job, the Service and PDB, and how they are wired."""

from __future__ import annotations

import pytest

from llm_serving.serving import engine as vllm_engine
from llm_serving.serving import weights
from llm_serving.serving.compile_cache import sync_configmap_name
from llm_serving.stack import planning
from llm_serving.stack import timing as stack_timing
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file
from tests.support import reference

WRITABLE_PATH_ENV = (
    "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VLLM_CACHE_ROOT", "VLLM_ASSETS_CACHE",
    "VLLM_CONFIG_ROOT", "VLLM_RPC_BASE_PATH", "HF_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_HOME",
    "FLASHINFER_WORKSPACE_BASE", "CUDA_CACHE_PATH", "NUMBA_CACHE_DIR", "OUTLINES_CACHE_DIR", "DO_NOT_TRACK",
)
MODEL = "llama-70b"
REVISION = "1605565b47bb9346c5515c34102e054115b4f98b"
MODEL_PATH = f"/models/meta-llama/Llama-3.1-70B-Instruct/{REVISION}"


def prod_config():
    return load_stack_file(stack_file_path("prod"))[1]


def prod_model():
    (model,) = prod_config().models
    return model


def deployment(rendered, stack="prod"):
    return rendered[stack].manifest("Deployment", MODEL)


def container(rendered, stack="prod"):
    (only,) = deployment(rendered, stack)["spec"]["template"]["spec"]["containers"]
    return only


def test_prod_container_args_are_the_seeds_flags_with_tp_from_the_planner(rendered):
    args = container(rendered)["args"]
    assert args == [
        MODEL_PATH,
        "--served-model-name", MODEL,
        "--max-model-len", "16384",
        "--gpu-memory-utilization", "0.92",
        "--tensor-parallel-size", "4",
        "--kv-cache-dtype", "auto",
        "--max-num-seqs", "256",
        "--max-num-batched-tokens", "8192",
        "--enable-prefix-caching",
        "--port", "8000",
        # The stream bound: 16,384 tokens at the 0.1 s ITL objective after the 2 s TTFT, plus 10 %.
        "--shutdown-timeout", "1805",
        "--sse-keep-alive-interval", "15",
        # The planner's CPU KV tier (GiB summed over the 4 ranks): half of what the pod's memory limit leaves
        # after the engine and /dev/shm's transport, in vLLM's native offloading.
        "--kv-offloading-size", "428",
        "--kv-offloading-backend", "native",
    ]
    config = prod_config()
    assert planning.kv_offload_gib(config, config.models[0]) == 428


def test_every_emitted_flag_exists_in_the_pinned_vllm(rendered):
    for stack in ("dev", "prod", "staging"):
        for doc in rendered[stack].manifests:
            if doc["kind"] == "Deployment":
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    if c["image"].startswith("vllm/vllm-openai:"):
                        assert reference.vllm_flag_errors(c["args"]) == []


def test_image_is_pinned_to_the_reference_vllm_version(rendered):
    assert container(rendered)["image"] == "vllm/vllm-openai:v0.33.0"
    assert reference.pinned_versions()["vllm/vllm-openai image"] == "v0.33.0"


def test_probes_startup_budget_from_planner_and_lenient_liveness(rendered):
    c = container(rendered)
    health = {"path": "/health", "port": "http"}
    # The planner's startup budget (its cold start, which includes filling the CPU KV tier, x 2) in 10 s periods.
    budget = planning.model_plan(prod_config(), prod_model()).startup_budget_seconds
    assert budget % 10 == 0
    assert c["startupProbe"] == {"httpGet": health, "periodSeconds": 10, "failureThreshold": budget // 10,
                                 "timeoutSeconds": 5}
    # A saturated engine answers slowly: 50 s of slow or failed answers before it leaves the pool.
    assert c["readinessProbe"] == {"httpGet": health, "periodSeconds": 10, "failureThreshold": 5,
                                   "timeoutSeconds": 10}
    assert c["livenessProbe"] == {"httpGet": health, "periodSeconds": 15, "failureThreshold": 6, "timeoutSeconds": 10}


def test_volumes_weights_read_only_cache_per_pod_and_shm_sized_for_tp(rendered):
    spec = deployment(rendered)["spec"]["template"]["spec"]
    config = prod_config()
    # /dev/shm holds the TP workers' transport (16 GiB at TP 4) and the CPU KV tier, which vLLM maps from there.
    tier = planning.kv_offload_gib(config, config.models[0])
    shm = vllm_engine.shm_size_gib(4) + tier
    assert (vllm_engine.shm_size_gib(4), tier, planning.host_memory(config, config.models[0]).shm_gib) == (16, 428, shm)
    assert container(rendered)["volumeMounts"] == [
        {"mountPath": "/models", "name": "weights", "readOnly": True},
        {"mountPath": "/var/cache/vllm", "name": "cache"},
        {"mountPath": "/dev/shm", "name": "shm"},
        {"mountPath": "/tmp", "name": "tmp"},
    ]
    assert spec["volumes"] == [
        # EFS: the read-only claim through the model's own access point, not the claim the Job writes.
        {"name": "weights", "persistentVolumeClaim": {"claimName": f"{MODEL}-weights-ro", "readOnly": True}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Gi"}},
        {"name": "cache", "emptyDir": {"sizeLimit": "20Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
        # Only the compile cache's seed mounts them: the model's own cache claim, read-only, and the script that
        # checks it (test_warm_start.py).
        {"name": "compile-cache", "persistentVolumeClaim": {"claimName": f"{MODEL}-compile-cache", "readOnly": True}},
        {"name": "compile-cache-sync", "configMap": {"name": sync_configmap_name()}},
    ]
    env = {e["name"]: e for e in container(rendered)["env"]}
    assert env["HF_HUB_OFFLINE"]["value"] == "1"
    assert env["VLLM_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}


def test_every_path_the_engine_writes_is_on_a_writable_volume(rendered):
    env = {e["name"]: e.get("value") for e in container(rendered)["env"]}
    assert {name: env[name] for name in WRITABLE_PATH_ENV} == {
        "HOME": "/var/cache/vllm",
        "USER": "vllm",
        "LOGNAME": "vllm",
        "TMPDIR": "/tmp",
        "XDG_CACHE_HOME": "/var/cache/vllm/.cache",
        "XDG_CONFIG_HOME": "/var/cache/vllm/.config",
        "VLLM_CACHE_ROOT": "/var/cache/vllm/vllm",
        "VLLM_ASSETS_CACHE": "/var/cache/vllm/vllm/assets",
        "VLLM_CONFIG_ROOT": "/var/cache/vllm/.config/vllm",
        "VLLM_RPC_BASE_PATH": "/tmp",
        "HF_HOME": "/var/cache/vllm/.cache/huggingface",
        "TORCHINDUCTOR_CACHE_DIR": "/var/cache/vllm/torchinductor",
        "TRITON_HOME": "/var/cache/vllm",
        "FLASHINFER_WORKSPACE_BASE": "/var/cache/vllm/flashinfer",
        "CUDA_CACHE_PATH": "/var/cache/vllm/.nv/ComputeCache",
        "NUMBA_CACHE_DIR": "/tmp/numba",
        "OUTLINES_CACHE_DIR": "/tmp/outlines",
        "DO_NOT_TRACK": "1",
    }
    writable = [m["mountPath"] for m in container(rendered)["volumeMounts"] if not m.get("readOnly")]
    for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VLLM_CACHE_ROOT", "VLLM_ASSETS_CACHE",
                 "VLLM_CONFIG_ROOT", "VLLM_RPC_BASE_PATH", "HF_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_HOME",
                 "FLASHINFER_WORKSPACE_BASE", "CUDA_CACHE_PATH", "NUMBA_CACHE_DIR", "OUTLINES_CACHE_DIR"):
        assert any(env[name] == path or env[name].startswith(path + "/") for path in writable), name


def test_resources_selectors_and_tolerations(rendered):
    spec = deployment(rendered)["spec"]["template"]["spec"]
    assert container(rendered)["resources"] == {
        "requests": {"cpu": "86", "memory": "921Gi", "nvidia.com/gpu": "4"},
        "limits": {"memory": "921Gi", "nvidia.com/gpu": "4"},
    }
    assert spec["nodeSelector"] == {
        "llm-serving/node-group": "gpu-p5-48xlarge",
        # The node generation: after a node update the pods roll onto the new group before the old goes.
        "llm-serving/node-generation": "8fff7a3ae2",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    assert spec["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    # Cluster Autoscaler never drains a node to move a loading or serving replica; the key's revision
    # (a secret digest) rolls the pods when the key changes.
    assert deployment(rendered)["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "llm-serving.dev/api-key-revision": "[secret]"}
    # The Deployment waits for its node group (through the selector's dependency).
    wiring = rendered["prod"].wiring[f"kubernetes:apps/v1:Deployment::{MODEL}-deployment"]
    assert "aws:eks/nodeGroup:NodeGroup::gpu-p5-48xlarge-node-group" in wiring["dependsOn"]


def test_drain_lets_streams_finish(rendered):
    spec = deployment(rendered)["spec"]["template"]["spec"]
    args = container(rendered)["args"]
    shutdown = int(args[args.index("--shutdown-timeout") + 1])
    assert container(rendered)["lifecycle"] == {
        "preStop": {"exec": {"command": ["sleep", str(vllm_engine.PRE_STOP_SECONDS)]}}}
    # SIGKILL only after the preStop and vLLM's whole drain, which holds the model's stream bound.
    assert spec["terminationGracePeriodSeconds"] == vllm_engine.termination_grace_seconds(shutdown)
    assert spec["terminationGracePeriodSeconds"] > vllm_engine.PRE_STOP_SECONDS + shutdown
    assert shutdown >= stack_timing.stream_seconds(prod_model())
    assert deployment(rendered)["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_pod_runs_under_the_restricted_profile_with_a_read_only_root(rendered):
    spec = deployment(rendered)["spec"]["template"]["spec"]
    assert container(rendered)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "runAsGroup": 2000,
        "fsGroup": 2000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_service_is_not_named_vllm_and_selects_the_pods(rendered):
    service = rendered["prod"].manifest("Service", MODEL)
    pod_labels = deployment(rendered)["spec"]["template"]["metadata"]["labels"]
    assert service["metadata"]["name"] != "vllm"
    assert all(pod_labels[k] == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    pdb = rendered["prod"].manifest("PodDisruptionBudget", MODEL)
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": service["spec"]["selector"]}}


def test_weights_claim_is_retained_and_protected_in_prod_only(rendered):
    for stack, protected in (("prod", True), ("staging", False)):
        wiring = rendered[stack].wiring[f"kubernetes:core/v1:PersistentVolumeClaim::{MODEL}-weights-claim"]
        assert wiring["retainOnDelete"] is True
        assert wiring["protect"] is protected
    claim = rendered["prod"].manifest("PersistentVolumeClaim", f"{MODEL}-weights")
    # Our EFS class; the size is EFS's ignored placeholder, the same for every model, so a smaller
    # checkpoint never shrinks (and Pulumi never replaces) the claim.
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "llm-serving-weights",
        "resources": {"requests": {"storage": "1024Gi"}},
    }


def test_staging_job_downloads_the_pinned_revision_into_its_own_directory(rendered):
    (job,) = [m for m in rendered["prod"].manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    assert job["metadata"]["name"].startswith(f"{MODEL}-stage-")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["MODEL_ID"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert env["REVISION"] == REVISION
    assert env["TARGET"] == MODEL_PATH
    # The token is a file huggingface_hub reads through HF_TOKEN_PATH, never an env value.
    assert "HF_TOKEN" not in env
    assert env["HF_TOKEN_PATH"] == "/var/run/secrets/huggingface/token"
    assert env["HOME"] == "/home/stage"
    assert env["HF_HOME"] == "/home/stage/huggingface"
    assert env["TMPDIR"] == "/tmp"
    pod = job["spec"]["template"]["spec"]
    # The hashed lock huggingface_hub is installed from, in a ConfigMap named after its content.
    requirements = f"{MODEL}-stage-requirements-{weights.requirements_configmap_name(MODEL).rsplit('-', 1)[1]}"
    assert c["image"] == ("python:3.12.8-slim-bookworm"
                          "@sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0")
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "eks.amazonaws.com/nodegroup": "llm-prod-cpu"}
    assert c["volumeMounts"] == [
        {"mountPath": "/etc/stage", "name": "requirements", "readOnly": True},
        {"mountPath": "/models", "name": "weights"},
        {"mountPath": "/home/stage", "name": "home"},
        {"mountPath": "/tmp", "name": "tmp"},
        {"mountPath": "/var/run/secrets/huggingface", "name": "hf-token", "readOnly": True},
    ]
    assert pod["volumes"] == [
        {"name": "requirements", "configMap": {"name": requirements}},
        {"name": "weights", "persistentVolumeClaim": {"claimName": f"{MODEL}-weights"}},
        {"name": "home", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "hf-token", "secret": {"secretName": "hf-token", "items": [{"key": "token", "path": "token"}],
                                        "defaultMode": 0o440}},
    ]  # fmt: skip
    assert c["securityContext"] == container(rendered)["securityContext"]
    assert pod["securityContext"] == deployment(rendered)["spec"]["template"]["spec"]["securityContext"]
    script = c["command"][2]
    assert "token = None" in script and "HF_TOKEN\"" not in script
    # Re-running the same revision does nothing; the marker is written only after the download.
    assert script.index(vllm_engine.COMPLETE_MARKER) < script.index("snapshot_download")
    assert script.rindex(vllm_engine.COMPLETE_MARKER) > script.rindex("snapshot_download")
    # huggingface_hub comes from the hashed lock, installed before the download starts.
    assert script.index("--require-hashes") < script.index("snapshot_download")


def test_serving_waits_for_the_staged_weights_with_timeouts_above_the_budget(rendered):
    wiring = rendered["prod"].wiring
    deploy = wiring[f"kubernetes:apps/v1:Deployment::{MODEL}-deployment"]
    assert f"kubernetes:batch/v1:Job::{MODEL}-weights-stage" in deploy["dependsOn"]
    assert int(deploy["customTimeouts"]["create"].removesuffix("s")) >= 1020
    assert deploy["customTimeouts"]["create"] == deploy["customTimeouts"]["update"]


def test_staging_serves_prods_model_and_flags_with_one_replica(rendered):
    assert container(rendered, "staging")["args"] == container(rendered)["args"]
    assert deployment(rendered, "staging")["spec"]["replicas"] == 1
    assert deployment(rendered)["spec"]["replicas"] == 2


def test_dev_serves_a_small_model_on_one_gpu(rendered):
    c = rendered["dev"].manifest("Deployment", "llama-8b")["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "1"


def test_chat_template_and_separate_tokenizer_revision_are_mounted_and_passed():
    # ServingStack on the component tier, on a cluster that runs everything: the model's own objects, little else.
    from llm_serving.stack.stack import ServingStack
    from tests.support.components import EXISTING_EVERYTHING, run, stack_args

    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (model,) = EXISTING_EVERYTHING["models"]
    args = stack_args(EXISTING_EVERYTHING, models=[{**model, "chatTemplate": template, "tokenizerRevision": "a" * 40}])
    result = run(lambda: ServingStack("llm-serving", args))
    configmap = result.manifest("ConfigMap", "llama-8b-chat-template")
    assert configmap["data"] == {"chat-template.jinja": template}
    spec = result.manifest("Deployment", "llama-8b")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    tokenizer = "/models/meta-llama/Llama-3.1-8B-Instruct/tokenizer-" + "a" * 40
    assert c["args"][-4:] == ["--tokenizer", tokenizer, "--chat-template", vllm_engine.CHAT_TEMPLATE_PATH]
    assert {"name": "chat-template", "configMap": {"name": "llama-8b-chat-template"}} in spec["volumes"]
    assert {
        "name": "chat-template",
        "mountPath": vllm_engine.CHAT_TEMPLATE_PATH,
        "subPath": "chat-template.jinja",
        "readOnly": True,
    } in c["volumeMounts"]
    # A subPath mount never sees the ConfigMap change: the template's digest on the pod template rolls the pods.
    annotations = result.manifest("Deployment", "llama-8b")["spec"]["template"]["metadata"]["annotations"]
    assert annotations[vllm_engine.CHAT_TEMPLATE_ANNOTATION] == vllm_engine.chat_template_annotation(template)[
        vllm_engine.CHAT_TEMPLATE_ANNOTATION]
    assert vllm_engine.chat_template_annotation(template + " ") != vllm_engine.chat_template_annotation(template)
    assert vllm_engine.chat_template_annotation(None) == {}
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TOKENIZER_TARGET"] == tokenizer
    assert reference.vllm_flag_errors(c["args"]) == []
    assert [e for m in result.manifests for e in reference.kubernetes_object_errors(m, "1.34")] == []


def test_engine_waits_as_long_as_the_startup_probe_and_pulumi_waits_for_every_replica(rendered):
    env = {e["name"]: e.get("value") for e in container(rendered)["env"]}
    config, model = prod_config(), prod_model()
    budget = planning.model_plan(config, model).startup_budget_seconds
    # The engine core gives up no sooner than the startup probe does.
    assert int(env["VLLM_ENGINE_READY_TIMEOUT_S"]) == budget
    deploy = rendered["prod"].wiring[f"kubernetes:apps/v1:Deployment::{MODEL}-deployment"]
    # Kubernetes gives a stuck step at least the startup budget; Pulumi waits for every planned step and then
    # for Kubernetes to give up on the last one; a delete waits for the longest drain.
    deadline = deployment(rendered)["spec"]["progressDeadlineSeconds"]
    assert deadline == stack_timing.progress_deadline_seconds(config, model) > budget
    wait = stack_timing.rollout_await_seconds(config, model)
    assert wait >= stack_timing.planned_rollout_seconds(config, model) and wait > deadline
    delete = stack_timing.model_drains(config, model).delete_timeout_seconds
    assert delete > deployment(rendered)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert deploy["customTimeouts"] == {"create": f"{wait}s", "update": f"{wait}s", "delete": f"{delete}s"}


def test_network_policies_exist_before_the_weights_are_staged(rendered):
    fence = "kubernetes:networking.k8s.io/v1:NetworkPolicy::serving-netpol-weights-staging"
    for resource in (f"kubernetes:batch/v1:Job::{MODEL}-weights-stage",
                     f"kubernetes:core/v1:PersistentVolumeClaim::{MODEL}-weights-claim"):
        assert fence in rendered["prod"].wiring[resource]["dependsOn"]
    (job,) = [m for m in rendered["prod"].manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    assert job["metadata"]["annotations"] == {"pulumi.com/replaceUnready": "true"}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_envoys_two_proxies_spread_as_preferences_so_single_zone_dev_still_runs_both(rendered, stack):
    envoy = rendered[stack].manifest("EnvoyProxy", "llm-serving-proxy")["spec"]["provider"]["kubernetes"]
    constraints = envoy["envoyDeployment"]["pod"]["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["whenUnsatisfiable"]) for c in constraints] == [
        ("kubernetes.io/hostname", "ScheduleAnyway"), ("topology.kubernetes.io/zone", "ScheduleAnyway")]
    assert reference.custom_resource_errors(rendered[stack].manifest("EnvoyProxy", "llm-serving-proxy")) == []
