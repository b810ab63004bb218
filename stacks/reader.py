"""What the preview and drift role may read in the cluster: the RBAC that lets `pulumi preview --refresh` read
every object in a stack's state, and nothing it does not manage.

A refresh reads each resource in the state. pulumi-kubernetes' `Read` GETs the live object and fails on any
error that is not a 404 (pulumi/pulumi-kubernetes, provider/pkg/provider/provider.go `Read` → await.Read,
provider/pkg/await/await.go `Read`: `client.Get`), so a 403 on one object fails the whole refresh; the
Deployment, DaemonSet and Job readers then list their ReplicaSets and Pods, and a Service its endpoints
(provider/pkg/await/awaiters.go `awaitRead`). A `helm.sh/v3:Release` is read through Helm's storage driver
(provider/pkg/provider/helm_release.go `Read` → `action.NewGet`), which lists the Secrets
`sh.helm.release.v1.<name>.v<n>` by label in the release's namespace
(helm/helm pkg/storage/driver/secrets.go `Query`). The EKS access policy `AmazonEKSViewPolicy` is Kubernetes'
`view`: no Secrets, no RBAC, no cluster-scoped kinds (StorageClass, PersistentVolume, CRDs, admission
policies) and no custom resources (https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html),
so a refresh with that policy alone stops at the first such object.

The remedy: the roles' EKS access entries name Kubernetes groups (an access entry's `kubernetesGroups`:
https://docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html) that the program binds:

- `GROUP` (the preview and the drift role) to `CLUSTER_ROLE`: get, list and watch on exactly
  `read_resources()` (the kinds the stacks render, the kinds inside the charts and CRD files the offline
  render does not expand, and what the provider's read awaiters list), cluster-wide, never Secrets;
- `SECRET_GROUP` (the drift role alone) to `SECRET_ROLE`: get, list and watch on Secrets, through RoleBindings
  only in the namespaces where the program owns Secrets or Helm release records (`secret_namespaces`).

Secrets stay out of the pull-request preview's reach: that role runs a branch's own code, and reading the
Secrets (or the Helm records, which hold each release's values) would hand the API key and the HF token to any
author with write access. The drift role runs only main's code (its environment allows main alone), so it may
read them, and only it can refresh a whole stack.

Only read verbs, by design: a server-side dry run is authorised as the write it simulates, and the reasons
not to grant writes to this group are in docs/operations.md ("Why previews do not dry-run on the server").
`tests/stacks/test_preview_reader.py` renders every stack and fails when a rendered kind is not covered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# The Kubernetes groups the checklist's access entries name (`kubernetesGroups`); not `system:`-prefixed, which
# Kubernetes reserves (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-subjects).
GROUP = "llm-serving:readers"
SECRET_GROUP = "llm-serving:secret-readers"
CLUSTER_ROLE = "llm-serving-preview-reader"
SECRET_ROLE = "llm-serving-preview-secret-reader"
READ_VERBS = ["get", "list", "watch"]
LABELS = {"app.kubernetes.io/part-of": "llm-serving", "app.kubernetes.io/component": "preview-reader"}

# (API group, kind) -> resource (plural), for every kind a stack renders, the kinds inside the remote components
# (`REMOTE_COMPONENT_KINDS`) and what the provider's read awaiters list (`AWAIT_READS`). A custom resource's
# plural is its CRD's `spec.names.plural`; the test checks each against the CRD files it has.
KIND_RESOURCES: dict[tuple[str, str], str] = {
    ("", "ConfigMap"): "configmaps",
    ("", "Namespace"): "namespaces",
    ("", "PersistentVolume"): "persistentvolumes",
    ("", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("", "Service"): "services",
    ("", "ServiceAccount"): "serviceaccounts",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): "validatingadmissionpolicies",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): "validatingadmissionpolicybindings",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "customresourcedefinitions",
    ("apps", "DaemonSet"): "daemonsets",
    ("apps", "Deployment"): "deployments",
    ("batch", "Job"): "jobs",
    ("aigateway.envoyproxy.io", "AIGatewayRoute"): "aigatewayroutes",  # edge.routing: byModel
    ("aigateway.envoyproxy.io", "GatewayConfig"): "gatewayconfigs",  # edge.routing: byModel, our own Gateway
    ("gateway.envoyproxy.io", "BackendTrafficPolicy"): "backendtrafficpolicies",
    ("gateway.envoyproxy.io", "ClientTrafficPolicy"): "clienttrafficpolicies",
    ("gateway.envoyproxy.io", "EnvoyProxy"): "envoyproxies",
    ("gateway.envoyproxy.io", "HTTPRouteFilter"): "httproutefilters",
    ("gateway.envoyproxy.io", "SecurityPolicy"): "securitypolicies",
    ("gateway.networking.k8s.io", "Gateway"): "gateways",
    ("gateway.networking.k8s.io", "GatewayClass"): "gatewayclasses",
    ("gateway.networking.k8s.io", "HTTPRoute"): "httproutes",
    ("inference.networking.k8s.io", "InferencePool"): "inferencepools",
    ("keda.sh", "ScaledObject"): "scaledobjects",
    ("llm-d.ai", "InferenceModelRewrite"): "inferencemodelrewrites",  # models[].lora.aliases
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkersets",
    ("monitoring.coreos.com", "PodMonitor"): "podmonitors",
    ("monitoring.coreos.com", "PrometheusRule"): "prometheusrules",
    ("monitoring.coreos.com", "ServiceMonitor"): "servicemonitors",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("policy", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("rbac.authorization.k8s.io", "ClusterRole"): "clusterroles",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "clusterrolebindings",
    ("rbac.authorization.k8s.io", "Role"): "roles",
    ("rbac.authorization.k8s.io", "RoleBinding"): "rolebindings",
    ("storage.k8s.io", "StorageClass"): "storageclasses",
}

# Children the provider registers for a remote component, which the offline render does not expand. The CRD
# files of `yaml/v2:ConfigGroup` are vendored (llm_serving/platform/crds/: CustomResourceDefinitions only, a test
# reads them); the two `helm.sh/v4:Chart`s are CRD-only charts: envoyproxy/gateway
# charts/gateway-crds-helm/templates/ (Gateway API and Envoy Gateway CRDs) and prometheus-community/helm-charts
# charts/prometheus-operator-crds/templates/crd-*.yaml. Objects a `helm.sh/v3:Release` installs are not in the
# state (the release is one resource), so they need no read here.
REMOTE_COMPONENT_KINDS: dict[str, list[tuple[str, str]]] = {
    "kubernetes:yaml/v2:ConfigGroup": [("apiextensions.k8s.io", "CustomResourceDefinition")],
    "kubernetes:helm.sh/v4:Chart": [("apiextensions.k8s.io", "CustomResourceDefinition")],
}

# What the provider's read awaiters list beside the object (provider/pkg/await/awaiters.go `awaitRead`:
# the Deployment awaiter lists ReplicaSets, Pods and PersistentVolumeClaims; Job and DaemonSet list Pods; the
# Service awaiter reads Endpoints and EndpointSlices) and the Events the awaiters' logs read.
AWAIT_READS: list[tuple[str, str]] = [
    ("", "pods"),
    ("", "endpoints"),
    ("", "events"),
    ("apps", "replicasets"),
    ("discovery.k8s.io", "endpointslices"),
]

SECRETS = ("", "secrets")


def read_resources() -> dict[str, list[str]]:
    """API group -> resources the cluster role reads: every kind above, plus the awaiters' reads."""
    by_group: dict[str, set[str]] = {}
    for (group, _kind), resource in KIND_RESOURCES.items():
        by_group.setdefault(group, set()).add(resource)
    for group, resource in AWAIT_READS:
        by_group.setdefault(group, set()).add(resource)
    return {group: sorted(resources) for group, resources in sorted(by_group.items())}


def cluster_role() -> dict[str, Any]:
    rules = [{"apiGroups": [group], "resources": resources, "verbs": READ_VERBS}
             for group, resources in read_resources().items()]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": CLUSTER_ROLE, "labels": LABELS}, "rules": rules}


def secret_role() -> dict[str, Any]:
    """A ClusterRole bound only by RoleBindings, so it grants Secrets in those namespaces alone
    (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#rolebinding-and-clusterrolebinding)."""
    group, resource = SECRETS
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": SECRET_ROLE, "labels": LABELS},
            "rules": [{"apiGroups": [group], "resources": [resource], "verbs": READ_VERBS}]}


def _subjects(group: str) -> list[dict[str, str]]:
    return [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}]


def cluster_role_binding() -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ROLE, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
            "subjects": _subjects(GROUP)}


def secret_role_binding(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": SECRET_ROLE, "namespace": namespace, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SECRET_ROLE},
            "subjects": _subjects(SECRET_GROUP)}


def secret_namespaces(created: Iterable[str], named: Iterable[str]) -> list[str]:
    """Where the group reads Secrets: the namespaces the program creates (each holds a Secret or a Helm
    release of ours, which the test checks) and the existing ones a Secret or release names (kube-system for
    the cluster autoscaler and the load balancer controller)."""
    return sorted(set(created) | set(named))
