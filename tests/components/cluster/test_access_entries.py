"""A created cluster's admin access entries are keyed by each role's ARN: removing or reordering admins touches no
other admin's entry (EKS keeps one entry per principal, so a positional key re-pointed at another principal was a
create-first replacement EKS refuses), and the entries a stack made under the former positional names keep their
state through aliases."""

from __future__ import annotations

import pytest

from llm_serving.cluster import plan_network
from llm_serving.cluster.cluster import Cluster, ClusterSpec, SystemNodes
from stacks.offline.aliases import answers_to
from stacks.offline.diff import diff_resources
from tests.support.components import run

PLATFORM = "arn:aws:iam::123456789012:role/platform-admins"
ONCALL = "arn:aws:iam::123456789012:role/oncall"
ENTRY = "aws:eks/accessEntry:AccessEntry"


def _cluster(*admins: str) -> list[dict]:
    spec = ClusterSpec(
        cluster_name="llm-test", kubernetes_version="1.34",
        network=plan_network("10.0.0.0/16", ["us-east-1a", "us-east-1b"], nat_per_zone=False),
        service_cidr="172.20.0.0/16", deployer_arn="arn:aws:iam::123456789012:role/deployer",
        system_nodes=SystemNodes("m7i.large", 2, 3, 2), admin_role_arns=admins,
        public_access_cidrs=("203.0.113.0/24",))
    return run(lambda: Cluster("c", spec)).resources


@pytest.fixture(scope="module")
def both() -> list[dict]:
    return _cluster(PLATFORM, ONCALL)


def test_removing_the_first_admin_touches_no_other_admins_entry(both):
    second_only = _cluster(ONCALL)
    diff = diff_resources(both, second_only, "test", "main")
    assert not diff.of("replace") and not diff.of("create")
    deleted = {(c.type, c.name) for c in diff.of("delete")}
    assert {t for t, _ in deleted} == {ENTRY, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"}
    assert all("platform-admins" in name for _, name in deleted)


def test_entries_made_under_positional_names_are_kept_by_their_aliases(both):
    resources = both
    aliases = answers_to(resources)
    for position, arn in enumerate((PLATFORM, ONCALL)):
        (entry,) = [r for r in resources if r["type"] == ENTRY and r["inputs"]["principalArn"] == arn]
        former = entry["urn"].replace(f"::{entry['name']}", f"::c-access-admin-{position}")
        assert former in aliases[entry["urn"]]
        # The alias goes by today's position: if the same update removes an admin above, the state found under it is
        # another principal's entry, replaced; deleted first, EKS never sees two entries for one principal.
        assert entry["options"]["deleteBeforeReplace"] is True
