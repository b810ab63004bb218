"""The real Kubernetes reader against a local API server on 127.0.0.1: the calls it makes, and the
client's model objects and errors it hands the checks."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from stacks.preflight import session
from tests.support.local_http import serving

VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.2-eks-113cf36", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.24",
           "compiler": "gc", "platform": "linux/amd64"}

# A replica still draining on the old generation: Terminating keeps phase Running.
POD = {"metadata": {"name": "llama-70b-5d9c-abcde", "namespace": "llm-serving",
                    "deletionTimestamp": "2026-12-01T10:00:00Z"},
       "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"}],
                "nodeSelector": {"llm-serving/node-generation": "0da3900dc4"}},
       "status": {"phase": "Running"}}


class ApiServer(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):
        type(self).seen.append(self.path)
        if self.path == "/version/":
            status, body = 200, VERSION
        elif self.path.startswith("/api/v1/namespaces?"):
            status, body = 401, {"kind": "Status", "code": 401, "reason": "Unauthorized"}
        elif self.path == "/api/v1/pods":
            status, body = 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [POD]}
        elif self.path.startswith("/apis/apps/v1/deployments?"):
            keda = {"name": "keda-operator", "namespace": "keda", "labels": {"helm.sh/chart": "keda-2.20.2"}}
            status, body = 200, {"kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": {},
                                 "items": [{"metadata": keda}]}
        else:
            status, body = 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


@pytest.fixture
def reader():
    ApiServer.seen = []
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)) as httpd:
        configuration = k8s.Configuration(host=f"http://127.0.0.1:{httpd.server_address[1]}")
        yield session.KubeApis(k8s.ApiClient(configuration), timeout=5)


def test_reads_become_client_objects_and_errors_api_exceptions(reader):
    assert reader.version().git_version == "v1.34.2-eks-113cf36"
    with pytest.raises(ApiException) as refused:
        reader.list_namespaces()
    assert refused.value.status == 401
    with pytest.raises(ApiException) as missing:
        reader.crd("servicemonitors.monitoring.coreos.com")
    assert missing.value.status == 404
    (deployment,) = reader.helm_deployments().items
    assert isinstance(deployment, k8s.V1Deployment) and deployment.metadata.labels["helm.sh/chart"] == "keda-2.20.2"
    assert ApiServer.seen == [
        "/version/", "/api/v1/namespaces?limit=1",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/servicemonitors.monitoring.coreos.com",
        "/apis/apps/v1/deployments?labelSelector=app.kubernetes.io%2Fmanaged-by%3DHelm",
    ]


def test_the_reader_is_built_on_the_programs_kubeconfig(monkeypatch):
    built = {}
    monkeypatch.setattr(session.shutil, "which", lambda name: "/usr/local/bin/aws")
    monkeypatch.setattr(session.k8s_config, "new_client_from_config_dict",
                        lambda document: built.setdefault("doc", document) and k8s.ApiClient())
    cluster = {"name": "llm-prod", "endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
               "certificateAuthority": {"data": "LS0t"}}
    session.kube_reader("us-east-1")(cluster)
    user = built["doc"]["users"][0]["user"]["exec"]
    assert built["doc"]["clusters"][0]["cluster"]["server"] == cluster["endpoint"]
    assert user["command"] == "aws"
    assert user["args"] == ["eks", "get-token", "--cluster-name", "llm-prod", "--region", "us-east-1",
                            "--output", "json"]


def test_without_the_aws_cli_the_reader_says_so(monkeypatch):
    monkeypatch.setattr(session.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="the `aws` CLI is not on PATH"):
        session.kube_reader("us-east-1")({"name": "x", "endpoint": "https://x", "certificateAuthority": {"data": ""}})


def test_pods_are_read_in_kubectls_json_shape_for_the_node_group_guard(reader):
    pods = reader.all_pods()
    (pod,) = pods["items"]
    assert pod["spec"]["nodeSelector"] == {"llm-serving/node-generation": "0da3900dc4"}
    assert pod["status"]["phase"] == "Running" and pod["metadata"]["namespace"] == "llm-serving"
    assert ApiServer.seen == ["/api/v1/pods"]


def test_cluster_pods_reads_the_named_cluster_through_the_programs_kubeconfig(monkeypatch, reader):
    import boto3
    from botocore.stub import Stubber

    eks = boto3.client("eks", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    cluster = {"name": "llm-prod", "endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
               "certificateAuthority": {"data": "LS0t"}}
    built = []
    with Stubber(eks) as stub:
        stub.add_response("describe_cluster", {"cluster": cluster}, {"name": "llm-prod"})
        monkeypatch.setattr(session, "aws_clients", lambda region: session.AwsClients("arn:x", eks, None, None, None))
        monkeypatch.setattr(session, "kube_reader",
                            lambda region: lambda found: built.append((region, found)) or reader)
        pods = session.cluster_pods("llm-prod", "us-east-1")
        stub.assert_no_pending_responses()
    assert built == [("us-east-1", cluster)]
    assert [p["metadata"]["name"] for p in pods["items"]] == ["llama-70b-5d9c-abcde"]
