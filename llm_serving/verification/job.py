"""VerificationJob: after a model is Ready and routed, a Job that Pulumi awaits checks its API through
the edge and its Service and runs a short load test at the planned concurrency (probe.py).

In gate mode a failing check fails the Job, so `pulumi up` fails with the failing lines; in report
mode the Job succeeds and its log holds the same report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from llm_serving.platform import ManifestFields

from . import objects
from .args import VerificationMode
from .probe import Settings

# Beyond the Job's own deadline, Pulumi allows for scheduling the pod and pulling the slim image.
AWAIT_SLACK_SECONDS = 300


@dataclass(frozen=True)
class VerificationJobArgs:
    namespace: pulumi.Input[str]
    model_name: str
    settings: Settings
    mode: VerificationMode  # gate or report (off creates no Job)
    image: str  # pinned by digest (versions.VERIFY_IMAGE)
    api_key_secret: str  # a Secret with key `api-key`
    deadline_seconds: int
    deployed: str  # what the model deploys (image, revision, flags): a change re-runs the Job
    after: tuple[pulumi.Resource, ...] = ()  # the workload, the route, the fence


def await_seconds(deadline_seconds: int) -> int:
    return deadline_seconds + AWAIT_SLACK_SECONDS


def awaited_job(resource_name: str, *, name: str, namespace: pulumi.Input[str], labels: dict[str, str],
                spec: dict[str, Any], deadline_seconds: int, parent: pulumi.Resource,
                depends_on: list[pulumi.Resource]) -> k8s.batch.v1.Job:
    """A gate's Job that Pulumi awaits: pulumi-kubernetes waits for the Complete condition and fails on Failed
    (BackoffLimitExceeded, DeadlineExceeded, printing the termination message), its default 10 minutes stretched to
    the Job's deadline (`await_seconds`). A failed Job is replaced (run again) on the next `pulumi up` instead of
    blocking it (`pulumi.com/replaceUnready`)."""
    timeout = f"{await_seconds(deadline_seconds)}s"
    return k8s.batch.v1.Job(
        resource_name,
        metadata={"name": name, "namespace": namespace, "labels": labels,
                  "annotations": {"pulumi.com/replaceUnready": "true"}},
        spec=cast(ManifestFields, spec),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on,
                                    custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout)),
    )


class VerificationJob(pulumi.ComponentResource):
    """The probe's ConfigMap and the Job that runs it once per deploy of the model."""

    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: VerificationJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:verification:VerificationJob", name, None, opts)
        settings_json = json.dumps(args.settings.to_json(), sort_keys=True)
        digest = objects.fingerprint(objects.PROBE_SOURCE, settings_json, args.mode.value, args.image, args.deployed)
        manifest = objects.configmap(f"{args.model_name}-verify-{digest}", "", args.model_name, args.settings)
        config = k8s.core.v1.ConfigMap(
            f"{name}-probe",
            metadata={**manifest["metadata"], "namespace": args.namespace},
            data=manifest["data"],
            immutable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.job = awaited_job(
            f"{name}-job", name=f"{args.model_name}-verify-{digest}", namespace=args.namespace,
            labels={"app.kubernetes.io/name": args.model_name, **objects.SELECTOR},
            spec=objects.job_spec(model_name=args.model_name, configmap_name=manifest["metadata"]["name"],
                                  image=args.image, mode=args.mode.value, api_key_secret=args.api_key_secret,
                                  deadline_seconds=args.deadline_seconds),
            deadline_seconds=args.deadline_seconds, parent=self, depends_on=[config, *args.after])
        self.register_outputs({"job_name": self.job.metadata["name"]})
