"""Shared pieces of the preflight tests: stubbed boto3 clients (botocore's Stubber validates every
request and response against the service model), a Kubernetes reader returning the client's own
model objects, and a context over a real stack's intent."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import botocore.session
from botocore.stub import Stubber
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from stacks import environment
from stacks.config.files import stack_file_path
from stacks.preflight import Context, intent

# One botocore session for every test's clients: its loader parses each service model once (EC2's is
# several MB of JSON, 0.1-0.3 s a client); each test still gets new clients with their own Stubbers.
_BOTOCORE = botocore.session.get_session()
# boto3 injects upload_file and friends into the S3 client class once per boto3 Session on a botocore
# session, and refuses a second injection: every test's S3 client comes from this one Session.
_S3_SESSION = boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing",
                            botocore_session=botocore.session.get_session())

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SCHEMAS = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "addons"
OURS = {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod"}


def stack_intent(stack: str = "prod", **changes: Any):
    _, config = environment.load_stack_file(stack_file_path(stack))
    found = intent(stack, "us-east-1", config)
    return dataclasses.replace(found, **changes) if changes else found


_SESSION = boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing",
                         botocore_session=_BOTOCORE)
# Each service's client is made once per process: making one builds a method per API operation (EC2 has
# about 600), 10-25 ms a client and about 2.5 s of CPU for the ~250 the preflight tests made. Every Aws
# puts new Stubbers on them, after deactivating the previous Aws's: no response queued for one test
# can answer another's call, and a Stubber's handlers are all a test adds to a client.
_CLIENTS: dict[str, Any] = {}
_ACTIVE: list[Stubber] = []


def _client(name: str) -> Any:
    if name not in _CLIENTS:
        _CLIENTS[name] = (_S3_SESSION if name == "s3" else _SESSION).client(
            "service-quotas" if name == "quotas" else name)
    return _CLIENTS[name]


SERVICES = ("eks", "ec2", "quotas", "s3", "ssm", "iam")


class Aws:
    """The clients preflight reads through, each behind an active Stubber of its own."""

    def __init__(self) -> None:
        while _ACTIVE:
            _ACTIVE.pop().deactivate()
        self.eks, self.ec2, self.quotas, self.s3, self.ssm, self.iam = (_client(name) for name in SERVICES)
        self.stubs = {name: Stubber(getattr(self, name)) for name in SERVICES}
        for stub in self.stubs.values():
            stub.activate()
            _ACTIVE.append(stub)

    def respond(self, service: str, operation: str, response: dict, params: dict | None = None) -> None:
        self.stubs[service].add_response(operation, response, params)

    def error(self, service: str, operation: str, code: str, status: int = 400, params: dict | None = None) -> None:
        self.stubs[service].add_client_error(operation, service_error_code=code, service_message=f"{code} (test)",
                                             http_status_code=status, expected_params=params)

    def done(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


def not_found(reason: str = "Not Found") -> ApiException:
    return ApiException(status=404, reason=reason)


class FakeKube:
    """A KubeReader over fixed objects; what is missing answers 404, `refuse` answers 403."""

    def __init__(self, *, crds=(), secrets=None, services=None, issuers=None, deployments=(), daemon_sets=(),
                 refuse=(), namespaces_status: int | None = None):
        self.crds = {c.metadata.name: c for c in crds}
        self.secrets = secrets or {}
        self.services = services or {}
        self.issuers = issuers or {}
        self.deployments = list(deployments)
        self.helm_daemons = list(daemon_sets)
        self.refuse = set(refuse)
        self.namespaces_status = namespaces_status

    def _guard(self, call: str) -> None:
        if call in self.refuse:
            raise ApiException(status=403, reason="Forbidden")

    def version(self) -> k8s.VersionInfo:
        self._guard("version")
        return k8s.VersionInfo(build_date="2026-11-01T00:00:00Z", compiler="gc", git_commit="0" * 40,
                               git_tree_state="clean", git_version="v1.34.2-eks-113cf36", go_version="go1.24",
                               major="1", minor="34", platform="linux/amd64")

    def list_namespaces(self) -> k8s.V1NamespaceList:
        if self.namespaces_status is not None:
            raise ApiException(status=self.namespaces_status, reason="Unauthorized")
        return k8s.V1NamespaceList(items=[k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="default"))])

    def crd(self, name: str) -> k8s.V1CustomResourceDefinition:
        self._guard("crd")
        if name not in self.crds:
            raise not_found()
        return self.crds[name]

    def secret(self, namespace: str, name: str) -> k8s.V1Secret:
        self._guard("secret")
        if (namespace, name) not in self.secrets:
            raise not_found()
        return self.secrets[(namespace, name)]

    def service(self, namespace: str, name: str) -> k8s.V1Service:
        self._guard("service")
        if (namespace, name) not in self.services:
            raise not_found()
        return self.services[(namespace, name)]

    def cluster_issuer(self, name: str) -> dict:
        self._guard("cluster_issuer")
        if name not in self.issuers:
            raise not_found()
        return self.issuers[name]

    def helm_deployments(self) -> k8s.V1DeploymentList:
        self._guard("helm_deployments")
        return k8s.V1DeploymentList(items=self.deployments)

    def helm_daemon_sets(self) -> k8s.V1DaemonSetList:
        self._guard("helm_daemon_sets")
        return k8s.V1DaemonSetList(items=self.helm_daemons)


def crd(name: str, versions=("v1",)) -> k8s.V1CustomResourceDefinition:
    plural, group = name.split(".", 1)
    return k8s.V1CustomResourceDefinition(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1CustomResourceDefinitionSpec(
            group=group, scope="Namespaced",
            names=k8s.V1CustomResourceDefinitionNames(plural=plural, kind=plural.title()),
            versions=[k8s.V1CustomResourceDefinitionVersion(name=v, served=True, storage=True) for v in versions],
        ),
    )


def helm_deployment(chart_label: str, release: str, namespace: str) -> k8s.V1Deployment:
    return k8s.V1Deployment(metadata=k8s.V1ObjectMeta(
        name=release, namespace=namespace,
        labels={"helm.sh/chart": chart_label, "app.kubernetes.io/managed-by": "Helm"},
        annotations={"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}))


def service(namespace: str, name: str, manager: str) -> k8s.V1Service:
    fields = [k8s.V1ManagedFieldsEntry(manager=manager, operation="Apply", api_version="v1")]
    return k8s.V1Service(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, managed_fields=fields),
                         spec=k8s.V1ServiceSpec(ports=[k8s.V1ServicePort(port=8000)]))


CLUSTER = {
    "name": "llm-prod", "arn": "arn:aws:eks:us-east-1:111122223333:cluster/llm-prod", "version": "1.34",
    "endpoint": "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com", "status": "ACTIVE",
    "resourcesVpcConfig": {"vpcId": "vpc-0abc0000000000001", "subnetIds": []},
    "certificateAuthority": {"data": "LS0tLS1CRUdJTi0tLS0t"},
}


def context(aws: Aws, the_intent=None, *, kube: FakeKube | None = None, cluster: dict | None = None,
            hub_url: str = "http://127.0.0.1:9", hub_token: str | None = None, account: str | None = None) -> Context:
    return Context(
        intent=the_intent or stack_intent(), eks=aws.eks, ec2=aws.ec2, quotas=aws.quotas, s3=aws.s3, ssm=aws.ssm,
        iam=aws.iam, account=account,
        hub_url=hub_url, hub_token=hub_token, now=NOW,
        kube_factory=lambda _cluster: kube or FakeKube(), cluster=cluster, timeout_seconds=2.0,
    )


def addon(name: str, *, tags: dict | None = None, version: str = "v1.0.0-eksbuild.1", status: str = "ACTIVE",
          configuration: dict | None = None) -> dict:
    found = {"addonName": name, "clusterName": "llm-prod", "status": status, "addonVersion": version,
             "tags": tags or {}}
    if configuration is not None:
        found["configurationValues"] = json.dumps(configuration)
    return {"addon": found}


def schema(name: str) -> str:
    return (SCHEMAS / f"{name}.configuration.schema.json").read_text()
