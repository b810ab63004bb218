"""`python -m stacks preflight`: no credentials is one line and exit 2; a run prints the table, JSON
and the job-summary markdown, and exits 1 when a check fails."""

from __future__ import annotations

import json
import os

import pytest

from stacks import cli
from stacks.preflight import session
from stacks.preflight.kube_checks import ALB_CONTROLLER_CRDS, PROMETHEUS_CRDS
from tests.stacks.preflight.support import CLUSTER, OURS, Aws, FakeKube, addon, crd
from tests.stacks.preflight.test_aws_checks import PROD_SUBNETS, offerings, quota, subnets
from tests.stacks.preflight.test_hub import PATH, Hub, info, server  # noqa: F401 - the server fixture
from tests.stacks.preflight.test_node_checks import PROD_RELEASE_PARAMETER, parameter
from tests.stacks.preflight.test_reference_checks import security_groups
from tests.support.cli import run_stacks

NO_CREDENTIALS = ("preflight prod: no AWS credentials found (set AWS_PROFILE and run `aws sso login`, or export "
                  "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); nothing was checked\n")


def test_without_aws_credentials_one_line_and_exit_2():
    # Every variable cleared: no keys, no profile files, and no instance metadata lookup (no network).
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent/config",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials", "AWS_EC2_METADATA_DISABLED": "true"}
    done = run_stacks("preflight", "prod", env=env)  # exactly this environment, in this process
    assert (done.returncode, done.stdout, done.stderr) == (2, "", NO_CREDENTIALS)


def test_an_unknown_profile_is_one_line_too():
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent/config",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_PROFILE": "nobody"}
    done = run_stacks("preflight", "prod", env=env)  # exactly this environment, in this process
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("preflight prod: cannot use the AWS credentials: The config profile (nobody) could not "
                           "be found; nothing was checked\n")


def test_a_stack_without_a_region_is_refused_before_any_call(stack_dir, monkeypatch, capsys):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    path = stack_dir / "Pulumi.prod.yaml"
    path.write_text(path.read_text().replace("  aws:region: us-east-1\n", ""))
    assert cli.main(["preflight", str(path)]) == 2
    assert capsys.readouterr().err == ("preflight prod: no AWS region: set aws:region in the stack file, pass "
                                       "--region or export AWS_REGION; nothing was checked\n")


def stub_prod(aws: Aws) -> None:
    """Prod's calls in the order the checks make them: everything fine except the vCPU quota and the placeholder
    staging role prod commits (its account is the AWS documentation's example: no call is made for it)."""
    aws.respond("eks", "describe_cluster", {"cluster": CLUSTER})
    aws.respond("ec2", "describe_subnets", subnets(), {"SubnetIds": [s for s, _ in PROD_SUBNETS]})
    aws.respond("ec2", "describe_security_groups", security_groups("sg-0cc00000000000001"),
                {"GroupIds": ["sg-0cc00000000000001"]})
    aws.respond("eks", "describe_addon", addon("eks-pod-identity-agent"))
    aws.respond("eks", "describe_addon", addon("vpc-cni", configuration={"enableNetworkPolicy": "true"}))
    aws.respond("eks", "describe_addon", addon("eks-node-monitoring-agent", tags=OURS))
    aws.respond("eks", "describe_addon", addon("aws-efs-csi-driver", tags=OURS))
    aws.respond("eks", "describe_addon", addon("eks-node-monitoring-agent", tags=OURS, version="v1.7.0-eksbuild.1"))
    aws.respond("eks", "describe_addon_configuration", {
        "addonName": "eks-node-monitoring-agent", "addonVersion": "v1.7.0-eksbuild.1",
        # Any object: the schema itself is test_aws_checks' business; here only the report is.
        "configurationSchema": json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})})
    aws.respond("ssm", "get_parameter", parameter(PROD_RELEASE_PARAMETER), {"Name": PROD_RELEASE_PARAMETER})
    aws.respond("quotas", "get_service_quota", quota(384))
    aws.respond("ec2", "describe_instance_type_offerings", offerings(["us-east-1a", "us-east-1b", "us-east-1c"]))


@pytest.fixture
def prod_account(monkeypatch):
    aws = Aws()
    stub_prod(aws)
    # prod runs gateway mode on an existing cluster: its load balancer controller is a prerequisite.
    kube = FakeKube(crds=[crd(n) for n in (*PROMETHEUS_CRDS, *ALB_CONTROLLER_CRDS)], issuers={"letsencrypt-prod": {
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}})
    monkeypatch.setattr(session, "aws_clients", lambda region: session.AwsClients(
        "arn:aws:sts::111122223333:assumed-role/preflight/ci", aws.eks, aws.ec2, aws.quotas, aws.s3, aws.ssm, aws.iam))
    monkeypatch.setattr(session, "kube_reader", lambda region: lambda cluster: kube)
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    yield aws
    aws.done()


def test_a_run_prints_json_and_the_job_summary_and_exits_1_on_a_failure(prod_account, server, tmp_path, capsys):  # noqa: F811
    Hub.routes = {PATH: (200, info())}
    summary = tmp_path / "summary.md"
    code = cli.main(["preflight", "prod", "--json", "--hub-url", server, "--summary", str(summary)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["exitCode"] == 1
    failed = [c for c in report["checks"] if c["outcome"] == "fail"]
    # prod commits a placeholder staging role (the example account 123456789012): preflight says so.
    assert [c["check"] for c in failed] == ["iam.references", "quota.vcpus"]
    assert failed[0]["fix"] == "set weightsStorage.efs.stagingNodeRoleArn to the real role's ARN"
    assert failed[1]["fix"].startswith("aws service-quotas request-service-quota-increase --service-code ec2")
    assert report["summary"]["fail"] == 2
    assert sum(report["summary"].values()) == len(report["checks"])
    markdown = summary.read_text()
    assert markdown.startswith(f"### preflight prod: {report['summary']['pass']} pass, 2 fail, ")
    assert "| fail | `quota.vcpus` |" in markdown


def test_the_table_shows_the_fix_under_a_failed_line(prod_account, server, capsys):  # noqa: F811
    Hub.routes = {PATH: (200, info())}
    assert cli.main(["preflight", "prod", "--hub-url", server]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "preflight prod as arn:aws:sts::111122223333:assumed-role/preflight/ci in us-east-1"
    (at,) = [i for i, line in enumerate(lines) if line.startswith("fail") and "quota.vcpus" in line]
    assert lines[at + 1].strip().startswith("fix: aws service-quotas")
    assert lines[-1].startswith("preflight prod: ") and lines[-1].endswith(" pass, 2 fail, 0 could not check")
