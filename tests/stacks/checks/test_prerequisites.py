"""The first-up checklist: which stacks need what, and docs/operations.md shows exactly this list."""

from __future__ import annotations

from typing import Any

from llm_serving.platform.args import validate
from stacks.checks import prerequisites
from stacks.config import ServingStackArgs
from stacks.config.files import PROJECT_DIR
from tests.stacks.checks.test_gpu_node_group_checks import BASE


def keys(**top: Any) -> list[str]:
    return [item.key for item in prerequisites.required(validate(ServingStackArgs, {**BASE, **top}))]


def test_the_efs_backend_needs_the_pod_identity_agent_even_without_our_autoscaler():
    # The EFS CSI controller authenticates through Pod Identity too: operations.md said only the autoscaler did.
    assert "pod-identity-agent" in keys(nodeAutoscaling={"mode": "none"})
    assert "pod-identity-agent" in keys()
    without = keys(nodeAutoscaling={"mode": "none"}, weightsStorage={"efs": {"installCsiDriver": False}})
    assert "pod-identity-agent" not in without


def test_a_default_stack_needs_exactly_these():
    assert keys() == ["cluster", "subnets", "cpu-node", "pod-identity-agent", "addons-absent", "addon-versions",
                      "gpu-quota", "cert-manager", "load-balancer-controller", "prometheus", "secrets"]


def test_conditional_items_follow_their_settings():
    assert "fsx-root" in keys(weightsStorage={"backend": "fsxLustre"})
    existing = {"host": "llm.example.com", "controller": "existing", "tls": {"secretName": "llm-tls"}}
    assert "tls-secret" in keys(edge=existing)
    assert "cert-manager" not in keys(edge=existing)
    no_addons = keys(gpuNodeGroup={**BASE["gpuNodeGroup"], "autoRepair": {"installMonitoringAgent": False}},
                     weightsStorage={"efs": {"installCsiDriver": False}})
    assert "addons-absent" not in no_addons and "addon-versions" not in no_addons
    # Gateway mode's NLB needs the cluster's load balancer controller, unless the stack installs one.
    assert "load-balancer-controller" not in keys(cluster={**BASE["cluster"], "loadBalancerController": "install"})


def test_described_items_name_the_stacks_values():
    lines = prerequisites.describe(validate(ServingStackArgs, BASE))
    (versions,) = [line for line in lines if line.startswith("addon-versions")]
    assert versions.startswith(
        "addon-versions (eks-node-monitoring-agent v1.7.0-eksbuild.1, aws-efs-csi-driver v3.4.1-eksbuild.1): ")
    (agent,) = [line for line in lines if line.startswith("pod-identity-agent")]
    assert agent.startswith("pod-identity-agent (cluster llm-prod): The `eks-pod-identity-agent` add-on is ACTIVE.")


def test_operations_page_shows_the_checklist_as_generated():
    page = (PROJECT_DIR / "docs" / "operations.md").read_text(encoding="utf-8")
    assert prerequisites.splice(page) == page, "run `python -m stacks.checks.prerequisites --write docs/operations.md`"
    assert page.count("| `") >= len(prerequisites.PREREQUISITES)


def test_a_lora_adapter_on_s3_needs_the_pod_identity_agent_and_preflight_names_it():
    # Its staging Job reads the prefix under a Pod Identity role: without the agent the Job gets no credentials.
    from stacks.preflight.intent import _pod_identity_users

    adapter = {"name": "support-v1",
               "s3": {"uri": "s3://example-adapters/qwen/support-v1/", "manifestSha256": "3" * 64}}
    plain = {"nodeAutoscaling": {"mode": "none"}, "weightsStorage": {**BASE["weightsStorage"],
                                                                     "efs": {**BASE["weightsStorage"]["efs"],
                                                                             "installCsiDriver": False}}}
    with_adapter = {**plain, "models": [{**BASE["models"][0], "lora": {"adapters": [adapter]}}]}
    assert "pod-identity-agent" not in keys(**plain)
    assert "pod-identity-agent" in keys(**with_adapter)
    config = validate(ServingStackArgs, {**BASE, **with_adapter})
    assert _pod_identity_users(config) == ("the staging Jobs' LoRA adapter roles (S3)",)
