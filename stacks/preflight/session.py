"""Real clients for a preflight run: boto3 clients from the caller's credentials, and a Kubernetes
reader over the kubeconfig the program itself builds (`aws eks get-token` per call)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from llm_serving.platform import kubeconfig

# Read-only calls that hang are worse than failing: each one gets a bounded connect/read and few
# retries, so a blocked endpoint costs seconds, and its check says "could not check".
AWS_CONFIG = Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3, "mode": "standard"})
TIMEOUT_SECONDS = 10.0


class NoCredentials(Exception):
    """The one line the CLI prints when there is nobody to check as."""


@dataclass(frozen=True)
class AwsClients:
    identity: str
    eks: Any
    ec2: Any
    quotas: Any
    s3: Any
    ssm: Any = None
    iam: Any = None

    @property
    def account(self) -> str | None:
        """The caller's account: the fifth field of its ARN (arn:aws:sts::<account>:assumed-role/...)."""
        fields = self.identity.split(":")
        return fields[4] if len(fields) > 4 and fields[4] else None


def aws_clients(region: str) -> AwsClients:
    try:
        session = boto3.Session(region_name=region)
        if session.get_credentials() is None:
            raise NoCredentials("no AWS credentials found (set AWS_PROFILE and run `aws sso login`, or export "
                                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); nothing was checked")
        identity = session.client("sts", config=AWS_CONFIG).get_caller_identity()["Arn"]
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        raise NoCredentials(f"AWS refused the credentials ({code}): refresh them (`aws sso login`); nothing was "
                            "checked") from None
    except BotoCoreError as error:  # an unknown profile, an expired SSO cache, no network to STS
        raise NoCredentials(f"cannot use the AWS credentials: {error}; nothing was checked") from None
    return AwsClients(identity, session.client("eks", config=AWS_CONFIG), session.client("ec2", config=AWS_CONFIG),
                      session.client("service-quotas", config=AWS_CONFIG), session.client("s3", config=AWS_CONFIG),
                      session.client("ssm", config=AWS_CONFIG), session.client("iam", config=AWS_CONFIG))


class KubeApis:
    """KubeReader over the Kubernetes Python client; every call bounded by a timeout."""

    HELM = "app.kubernetes.io/managed-by=Helm"

    def __init__(self, api: k8s.ApiClient, timeout: float = TIMEOUT_SECONDS):
        self.api = api
        self.timeout = timeout
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)

    def version(self) -> k8s.VersionInfo:
        return k8s.VersionApi(self.api).get_code(_request_timeout=self.timeout)

    def list_namespaces(self) -> k8s.V1NamespaceList:
        return self.core.list_namespace(limit=1, _request_timeout=self.timeout)

    def crd(self, name: str) -> k8s.V1CustomResourceDefinition:
        return k8s.ApiextensionsV1Api(self.api).read_custom_resource_definition(name, _request_timeout=self.timeout)

    def secret(self, namespace: str, name: str) -> k8s.V1Secret:
        return self.core.read_namespaced_secret(name, namespace, _request_timeout=self.timeout)

    def service(self, namespace: str, name: str) -> k8s.V1Service:
        return self.core.read_namespaced_service(name, namespace, _request_timeout=self.timeout)

    def cluster_issuer(self, name: str) -> dict[str, Any]:
        return k8s.CustomObjectsApi(self.api).get_cluster_custom_object(
            "cert-manager.io", "v1", "clusterissuers", name, _request_timeout=self.timeout)

    def helm_deployments(self) -> k8s.V1DeploymentList:
        return self.apps.list_deployment_for_all_namespaces(label_selector=self.HELM, _request_timeout=self.timeout)

    def helm_daemon_sets(self) -> k8s.V1DaemonSetList:
        return self.apps.list_daemon_set_for_all_namespaces(label_selector=self.HELM, _request_timeout=self.timeout)

    def daemon_sets(self) -> k8s.V1DaemonSetList:
        return self.apps.list_daemon_set_for_all_namespaces(_request_timeout=self.timeout)

    def nodes(self, label_selector: str) -> k8s.V1NodeList:
        return self.core.list_node(label_selector=label_selector, _request_timeout=self.timeout)

    def gateway(self, namespace: str, name: str) -> dict[str, Any]:
        return k8s.CustomObjectsApi(self.api).get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "gateways", name, _request_timeout=self.timeout)

    def gateway_class(self, name: str) -> dict[str, Any]:
        return k8s.CustomObjectsApi(self.api).get_cluster_custom_object(
            "gateway.networking.k8s.io", "v1", "gatewayclasses", name, _request_timeout=self.timeout)

    def api_service(self, name: str) -> dict[str, Any]:
        found = k8s.ApiregistrationV1Api(self.api).read_api_service(name, _request_timeout=self.timeout)
        return self.api.sanitize_for_serialization(found)

    def custom_metrics(self) -> list[str]:
        """The resources the custom metrics API lists, e.g. `pods/vllm_num_requests_waiting`."""
        listed = k8s.CustomObjectsApi(self.api).get_api_resources("custom.metrics.k8s.io", "v1beta1",
                                                                  _request_timeout=self.timeout)
        return [r.name for r in listed.resources or []]

    def envoy_policies(self, namespace: str, plural: str) -> dict[str, Any]:
        return k8s.CustomObjectsApi(self.api).list_namespaced_custom_object(
            "gateway.envoyproxy.io", "v1alpha1", namespace, plural, _request_timeout=self.timeout)

    def pods(self, namespace: str, label_selector: str) -> k8s.V1PodList:
        return self.core.list_namespaced_pod(namespace, label_selector=label_selector, _request_timeout=self.timeout)

    def all_pods(self) -> dict[str, Any]:
        """Every pod of the cluster as `kubectl get pods -A -o json` prints it (camelCase keys)."""
        listed = self.core.list_pod_for_all_namespaces(_request_timeout=self.timeout)
        return self.api.sanitize_for_serialization(listed)


def kube_reader(region: str):
    """A factory from DescribeCluster's answer to a KubeApis on the program's own kubeconfig."""

    def build(cluster: dict[str, Any]) -> KubeApis:
        # The kubernetes client logs and swallows a failed exec plugin, then sends no credentials;
        # a missing `aws` would read as "unauthorised", so say what is missing instead.
        if shutil.which("aws") is None:
            raise FileNotFoundError("the `aws` CLI is not on PATH")
        document = json.loads(kubeconfig(cluster["name"], cluster["endpoint"],
                                         cluster["certificateAuthority"]["data"], region))
        return KubeApis(k8s_config.new_client_from_config_dict(document))

    return build


def cluster_pods(cluster_name: str, region: str) -> dict[str, Any]:
    """The pods of the named cluster, read through the program's own kubeconfig (never the caller's
    current kubectl context, which may point at another cluster): what the node-group guard counts."""
    clients = aws_clients(region)
    cluster = clients.eks.describe_cluster(name=cluster_name)["cluster"]
    return kube_reader(region)(cluster).all_pods()
