"""The admission guard of a Pod Identity association (pure, no Pulumi import): no pod of its service account is
admitted without the credentials EKS injects.

Why a guard and not a delay. EKS Pod Identity hands a pod credentials at admission only: the Amazon EKS Pod
Identity webhook adds `AWS_CONTAINER_CREDENTIALS_FULL_URI`, `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` and the
projected token volume when its cache holds an association for the pod's namespace and service account
(aws/amazon-eks-pod-identity-webhook v0.6.17, pkg/handler/handler.go `buildPodPatchConfig` and
pkg/containercredentials/config.go: a file the control plane rewrites, reloaded on change). An association "may
take several seconds to be effective after the initial API call returns successfully" (EKS API reference,
CreatePodIdentityAssociation), and nothing says how many: there is no API that tells when it is
(aws/containers-roadmap#2507, open), a pod admitted one second after the association reported Ready still got
nothing (Smana/cloud-native-ref#1700), and a pod's environment and volumes never change after admission, so a
restarted container keeps the pod it had (aws/amazon-eks-pod-identity-webhook#210). A sleep would be a guess at
an undocumented bound; ordering on the association alone is the race itself.

The guard checks the one thing that decides it, at the moment it is decided: a ValidatingAdmissionPolicy denies
the CREATE of a pod of this namespace and service account unless the webhook put
`AWS_CONTAINER_CREDENTIALS_FULL_URI` into it. Validating admission runs after every mutating webhook
(Kubernetes docs, "Admission Control in Kubernetes": the mutating phase, then the validating one), so the policy
sees the pod as the webhook left it. A denied pod is never created; its controller retries with a new pod
(ReplicaSet: kubernetes pkg/controller/replicaset/replica_set.go `processNextWorkItem`, `AddRateLimited` after a
failed create, 5 ms doubling; Job: pkg/controller/job/job_controller.go, 1 s doubling to 1 min, and a pod that was
never created counts against no backoffLimit), and the first pod admitted once the association is in effect has
its credentials. The webhook itself is registered with `failurePolicy: Ignore` (its deploy/mutatingwebhook.yaml):
a webhook that times out also admits a pod without credentials, and the guard refuses that pod too.

The webhook patches either every container of the pod or none (the association is looked up per pod; only
containers named in the `eks.amazonaws.com/skip-containers` annotation are left out), so one regular container
with the variable shows that the association applied. The guard looks for the variable's name only: the SDKs
read it (AWS SDKs and Tools reference, "Container credential provider"), while the label
`eks.amazonaws.com/pod-identity` the webhook also adds came only in v0.6.15 (#295), and which webhook a cluster's
control plane runs is not published.

A guard that keeps refusing is the one failure it adds: `refusal_alert_groups` is the alert on the API server's
count of its denials, for refusals that go on past the seconds a new association takes (docs/runbooks.md,
PodIdentityPodsRefused, with the break-glass that deletes the binding).
"""

from __future__ import annotations

import re
from typing import Any

# The variable the webhook injects and the AWS SDKs' container credential provider reads
# (aws/amazon-eks-pod-identity-webhook pkg/constants.go AwsEnvVarContainerCredentialsFullUri).
CREDENTIALS_ENV = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
API_VERSION = "admissionregistration.k8s.io/v1"  # GA in Kubernetes 1.30; this program supports 1.32 and later
# Set by the API server on every namespace (Kubernetes docs, "Well-Known Labels": kubernetes.io/metadata.name).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def guard_name(namespace: str, service_account: str) -> str:
    """`pod-identity.<namespace>.<service account>`: cluster-scoped, one per service account. A namespace name has
    no dot (a DNS label), so two pairs never share a name."""
    name = f"pod-identity.{namespace}.{service_account}"
    if "." in namespace or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise ValueError(f"no admission policy name for {namespace}/{service_account}: {name!r} is not a DNS "
                         "subdomain of at most 253 characters")
    return name


def _quoted(value: str) -> str:
    """A CEL string literal; Kubernetes names never hold a quote or a backslash, but the literal must not break."""
    if "'" in value or "\\" in value:
        raise ValueError(f"{value!r} cannot be quoted in a CEL expression")
    return f"'{value}'"


def service_account_condition(service_account: str) -> str:
    """The matchCondition: the pod runs as `service_account` (the ServiceAccount admission plugin, a mutating one,
    has set the field by now; `has` keeps a pod without it from being an evaluation error, which would deny it)."""
    return f"has(object.spec.serviceAccountName) && object.spec.serviceAccountName == {_quoted(service_account)}"


def credentials_injected() -> str:
    """The validation: some regular container carries the injected variable."""
    return f"object.spec.containers.exists(c, has(c.env) && c.env.exists(e, e.name == {_quoted(CREDENTIALS_ENV)}))"


def admission_guard(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding that keep pods of `namespace`/`service_account` out until
    EKS Pod Identity injects their credentials."""
    name = guard_name(namespace, service_account)
    labels = {"app.kubernetes.io/part-of": "llm-serving", "app.kubernetes.io/component": "pod-identity"}
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            # An expression that cannot be evaluated denies too: a pod without credentials is never the answer.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
                # CREATE only: a pod's environment cannot change after it is created.
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                   "resources": ["pods"]}],
            },
            "matchConditions": [{"name": "service-account", "expression": service_account_condition(service_account)}],
            "validations": [{
                "expression": credentials_injected(),
                "reason": "Forbidden",
                "message": (f"EKS Pod Identity has not injected {CREDENTIALS_ENV} into this pod of "
                            f"{namespace}/{service_account}: its association is not in effect yet (associations are "
                            "eventually consistent); the pod's controller retries with a new pod"),
            }],
        },
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


# --- refusals that do not stop -------------------------------------------------------------------------------------
# The guard turns a pod the webhook left without credentials into a refused create that its controller retries with
# back-off; while an association is not in effect (or the webhook misses: it is registered failurePolicy Ignore, and
# aws/eks-pod-identity-agent#153 reports injection that comes and goes) the workload gets no pod at all. The API
# server counts each refusal: apiserver_validating_admission_policy_check_total, BETA, labels policy, policy_binding,
# error_type and enforcement_action (kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/
# metrics/metrics.go), incremented with enforcement_action="deny" and the policy's own name for each denial of a Deny
# binding (validating/dispatcher.go, ObserveRejection). EKS serves the API server's /metrics
# (EKS user guide, view-raw-metrics); kube-prometheus-stack scrapes it by default (chart 88.5.3 values.yaml
# kubeApiServer.enabled and its `apiserver` ServiceMonitor, whose metricRelabelings drop only duration buckets); an
# existing Prometheus scrapes it only if its operator set it up.
ADMISSION_CHECKS_METRIC = "apiserver_validating_admission_policy_check_total"
REFUSED_ALERT = "PodIdentityPodsRefused"
# Longer than the longest pause between two retries of a refused pod: a ReplicaSet's or StatefulSet's queue backs
# off from 5 ms, doubling, to 1000 s (client-go util/workqueue/default_rate_limiters.go,
# DefaultControllerRateLimiter), a Job's to 60 s (pkg/controller/job/job_controller.go, MaxJobApiBackOff). So a
# workload that keeps being refused keeps the window's increase above zero, and the first refused create of a new
# API server series (it starts at 1, which no increase sees) is covered by the ones after it.
REFUSAL_WINDOW = "20m"
# Longer than the window: the few seconds of refusals while a new association comes into effect (each first up, each
# new pod of a flapping webhook) keep the expression true for the window and no longer, so only refusals that go on
# past it fire.
REFUSED_FOR_MINUTES = 30


def refusals(window: str = REFUSAL_WINDOW) -> str:
    """Pods each guard refused over `window`, by policy (one per namespace and service account, every API server
    summed)."""
    selector = 'policy=~"pod-identity\\\\..+", enforcement_action="deny"'
    return f"sum by (policy) (increase({ADMISSION_CHECKS_METRIC}{{{selector}}}[{window}]))"


def refusal_alert_groups(runbook_base_url: str) -> list[dict[str, Any]]:
    """PrometheusRule `spec.groups`: the guards' refusals that go on, one alert per guard (its policy name)."""
    from .prometheus import alert_rule

    return [{"name": "llm-serving-pod-identity", "rules": [alert_rule(
        alert=REFUSED_ALERT,
        expr=f"{refusals()} > 0",
        for_minutes=REFUSED_FOR_MINUTES,
        severity="critical",
        summary=("The admission guard {{ $labels.policy }} has refused pods for "
                 f"{REFUSED_FOR_MINUTES} minutes: EKS Pod Identity injects no credentials into them"),
        description=("Pods of that namespace and service account are refused at create because EKS did not inject "
                     f"{CREDENTIALS_ENV}: the association is missing or not in effect, the EKS Pod Identity webhook "
                     "missed them, or a failed `pulumi up` left the guard. Their controller retries with back-off "
                     "and runs no pod meanwhile. The runbook's break-glass deletes the "
                     "ValidatingAdmissionPolicyBinding {{ $labels.policy }}; `pulumi up --refresh` creates it again."),
        runbook_base_url=runbook_base_url,
    )]}]
