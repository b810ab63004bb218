"""The cluster checks' pass, fail and could-not-check, over Kubernetes client model objects."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from stacks.preflight import catalog
from stacks.preflight.context import guarded
from stacks.preflight.kube_checks import ALB_CONTROLLER_CRDS, PROMETHEUS_CRDS
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import CLUSTER, Aws, FakeKube, context, crd, helm_deployment, service, stack_intent


@pytest.fixture
def aws():
    clients = Aws()
    yield clients
    clients.done()


def run(check_id: str, ctx):
    (check,) = [c for c in catalog.CHECKS if c.id == check_id]
    return guarded(check.id, check.aws, lambda: check.run(ctx))


def one(check_id: str, aws, kube: FakeKube, the_intent=None):
    (finding,) = run(check_id, context(aws, the_intent, kube=kube, cluster=CLUSTER))
    return finding


def test_endpoint_reachable_and_authorised(aws):
    finding = one("cluster.endpoint", aws, FakeKube())
    assert (finding.outcome, finding.reason) == (
        Outcome.PASS, "API server v1.34.2-eks-113cf36 reachable; this identity is authorised")


def test_endpoint_that_does_not_know_the_caller_fails_with_the_access_entry_fix(aws):
    finding = one("cluster.endpoint", aws, FakeKube(namespaces_status=401))
    assert finding.outcome is Outcome.FAIL
    assert "no EKS access entry or aws-auth mapping" in finding.reason
    assert "aws eks create-access-entry" in finding.fix


def test_endpoint_forbidden_or_unreachable_could_not_check(aws):
    assert one("cluster.endpoint", aws, FakeKube(namespaces_status=403)).outcome is Outcome.COULD_NOT_CHECK
    assert one("cluster.endpoint", aws, FakeKube(refuse={"version"})).outcome is Outcome.COULD_NOT_CHECK


def test_kubernetes_checks_wait_for_the_cluster(aws):
    (finding,) = run("cluster.endpoint", context(aws, kube=FakeKube()))
    assert (finding.outcome, finding.fix) == (Outcome.COULD_NOT_CHECK, "fix cluster.exists first")


def test_a_missing_aws_cli_is_could_not_check_naming_it(aws):
    def no_cli(_cluster):
        raise FileNotFoundError("the `aws` CLI is not on PATH")

    ctx = context(aws, cluster=CLUSTER)
    ctx.kube_factory = no_cli
    (finding,) = run("cluster.endpoint", ctx)
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.fix == "install the AWS CLI (the program's kubeconfig runs `aws eks get-token`)"


def test_prometheus_operator_crds_when_prometheus_is_existing(aws):
    assert stack_intent().prometheus_existing  # prod uses the cluster's Prometheus Operator
    present = FakeKube(crds=[crd(n) for n in PROMETHEUS_CRDS])
    assert one("k8s.prometheus-operator", aws, present).outcome is Outcome.PASS
    partial = FakeKube(crds=[crd(n) for n in PROMETHEUS_CRDS[:2]])
    finding = one("k8s.prometheus-operator", aws, partial)
    assert finding.outcome is Outcome.FAIL
    assert finding.reason.startswith("missing: prometheusrules.monitoring.coreos.com")
    old = FakeKube(crds=[crd(n, versions=("v1beta1",)) for n in PROMETHEUS_CRDS])
    assert "serves v1beta1, not v1" in one("k8s.prometheus-operator", aws, old).reason
    assert one("k8s.prometheus-operator", aws, FakeKube(refuse={"crd"})).outcome is Outcome.COULD_NOT_CHECK
    assert run("k8s.prometheus-operator", context(aws, stack_intent("dev"), cluster=CLUSTER)) == []


def test_alb_controller_crds_when_the_controller_is_existing(aws):
    alb = stack_intent(alb_controller_existing=True)
    assert one("k8s.alb-controller", aws, FakeKube(crds=[crd(n) for n in ALB_CONTROLLER_CRDS]), alb).outcome \
        is Outcome.PASS
    finding = one("k8s.alb-controller", aws, FakeKube(), alb)
    assert finding.outcome is Outcome.FAIL and finding.fix.endswith("edge.controller: install)")
    assert one("k8s.alb-controller", aws, FakeKube(refuse={"crd"}), alb).outcome is Outcome.COULD_NOT_CHECK


def issuer(ready: str) -> dict:
    return {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": "letsencrypt-prod"},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_cert_manager_issuer_exists_and_is_ready(aws):
    assert stack_intent().cert_manager_issuer == "letsencrypt-prod"
    assert one("k8s.cert-manager-issuer", aws, FakeKube(issuers={"letsencrypt-prod": issuer("True")})).outcome \
        is Outcome.PASS
    assert one("k8s.cert-manager-issuer", aws, FakeKube(issuers={"letsencrypt-prod": issuer("False")})).reason \
        == "ClusterIssuer letsencrypt-prod is not Ready"
    assert one("k8s.cert-manager-issuer", aws, FakeKube()).outcome is Outcome.FAIL
    assert one("k8s.cert-manager-issuer", aws, FakeKube(refuse={"cluster_issuer"})).outcome is Outcome.COULD_NOT_CHECK


def tls(kind: str) -> k8s.V1Secret:
    return k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="llm-tls", namespace="envoy-gateway-system"), type=kind)


def test_tls_secret_exists_with_the_tls_type(aws):
    with_secret = stack_intent(tls_secret="llm-tls")
    place = ("envoy-gateway-system", "llm-tls")
    assert one("k8s.tls-secret", aws, FakeKube(secrets={place: tls("kubernetes.io/tls")}), with_secret).outcome \
        is Outcome.PASS
    assert one("k8s.tls-secret", aws, FakeKube(secrets={place: tls("Opaque")}), with_secret).reason == (
        "Secret envoy-gateway-system/llm-tls is of type Opaque, not kubernetes.io/tls")
    missing = one("k8s.tls-secret", aws, FakeKube(), with_secret)
    assert missing.outcome is Outcome.FAIL and missing.fix.startswith("kubectl create secret tls llm-tls -n envoy")
    assert one("k8s.tls-secret", aws, FakeKube(refuse={"secret"}), with_secret).outcome is Outcome.COULD_NOT_CHECK


def test_a_service_named_like_a_model_collides_unless_pulumi_manages_it(aws):
    place = ("llm-serving", "llama-70b")
    free = one("k8s.collisions", aws, FakeKube())
    assert (free.outcome, free.reason) == (Outcome.PASS, "Service llm-serving/llama-70b: free")
    ours = FakeKube(services={place: service(*place, "pulumi-kubernetes-1a2b3c4d")})
    assert one("k8s.collisions", aws, ours).reason == "Service llm-serving/llama-70b: this program's"
    theirs = one("k8s.collisions", aws, FakeKube(services={place: service(*place, "kubectl-client-side-apply")}))
    assert theirs.outcome is Outcome.FAIL and "managed by kubectl-client-side-apply" in theirs.reason
    assert one("k8s.collisions", aws, FakeKube(refuse={"service"})).outcome is Outcome.COULD_NOT_CHECK


def conflicts(aws, kube):
    return {f.reason.split(":")[0]: f for f in run("k8s.install-conflicts", context(aws, kube=kube, cluster=CLUSTER))}


def test_install_conflicts_find_other_releases_rivals_and_helm_twins_of_addons(aws):
    kube = FakeKube(deployments=[
        helm_deployment("keda-2.20.2", "keda", "keda"),  # where the program puts its own: not a conflict
        helm_deployment("keda-add-ons-http-0.10.0", "http-add-on", "keda"),  # another chart
        helm_deployment("karpenter-1.8.0", "karpenter", "karpenter"),  # rival of cluster-autoscaler
        helm_deployment("aws-efs-csi-driver-4.4.1", "efs", "kube-system"),  # the add-on's software as a chart
        helm_deployment("gateway-helm-v1.9.0", "eg", "platform-gateway"),  # a second Envoy Gateway
    ])
    found = conflicts(aws, kube)
    assert found["keda in keda"].outcome is Outcome.PASS
    assert found["cluster-autoscaler in kube-system"].reason.endswith("karpenter release karpenter in karpenter")
    assert found["cluster-autoscaler in kube-system"].fix == "nodeAutoscaling.mode: existing"
    assert found["aws-efs-csi-driver (as an EKS add-on)"].outcome is Outcome.FAIL
    assert found["gateway-helm in envoy-gateway-system"].reason.endswith("gateway-helm release eg in platform-gateway")
    assert found["nvidia-device-plugin in nvidia-device-plugin"].outcome is Outcome.PASS


def test_install_conflicts_refused_could_not_check(aws):
    (finding,) = run("k8s.install-conflicts", context(aws, kube=FakeKube(refuse={"helm_deployments"}), cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason == "Kubernetes API refused the read (403 Forbidden)"
