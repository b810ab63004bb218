"""Manifests of the accuracy gate (pure): the eval's ConfigMap (its program, settings and the harness's hashed lock),
the staging Job's (its program and locks), the staging Job that puts the task files and the harness's wheels on the
weights volume, the eval Job that installs the harness from the volume and runs the task set against the revisions,
and the eval pods' fence. llm_serving/verification/eval_job.py declares them; llm_serving/stack/evaluation.py says
what they hold.

Why two Jobs: the staging Job reaches the Hub and PyPI (the weights staging Jobs' fence: DNS and HTTPS) and holds no
API key; the eval Job holds the key and reaches only DNS and the vLLM pods (`eval_network_policy`), so a compromised
wheel at eval time has nowhere to send the key. Both run on the nodes that may mount the weights volume (the staging
nodes on EFS, whose file-system policy lets no other role mount it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .objects import (
    CONTAINER_SECURITY,
    EVAL_REQUIREMENTS,
    EVAL_SOURCE,
    KEY_DIR,
    TERMINATION_LOG,
    dns_egress,
    key_volume,
    one_shot_job,
    pod_security,
)

STAGE_EVAL_SOURCE = Path(__file__).with_name("stage_eval.py").read_text()

EVAL_ROOT = "/models/.eval"  # a dot directory on the weights volume: never a Hub repository's `<org>`
CONFIG_DIR = "/etc/eval"
HARNESS_MOUNT = "/opt/harness"  # the eval pod's emptyDir the harness is installed into
SCRATCH_MOUNT = "/tmp"
STAGE_HOME = "/home/stage"
STAGE_COMPONENT = {"app.kubernetes.io/component": "stage-weights"}  # the weights staging Jobs' fence selects it
# The eval pods' own fence (eval_network_policy), not the deploy gate's: the gate reaches the edge at any address on
# 443 (a load balancer's), which would let third-party code holding the API key send it anywhere.
EVAL_SELECTOR = {"app.kubernetes.io/component": "eval"}
# The harness's installed size (numpy, pandas, pyarrow, datasets, lm_eval) is a few hundred MiB.
HARNESS_GIB = 3
SCRATCH_GIB = 2
# Installing a few hundred MiB of wheels from the volume, and the pod's scheduling, on top of the run.
INSTALL_SECONDS = 300


@dataclass(frozen=True)
class EvalFile:
    """One task file to stage: from a dataset repository at a commit, checked against its pinned SHA-256."""

    dataset: str
    revision: str
    path: str
    sha256: str
    target: str

    def job_entry(self) -> dict[str, str]:
        return {"dataset": self.dataset, "revision": self.revision, "path": self.path, "sha256": self.sha256,
                "target": self.target}


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def task_set_dir(files: tuple[tuple[str, str, EvalFile], ...]) -> str:
    """The task set's directory, named by what it holds, each file with its task and split (`(task, split, file)`):
    a changed file, a renamed task or another split is a new directory, staged beside, never a marker that vouches
    for files under other names."""
    keys = (json.dumps([task, split, f.job_entry()], sort_keys=True) for task, split, f in files)
    return f"{EVAL_ROOT}/tasks-{digest(*keys)}"


def harness_dir() -> str:
    """The harness's wheels, one directory per lock (shared by every task set and model on the volume)."""
    return f"{EVAL_ROOT}/harness-{digest(EVAL_REQUIREMENTS)}"


def file_target(directory: str, task: str, split: str, path: str) -> str:
    """`<task set>/<task>/<split><the file's own extension>`: the harness's packaged builders read any name."""
    name = path.rsplit("/", 1)[-1]
    return f"{directory}/{task}/{split}{name[name.index('.'):] if '.' in name else ''}"


def config_data(settings: dict[str, Any]) -> dict[str, str]:
    """The eval Job's files: its program, its settings and the harness's lock."""
    return {"eval_gate.py": EVAL_SOURCE, "settings.json": json.dumps(settings, indent=2, sort_keys=True),
            "requirements.txt": EVAL_REQUIREMENTS}


def stage_config_data(stage_requirements: str) -> dict[str, str]:
    """The staging Job's files, apart from the eval's: a change to the eval (its settings, a revision) never replaces
    the staging Job, and a new staging lock never re-runs the eval."""
    return {"stage_eval.py": STAGE_EVAL_SOURCE, "stage-requirements.txt": stage_requirements,
            "requirements.txt": EVAL_REQUIREMENTS}


def identity(settings: dict[str, Any]) -> str:
    """What names the eval Job: its settings without the targets' concurrency, which a weight step changes (a
    revision at weight 0 is asked at the eval's own concurrency, one that serves users at the spare batch's) while
    the answers it scores do not; the ConfigMap is replaced under the same name with it and the Job is not run
    again."""
    return json.dumps({**settings, **{role: {k: v for k, v in target.items() if k != "concurrency"}
                                      for role in ("candidate", "stable") if (target := settings.get(role))}},
                      sort_keys=True)


def _labels(model_name: str, component: dict[str, str]) -> dict[str, str]:
    return {"app.kubernetes.io/name": model_name, **component}


def _placement(node_selector: dict[str, str], zones: tuple[str, ...]) -> dict[str, Any]:
    """The staging nodes (the only ones the weights volume lets mount it, on EFS), amd64 (the lock's wheels), and
    the zones the volume has mount targets in."""
    spec: dict[str, Any] = {"nodeSelector": {**node_selector, "kubernetes.io/arch": "amd64"}}
    if zones:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                   "values": sorted(zones)}]}]}}}
    return spec


def stage_command() -> list[str]:
    """huggingface_hub from the weights Job's hashed lock into HOME (the root filesystem is read-only), then the
    staging program."""
    return ["/bin/sh", "-c",
            "set -eu\n"
            "python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --require-hashes "
            f"--only-binary=:all: --target \"$HOME/lib\" -r {CONFIG_DIR}/stage-requirements.txt\n"
            f"PYTHONPATH=\"$HOME/lib\" exec python3 {CONFIG_DIR}/stage_eval.py\n"]


def stage_job_spec(*, model_name: str, configmap_name: str, image: str, claim_name: Any,
                   files: tuple[EvalFile, ...], task_dir: str, deadline_seconds: int, node_selector: dict[str, str],
                   zones: tuple[str, ...], pod_security: dict[str, Any], container_security: dict[str, Any],
                   hf_token_secret: str | None, pod_annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    """Retried like the weights Job (a Hub or PyPI hiccup); each attempt resumes past the files already in place."""
    env = [{"name": "EVAL_FILES", "value": json.dumps([f.job_entry() for f in files], separators=(",", ":"))},
           {"name": "EVAL_DIR", "value": task_dir}, {"name": "HARNESS_DIR", "value": harness_dir()},
           {"name": "HARNESS_REQUIREMENTS", "value": f"{CONFIG_DIR}/requirements.txt"},
           {"name": "HOME", "value": STAGE_HOME}, {"name": "HF_HOME", "value": f"{STAGE_HOME}/huggingface"},
           {"name": "TMPDIR", "value": SCRATCH_MOUNT}, {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
           {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, {"name": "PYTHONUNBUFFERED", "value": "1"}]
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
              {"name": "weights", "mountPath": "/models"},
              {"name": "home", "mountPath": STAGE_HOME}, {"name": "tmp", "mountPath": SCRATCH_MOUNT}]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": configmap_name}},
        {"name": "weights", "persistentVolumeClaim": {"claimName": claim_name}},
        {"name": "home", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": f"{SCRATCH_GIB}Gi"}},
    ]
    if hf_token_secret:
        # A gated dataset: the token as a file (huggingface_hub reads HF_TOKEN_PATH), as the weights Job has it.
        env.append({"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"})
        mounts.append({"name": "hf-token", "mountPath": "/var/run/secrets/huggingface", "readOnly": True})
        volumes.append({"name": "hf-token", "secret": {"secretName": hf_token_secret, "defaultMode": 0o440,
                                                        "items": [{"key": "token", "path": "token"}]}})
    labels = _labels(model_name, STAGE_COMPONENT)
    return {
        "backoffLimit": 4,
        "activeDeadlineSeconds": deadline_seconds,
        "template": {
            # The Hub token's keyed digest, as on the weights Job: a rotated token replaces the Job, whose pod reads it.
            "metadata": {"labels": labels, **({"annotations": dict(pod_annotations)} if pod_annotations else {})},
            "spec": {
                "restartPolicy": "OnFailure",
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "securityContext": pod_security,
                **_placement(node_selector, zones),
                "containers": [{
                    "name": "stage-eval",
                    "image": image,
                    "command": stage_command(),
                    "env": env,
                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
                    "securityContext": container_security,
                    "volumeMounts": mounts,
                }],
                "volumes": volumes,
            },
        },
    }


def install_command(python: str = "python3", wheels: str | None = None, target: str = HARNESS_MOUNT,
                    requirements: str = f"{CONFIG_DIR}/requirements.txt") -> list[str]:
    """The lock's wheels from the volume (`wheels`, the harness's directory) into the pod's own directory: no index,
    hashes checked again (pip's hash-checking mode, pip.pypa.io/en/stable/topics/secure-installs/)."""
    return [python, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check",
            "--no-index", "--find-links", wheels or harness_dir(), "--require-hashes", "--only-binary=:all:",
            "--no-deps", "--target", target, "-r", requirements]


def eval_job_spec(*, model_name: str, configmap_name: str, image: str, claim_name: Any, mode: str,
                  api_key_secret: str, deadline_seconds: int, node_selector: dict[str, str],
                  zones: tuple[str, ...]) -> dict[str, Any]:
    """A gate's Job, as the deploy gate's (objects.one_shot_job: a retried eval would hide a flaky revision and repeat
    its requests; its log's last line and its termination message are the deploy's eval record). No fsGroup: the pod
    writes only its emptyDirs, and a group change would walk the weights volume."""
    offline = [{"name": "HF_DATASETS_OFFLINE", "value": "1"}, {"name": "HF_HUB_OFFLINE", "value": "1"},
               {"name": "HF_HOME", "value": f"{SCRATCH_MOUNT}/huggingface"}, {"name": "HOME", "value": SCRATCH_MOUNT},
               {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, {"name": "PYTHONUNBUFFERED", "value": "1"}]
    return one_shot_job(labels=_labels(model_name, EVAL_SELECTOR), deadline_seconds=deadline_seconds,
                        security=pod_security(fs_group=False), pod={
        **_placement(node_selector, zones),
        "initContainers": [{
            "name": "harness",
            "image": image,
            "imagePullPolicy": "Always",
            "command": install_command(),
            "env": offline,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                             {"name": "weights", "mountPath": "/models", "readOnly": True},
                             {"name": "harness", "mountPath": HARNESS_MOUNT},
                             {"name": "scratch", "mountPath": SCRATCH_MOUNT}],
        }],
        "containers": [{
            "name": "eval",
            "image": image,
            "imagePullPolicy": "Always",
            "command": ["python3", f"{CONFIG_DIR}/eval_gate.py", "--settings", f"{CONFIG_DIR}/settings.json",
                        "--api-key-file", f"{KEY_DIR}/api-key", "--mode", mode, "--termination-log", TERMINATION_LOG],
            "env": [{"name": "PYTHONPATH", "value": HARNESS_MOUNT}, *offline],
            "terminationMessagePath": TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                             {"name": "api-key", "mountPath": KEY_DIR, "readOnly": True},
                             {"name": "weights", "mountPath": "/models", "readOnly": True},
                             {"name": "harness", "mountPath": HARNESS_MOUNT, "readOnly": True},
                             {"name": "scratch", "mountPath": SCRATCH_MOUNT}],
        }],
        "volumes": [
            {"name": "config", "configMap": {"name": configmap_name}},
            key_volume(api_key_secret),
            {"name": "weights", "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True}},
            {"name": "harness", "emptyDir": {"sizeLimit": f"{HARNESS_GIB}Gi"}},
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{SCRATCH_GIB}Gi"}},
        ],
    })


def eval_network_policy(*, namespace: str, model_selector: dict[str, str], port: int) -> dict[str, Any]:
    """Nothing in; out only to DNS and the vLLM pods' API port: the eval reaches each revision through its Service,
    so nothing it runs (the harness and its wheels, with the API key mounted) can reach an address outside the
    cluster. The vLLM pods' own fence admits these pods (llm_serving/edge/objects.py `network_policies`)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "eval", "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": dict(EVAL_SELECTOR)}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [], "egress": [dns_egress(),
                                           {"to": [{"podSelector": {"matchLabels": dict(model_selector)}}],
                                            "ports": [{"protocol": "TCP", "port": port}]}]},
    }
