"""Where a model's replicas run: spread over zones as a preference, over hosts as far as the node group allows."""

from __future__ import annotations

import pytest

from tests.support import reference


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_replicas_spread_over_zones_as_a_preference_and_over_hosts_as_far_as_the_group_allows(rendered, stack):
    from llm_serving.stack import planning
    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_file_path(stack))[1]
    model = config.models[0]
    (vllm,) = [m for m in rendered[stack].manifests if m["kind"] == "Deployment"
               and m["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"]
    host, zone = vllm["spec"]["template"]["spec"]["topologySpreadConstraints"]
    selector = {"matchLabels": vllm["spec"]["selector"]["matchLabels"]}
    assert zone == {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": selector}
    low = planning.replica_bounds(model)[0]
    if low >= 2:
        # prod: its two minimum replicas on two nodes, required; a replica lost with its node waits for a new node
        # (minDomains counts missing nodes as empty) rather than doubling up on the survivor for good.
        assert planning.node_counts(config).max_nodes >= low
        assert host == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                        "minDomains": low, "nodeTaintsPolicy": "Honor", "labelSelector": selector}
    else:  # dev's one replica (or none, idle): nothing to spread
        assert host == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}
    assert reference.kubernetes_object_errors(vllm, config.cluster.kubernetes_version) == []


def test_host_spread_is_required_only_where_the_node_group_can_hold_the_minimum_on_as_many_nodes():
    from dataclasses import replace

    from llm_serving.stack import planning
    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_file_path("prod"))[1]
    model = config.models[0]
    group = config.gpu_node_group
    assert planning.host_spread_domains(config, model) == 2
    one_node = replace(config, gpu_node_group=replace(group, scaling=replace(group.scaling, max_nodes=1,
                                                                              min_nodes=1, desired_nodes=1)))
    assert planning.host_spread_domains(one_node, model) == 0  # both replicas share the one node: a preference
    three = replace(model, autoscaling=replace(model.autoscaling, min_replicas=3, max_replicas=4))
    assert planning.node_counts(config).max_nodes >= 3
    assert planning.host_spread_domains(replace(config, models=(three,)), three) == 3
    five = replace(model, autoscaling=replace(model.autoscaling, min_replicas=5, max_replicas=5))
    assert planning.host_spread_domains(replace(config, models=(five,)), five) == 0  # more than the group's nodes
    # Two models on one group: a node without this model's pods would cap the others at one: a preference.
    other = replace(model, name="other")
    assert planning.host_spread_domains(replace(config, models=(model, other)), model) == 0
