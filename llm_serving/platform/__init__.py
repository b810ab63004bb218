"""What every other package builds on: the stack's Kubernetes provider, Helm and manifest helpers,
the pinned versions and the shapes every Prometheus rule and query shares."""

from . import chart_images, versions
from .addons import addon_settings, addon_version
from .aws_iam import pod_identity_trust_policy
from .credentials import credential_revision, derived_upstream_key
from .helm import (
    HELM_TIMEOUT_SECONDS,
    crd_chart,
    crd_manifest_text,
    crd_manifests,
    crd_options,
    helm_release,
    namespace,
    namespace_labels,
)
from .kubernetes import (
    EksCluster,
    PodIdentityRole,
    cluster_version,
    kubeconfig,
    kubernetes_provider,
    lookup_cluster,
    pod_identity_guard,
    pod_identity_role,
    pod_identity_trust,
    subnet_cidr,
    vpc_cni_configuration,
)
from .manifests import ManifestFields, manifest_resource
from .pod_security import RESTRICTED, PodSecurity
from .prometheus import (
    BURN_FOR_MINUTES,
    BURN_RATES,
    ENVOY_GATEWAY_LISTENERS,
    NAMESPACE_LABEL,
    NODE_LABEL,
    POD_LABEL,
    BurnRate,
    alert_rule,
    check_dns_label,
    check_label_value,
)

__all__ = [
    "BURN_FOR_MINUTES",
    "BURN_RATES",
    "ENVOY_GATEWAY_LISTENERS",
    "HELM_TIMEOUT_SECONDS",
    "BurnRate",
    "addon_settings",
    "addon_version",
    "crd_chart",
    "crd_manifest_text",
    "crd_manifests",
    "crd_options",
    "credential_revision",
    "derived_upstream_key",
    "subnet_cidr",
    "vpc_cni_configuration",
    "NAMESPACE_LABEL",
    "NODE_LABEL",
    "POD_LABEL",
    "RESTRICTED",
    "EksCluster",
    "PodSecurity",
    "alert_rule",
    "chart_images",
    "check_dns_label",
    "check_label_value",
    "helm_release",
    "kubeconfig",
    "kubernetes_provider",
    "lookup_cluster",
    "PodIdentityRole",
    "pod_identity_guard",
    "pod_identity_role",
    "pod_identity_trust",
    "pod_identity_trust_policy",
    "cluster_version",
    "ManifestFields",
    "manifest_resource",
    "namespace",
    "namespace_labels",
    "versions",
]
