"""EvalJob: the accuracy gate of one model (`models[].eval`): its task set and harness staged on the weights volume
by one Job, then one Job that Pulumi awaits runs lm-evaluation-harness against the revision under test and the
other revision (evaluation.py has the manifests, eval_gate.py the program).

In gate mode a score that drops more than allowed fails the eval Job, so `pulumi up` fails with the failing lines
(the Job's termination message); in report mode the Job succeeds and its last log line holds the same report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from . import evaluation
from .args import VerificationMode
from .evaluation import EvalFile
from .job import awaited_job


@dataclass(frozen=True)
class EvalJobArgs:
    namespace: pulumi.Input[str]
    model_name: str  # the revision under test's objects' name
    settings: dict[str, Any]  # eval_gate.py's settings (llm_serving/stack/evaluation.py)
    files: tuple[EvalFile, ...]
    task_dir: str
    mode: VerificationMode  # gate or report (off creates none)
    image: str  # pinned by digest (versions.VERIFY_IMAGE): the staging and the eval Job run the same Python
    stage_requirements: str  # the weights Job's hashed lock (huggingface_hub), passed in by the stack
    claim_name: pulumi.Input[str]  # the claim the model's weights are staged through
    api_key_secret: str
    deadline_seconds: int
    stage_deadline_seconds: int
    deployed: str  # what both revisions deploy: a change runs the eval again
    pod_security: dict[str, Any] = field(default_factory=dict)  # the staging Job's, as the weights Job's
    container_security: dict[str, Any] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    zones: tuple[str, ...] = ()
    hf_token_secret: str | None = None
    stage_pod_annotations: dict[str, pulumi.Input[str]] | None = None  # the Hub token's revision, as the weights Job's
    after: tuple[pulumi.Resource, ...] = ()  # both workloads, the fences
    stage_after: tuple[pulumi.Resource, ...] = ()  # the weights Job (which creates the claim's contents' root)


class EvalJob(pulumi.ComponentResource):
    """The eval's ConfigMap, its staging Job and the eval Job; `job` is the one to wait for."""

    job: k8s.batch.v1.Job
    stage: k8s.batch.v1.Job

    def __init__(self, name: str, args: EvalJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:verification:EvalJob", name, None, opts)
        data = evaluation.config_data(args.settings)
        key = evaluation.digest(evaluation.EVAL_SOURCE, evaluation.EVAL_REQUIREMENTS,
                                evaluation.identity(args.settings), args.mode.value, args.image, args.deployed)
        config_name = f"{args.model_name}-eval-{key}"
        labels = {"app.kubernetes.io/name": args.model_name, "app.kubernetes.io/component": "eval"}
        # Not immutable: a weight step changes only a target's concurrency, which is not in the name
        # (evaluation.identity); pulumi-kubernetes replaces the ConfigMap under the same name (its data is force-new,
        # stacks/offline/replacements.py) and the Job, whose pod template does not change, is not run again.
        config = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={"name": config_name, "namespace": args.namespace, "labels": labels},
            data=data,
            opts=pulumi.ResourceOptions(parent=self),
        )
        stage_data = evaluation.stage_config_data(args.stage_requirements)
        stage_key = evaluation.digest(args.task_dir, evaluation.harness_dir(), args.image, *stage_data.values())
        stage_config = k8s.core.v1.ConfigMap(
            f"{name}-stage-config",
            metadata={"name": f"{args.model_name}-eval-stage-{stage_key}", "namespace": args.namespace,
                      "labels": labels},
            data=stage_data,
            immutable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.stage = awaited_job(
            f"{name}-stage", name=f"{args.model_name}-eval-stage-{stage_key}", namespace=args.namespace,
            labels={"app.kubernetes.io/name": args.model_name, **evaluation.STAGE_COMPONENT},
            spec=evaluation.stage_job_spec(
                model_name=args.model_name, configmap_name=f"{args.model_name}-eval-stage-{stage_key}",
                image=args.image, claim_name=args.claim_name, files=args.files, task_dir=args.task_dir,
                deadline_seconds=args.stage_deadline_seconds, node_selector=args.node_selector, zones=args.zones,
                pod_security=args.pod_security, container_security=args.container_security,
                hf_token_secret=args.hf_token_secret, pod_annotations=args.stage_pod_annotations),
            deadline_seconds=args.stage_deadline_seconds, parent=self, depends_on=[stage_config, *args.stage_after])
        self.job = awaited_job(
            f"{name}-job", name=config_name, namespace=args.namespace,
            labels={"app.kubernetes.io/name": args.model_name, **evaluation.EVAL_SELECTOR},
            spec=evaluation.eval_job_spec(
                model_name=args.model_name, configmap_name=config_name, image=args.image,
                claim_name=args.claim_name, mode=args.mode.value, api_key_secret=args.api_key_secret,
                deadline_seconds=args.deadline_seconds, node_selector=args.node_selector, zones=args.zones),
            deadline_seconds=args.deadline_seconds, parent=self, depends_on=[config, self.stage, *args.after])
        self.register_outputs({"job_name": self.job.metadata["name"], "stage_job_name": self.stage.metadata["name"]})
