"""The clients a preflight run reads through, and the one place an error becomes "could not check".

Clients are injected (boto3 clients, a Kubernetes reader, a Hub base URL), so tests drive every
check through botocore's Stubber, Kubernetes API objects and a local HTTP server.
"""

from __future__ import annotations

import socket
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import urllib3.exceptions
from botocore.exceptions import BotoCoreError, ClientError
from kubernetes.client import (
    V1CustomResourceDefinition,
    V1DaemonSetList,
    V1DeploymentList,
    V1NamespaceList,
    V1NodeList,
    V1PodList,
    V1Secret,
    V1Service,
    VersionInfo,
)
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from stacks.preflight.intent import Intent
from stacks.preflight.result import Finding, unknown

# AWS error codes meaning "this identity may not call that": the fix is a permission.
ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnrecognizedClientException",
                 "NotAuthorizedException"}
POLICY_DOC = "docs/preflight.md, the read-only policy"


class KubeReader(Protocol):
    """The few read calls preflight makes, each returning the Kubernetes client's own model objects."""

    def version(self) -> VersionInfo: ...
    def list_namespaces(self) -> V1NamespaceList: ...
    def crd(self, name: str) -> V1CustomResourceDefinition: ...
    def secret(self, namespace: str, name: str) -> V1Secret: ...
    def service(self, namespace: str, name: str) -> V1Service: ...
    def cluster_issuer(self, name: str) -> dict[str, Any]: ...
    def helm_deployments(self) -> V1DeploymentList: ...
    def helm_daemon_sets(self) -> V1DaemonSetList: ...
    def daemon_sets(self) -> V1DaemonSetList: ...
    def nodes(self, label_selector: str) -> V1NodeList: ...
    def gateway(self, namespace: str, name: str) -> dict[str, Any]: ...
    def gateway_class(self, name: str) -> dict[str, Any]: ...
    def api_service(self, name: str) -> dict[str, Any]: ...
    def custom_metrics(self) -> list[str]: ...
    def envoy_policies(self, namespace: str, plural: str) -> dict[str, Any]: ...
    def pods(self, namespace: str, label_selector: str) -> V1PodList: ...


@dataclass
class Context:
    intent: Intent
    eks: Any
    ec2: Any
    quotas: Any
    hub_url: str
    hub_token: str | None
    now: datetime
    kube_factory: Callable[[dict[str, Any]], KubeReader]
    s3: Any = None  # read only with weightsStorage.backend s3 and an existing bucket
    ssm: Any = None  # the public parameters EKS publishes its AMIs under (a pinned AMI release)
    iam: Any = None  # the roles the stack names
    account: str | None = None  # the caller's account (STS), where the roles are looked up
    timeout_seconds: float = 10.0
    cluster: dict[str, Any] | None = None  # DescribeCluster's `cluster`, once the cluster check found it
    _kube: KubeReader | None = field(default=None, repr=False)

    def kube(self) -> KubeReader:
        """The reader for the cluster found by the cluster check (the program's own kubeconfig)."""
        if self._kube is None:
            if self.cluster is None:
                raise ClusterUnknown()
            self._kube = self.kube_factory(self.cluster)
        return self._kube


class ClusterUnknown(Exception):
    """A Kubernetes check ran while the cluster itself was not found or not readable."""


def could_not_check(check: str, error: BaseException, permissions: tuple[str, ...]) -> Finding:
    """The line for an error: what failed, and the permission or condition to fix."""
    allow = f"allow {', '.join(permissions)} for this identity ({POLICY_DOC})" if permissions else POLICY_DOC
    if isinstance(error, ClusterUnknown):
        return unknown(check, "needs the cluster, which was not found or could not be read (see cluster.exists)",
                       "fix cluster.exists first")
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", "")
        if code in ACCESS_DENIED:
            return unknown(check, f"{error.operation_name} refused: {code}", allow)
        return unknown(check, f"{error.operation_name} failed: {code} {message}".strip(), "retry; if it persists, "
                       "check the AWS service health for the region")
    if isinstance(error, BotoCoreError):
        return unknown(check, f"AWS call failed: {error}", "check network access to the AWS APIs and retry")
    if isinstance(error, ApiException):
        if error.status in (401, 403):
            return unknown(check, f"Kubernetes API refused the read ({error.status} {error.reason})",
                           f"grant this identity the Kubernetes reads in {POLICY_DOC}")
        return unknown(check, f"Kubernetes API error {error.status} {error.reason}", "retry; check the API server")
    if isinstance(error, ConfigException | FileNotFoundError):
        return unknown(check, f"cannot build the Kubernetes client: {error}",
                       "install the AWS CLI (the program's kubeconfig runs `aws eks get-token`)")
    if isinstance(error, urllib.error.URLError | urllib3.exceptions.HTTPError | socket.timeout | OSError):
        return unknown(check, f"network error: {error}", "check network access and retry")
    # An answer of an unexpected shape is a preflight defect, still never a traceback nor a pass.
    return unknown(check, f"unexpected {type(error).__name__}: {error}",
                   "a preflight defect: report it with this line, and verify this check by hand")


def guarded(check: str, permissions: tuple[str, ...], run: Callable[[], list[Finding]]) -> list[Finding]:
    try:
        return run()
    except Exception as error:  # noqa: BLE001 - every error is a could-not-check line
        return [could_not_check(check, error, permissions)]
