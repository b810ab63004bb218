"""What preflight believes the program sends agrees with the offline render of every stack."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from llm_serving import serving
from stacks import environment
from stacks.config.files import stack_file_path
from stacks.preflight import intent
from stacks.preflight.intent import instance_family_letter
from tests.conftest import STACK_NAMES
from tests.stacks.preflight.support import stack_intent


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_addons_and_their_configuration_values_are_the_rendered_ones(rendered, stack):
    addons = rendered[stack].by_type().get("aws:eks/addon:Addon", [])
    sent = {a["inputs"]["addonName"]: json.loads(a["inputs"].get("configurationValues") or "null") for a in addons}
    assert {a.name: a.configuration for a in stack_intent(stack).addons} == sent


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_pod_identity_users_are_what_the_render_associates(rendered, stack):
    by_type = rendered[stack].by_type()
    associations = len(by_type.get("aws:eks/podIdentityAssociation:PodIdentityAssociation", []))
    associations += sum(len(a["inputs"].get("podIdentityAssociations", [])) for a in by_type["aws:eks/addon:Addon"])
    assert len(stack_intent(stack).pod_identity_users) == associations


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_chart_checked_for_conflicts_is_a_rendered_release_at_that_place(rendered, stack):
    releases = {(r["inputs"]["name"], r["inputs"]["namespace"])
                for r in rendered[stack].by_type()["kubernetes:helm.sh/v3:Release"]}
    assert {(c.chart, c.namespace) for c in stack_intent(stack).charts} <= releases


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_model_services_and_tags_are_the_rendered_ones(rendered, stack):
    found = stack_intent(stack)
    services = {(m["metadata"].get("namespace"), m["metadata"]["name"])
                for m in rendered[stack].manifests if m["kind"] == "Service"}
    assert {(found.serving_namespace, name) for name in found.model_services} <= services
    (agent,) = [a for a in rendered[stack].by_type()["aws:eks/addon:Addon"]
                if a["inputs"]["addonName"] == "eks-node-monitoring-agent"]
    assert agent["inputs"]["tags"] == found.tags


def test_peak_nodes_add_the_node_update_group_to_the_bound():
    prod = stack_intent("prod")
    assert (prod.bound_nodes, prod.peak_nodes, prod.vcpus_per_node) == (4, 6, 192)
    assert prod.peak_reason == ("4 node(s) (maxNodes) plus 2 in the new group a node-group update creates beside "
                                "the old one")


def test_a_tokenizer_revision_is_a_second_download_of_tokenizer_files_only():
    _, config = environment.load_stack_file(stack_file_path("prod"))
    model = replace(config.models[0], **{"tokenizer_revision": "a" * 40})
    found = intent("prod", "us-east-1", replace(config, **{"models": [model]}))
    assert [(s.revision, s.key, s.needs_weights) for s in found.sources] == [
        ("1605565b47bb9346c5515c34102e054115b4f98b", "models[llama-70b].revision", True),
        ("a" * 40, "models[llama-70b].tokenizerRevision", False),
    ]
    assert found.sources[1].allow == serving.TOKENIZER_PATTERNS and found.sources[1].ignore == ()


def test_instance_family_letters():
    assert [instance_family_letter(t) for t in ("p5.48xlarge", "p4de.24xlarge", "g6e.48xlarge")] == ["p", "p", "g"]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_ami_release_and_the_references_checked_are_the_rendered_ones(rendered, stack):
    found = stack_intent(stack)
    groups = [g["inputs"] for g in rendered[stack].by_type().get("aws:eks/nodeGroup:NodeGroup", [])
              if g["inputs"].get("amiType") == found.ami_type]
    assert {g.get("releaseVersion") for g in groups} == ({found.ami_release} if groups else set())
    # Each role and group preflight looks up is one the program hands to AWS (a policy, a mount target's rule).
    sent = json.dumps(rendered[stack].resources)
    for reference in (*found.role_references, *found.security_group_references):
        assert reference.value in sent, reference.key
