"""Environment cloning: how `extends` merges, and `python -m stacks clone`."""

from __future__ import annotations

import pytest
import yaml

from stacks import clone
from stacks.cli import main
from stacks.config import keys as cli_rules
from stacks.config.files import deep_merge
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from stacks.offline import render


def test_objects_merge_key_by_key():
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}


def test_named_lists_merge_by_name_and_append_new_items():
    base = [{"name": "llama", "replicas": 2, "tp": 4}, {"name": "qwen", "replicas": 1}]
    override = [{"name": "llama", "replicas": 1}, {"name": "mistral", "replicas": 1}]
    assert deep_merge(base, override) == [
        {"name": "llama", "replicas": 1, "tp": 4},
        {"name": "qwen", "replicas": 1},
        {"name": "mistral", "replicas": 1},
    ]


def test_other_lists_replace():
    assert deep_merge({"subnets": [{"id": "a"}, {"id": "b"}]}, {"subnets": [{"id": "c"}]}) == {
        "subnets": [{"id": "c"}]
    }


def test_staging_is_prod_with_its_own_capacity_and_cluster(stack_dir):
    _, prod = load_stack_file(stack_dir / "Pulumi.prod.yaml")
    resolved, staging = load_stack_file(stack_dir / "Pulumi.staging.yaml")
    assert resolved.chain == ("staging", "prod")
    assert staging.environment.value == "staging"
    assert staging.cluster.name == "llm-staging"
    assert staging.gpu_node_group.scaling.max_nodes == 2
    assert staging.gpu_node_group.instance_type == prod.gpu_node_group.instance_type
    assert staging.gpu_node_group.ami_release_version == prod.gpu_node_group.ami_release_version
    assert staging.addons == prod.addons
    assert staging.observability == prod.observability


def test_clone_writes_extends_and_overrides_and_validates(stack_dir):
    cloned = clone.clone(
        "prod", "prod-eu", ["environment=prod", "cluster.name=llm-prod-eu", "gpuNodeGroup.scaling.maxNodes=3",
                            "gpuNodeGroup.scaling.desiredNodes=2"], stack_dir,
    )
    path, secrets = cloned.path, cloned.secrets
    assert cloned.warnings == []
    assert secrets == ["apiKey", "hfToken"]
    document = yaml.safe_load(path.read_text())
    placeholder = {"secure": "v1:placeholder:replace-with-pulumi-config-set-secret"}
    assert document == {
        "config": {
            # Provider keys and the keys Pulumi.yaml requires: the CLI reads only this file.
            "aws:region": "us-east-1",
            "llm-serving:extends": "prod",
            "llm-serving:cluster": {"name": "llm-prod-eu"},
            "llm-serving:environment": "prod",
            "llm-serving:gpuNodeGroup": {"scaling": {"maxNodes": 3, "desiredNodes": 2}},
            # Secrets are never inherited: placeholders the render accepts and `make preview` refuses.
            "llm-serving:apiKey": placeholder,
            "llm-serving:hfToken": placeholder,
        }
    }
    assert cli_rules.stack_file_problems(document, cli_rules.load_project(stack_dir), path.name) == []
    # It renders offline as it is.
    assert load_stack_file(path)[1].cluster.name == "llm-prod-eu"
    assert len(render.render_stack(path).resources) > 50


# What a clone of prod into eu-west-1 must say of each value of prod's region (stacks/config/regions.py).
EU_VALUES = ["gpuNodeGroup.subnets=[{id: subnet-0dd00000000000001, availabilityZone: eu-west-1a}, "
             "{id: subnet-0dd00000000000002, availabilityZone: eu-west-1b}]",
             "weightsStorage.efs.stagingNodeSecurityGroupIds=[sg-0dd00000000000001]"]


def test_clone_writes_provider_keys_as_the_cli_spells_them(stack_dir):
    cloned = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1",
                                            "llm-serving:cluster.name=llm-prod-eu", *EU_VALUES], stack_dir)
    path = cloned.path
    config = yaml.safe_load(path.read_text())["config"]
    assert config["aws:region"] == "eu-west-1"
    assert config["llm-serving:cluster"] == {"name": "llm-prod-eu"}
    assert "llm-serving:aws:region" not in config


def test_a_misspelt_provider_key_is_refused_with_the_key_it_meant(stack_dir, monkeypatch, capsys):
    with pytest.raises(ConfigError) as caught:
        clone.clone("dev", "dev-eu", ["aws:regin=eu-west-1", "kubernetes:contxt=eu"], stack_dir)
    assert [(p.got, p.expected) for p in caught.value.problems] == [
        ("aws:regin", "aws:region"), ("kubernetes:contxt", "kubernetes:context")]
    assert not (stack_dir / "Pulumi.dev-eu.yaml").exists()
    # On the command line: one line naming the key and the one meant, exit 2, no traceback.
    monkeypatch.setattr("stacks.config.files.PROJECT_DIR", stack_dir)
    monkeypatch.setattr("stacks.cli.stack_files.PROJECT_DIR", stack_dir)
    assert main(["clone", "dev", "dev-eu", "--set", "aws:regin=eu-west-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert 'no config key regin; did you mean "aws:region"? (got "aws:regin"; expected aws:region)' in err


def test_provider_keys_are_accepted_and_other_namespaces_written_as_given(stack_dir):
    cloned = clone.clone("dev", "dev-b", ["aws:profile=llm-dev", "aws:defaultTags={tags: {team: ml}}",
                                          "kubernetes:enableServerSideApply=true", "gcp:project=elsewhere"], stack_dir)
    config = yaml.safe_load(cloned.path.read_text())["config"]
    assert (config["aws:profile"], config["aws:defaultTags"]) == ("llm-dev", {"tags": {"team": "ml"}})
    # A namespace of no pinned provider is not ours to check: written as the CLI would store it.
    assert config["gcp:project"] == "elsewhere"


def test_a_clone_into_another_region_names_each_value_of_the_bases_region(stack_dir):
    with pytest.raises(ConfigError) as caught:
        clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1"], stack_dir)
    assert [(p.path, p.got) for p in caught.value.problems] == [
        ("cluster.name", "llm-prod"),
        ("gpuNodeGroup.subnets", yaml.safe_load((stack_dir / "Pulumi.prod.yaml").read_text())["config"][
            "llm-serving:gpuNodeGroup"]["subnets"]),
        ("weightsStorage.efs.stagingNodeSecurityGroupIds", ["sg-0cc00000000000001"]),
    ]
    assert caught.value.problems[0].line() == (
        "llm-serving:cluster.name: prod's value holds in us-east-1, not in this clone's aws:region eu-west-1: an "
        "existing cluster is looked up by name in aws:region, and an EKS cluster's name is unique only within an "
        "account and region (got \"llm-prod\"; expected --set 'cluster.name=<its value in eu-west-1>', or --keep "
        "cluster.name when prod's value holds in eu-west-1 too)")
    assert not (stack_dir / "Pulumi.prod-eu.yaml").exists()


def test_set_lifts_the_region_refusal(stack_dir):
    cloned = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1", "cluster.name=llm-prod-eu",
                                            *EU_VALUES], stack_dir)
    assert cloned.kept == []
    validated = load_stack_file(cloned.path)[1]
    assert {s.availability_zone for s in validated.gpu_node_group.subnets} == {"eu-west-1a", "eu-west-1b"}


def test_keep_lifts_the_region_refusal_and_the_file_says_what_was_kept(stack_dir):
    cloned = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1", *EU_VALUES], stack_dir,
                         keep=["cluster.name"])
    assert cloned.kept == ["cluster.name"]
    text = cloned.path.read_text()
    assert "# Kept from prod on purpose (clone --keep), though prod is in another region: cluster.name.\n" in text
    assert "llm-serving:cluster" not in yaml.safe_load(text)["config"]  # inherited, as kept
    # Nor is it warned about as prod's cluster: in eu-west-1 that name is another cluster.
    assert not any(w.startswith("cluster.name") for w in cloned.warnings)


def test_a_clone_into_another_region_is_told_its_prices_are_the_price_tables_region(stack_dir):
    from llm_serving.gpu import instance_price

    cloned = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1", *EU_VALUES], stack_dir,
                         keep=["cluster.name"])
    table = instance_price("p5.48xlarge")
    assert table is not None
    assert cloned.warnings == [
        f"the $/hour that render and plan show for this stack are {table.region}'s On-Demand prices "
        "(llm_serving/gpu/prices.json holds no other region's); eu-west-1's differ"]


def test_a_same_region_clone_is_unchanged(stack_dir):
    # Naming the base's own region is no move: nothing to set or keep, the same warning as ever.
    cloned = clone.clone("prod", "staging-b", ["environment=staging", "aws:region=us-east-1"], stack_dir)
    assert cloned.kept == []
    assert cloned.warnings == [
        "cluster.name is llm-prod, inherited from prod: this stack deploys into prod's cluster; set "
        "--set cluster.name=<cluster> unless that is meant (then --keep cluster.name says so)"]
    # --keep says the base's cluster is meant: no warning.
    assert clone.clone("prod", "staging-c", ["environment=staging"], stack_dir, keep=["cluster.name"]).warnings == []


def test_a_set_with_zones_of_another_region_is_still_warned(stack_dir):
    cloned = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1", "cluster.name=llm-eu",
                                            "weightsStorage.efs.stagingNodeSecurityGroupIds=[sg-0dd00000000000001]",
                                            "gpuNodeGroup.subnets=[{id: subnet-0dd00000000000001, "
                                            "availabilityZone: us-east-1a}]"], stack_dir)
    assert cloned.warnings[0] == (
        "gpuNodeGroup.subnets are in us-east-1a, not in aws:region eu-west-1: set the new region's subnets with "
        "--set 'gpuNodeGroup.subnets=[{id: subnet-..., availabilityZone: ...}]'")


@pytest.mark.parametrize("key", ["aws:foo:bar", ":region", "aws:"])
def test_clone_refuses_a_key_the_cli_cannot_parse(stack_dir, key):
    with pytest.raises(ConfigError) as caught:
        clone.clone("prod", "prod-eu", ["environment=prod", f"{key}=1"], stack_dir)
    assert [p.line() for p in caught.value.problems] == [
        f'llm-serving:--set: the Pulumi CLI cannot parse this config key (got "{key}"; expected key.path=value, '
        "or <namespace>:<name>=value such as aws:region=eu-west-1)"
    ]
    assert not (stack_dir / "Pulumi.prod-eu.yaml").exists()


def test_clone_refuses_to_overwrite_an_existing_stack_file(stack_dir):
    before = (stack_dir / "Pulumi.staging.yaml").read_text()
    with pytest.raises(ConfigError) as caught:
        clone.clone("prod", "staging", [], stack_dir)
    assert caught.value.problems[0].line() == (
        'llm-serving:stack: Pulumi.staging.yaml already exists; not overwriting it (got "staging"; '
        "expected the name of a new stack)"
    )
    assert (stack_dir / "Pulumi.staging.yaml").read_text() == before


def test_clone_with_an_invalid_override_writes_nothing(stack_dir):
    with pytest.raises(ConfigError) as caught:
        clone.clone("prod", "prod-eu", ["environment=prod", "gpuNodeGroup.scaling.maxNodes=1"], stack_dir)
    assert [p.line() for p in caught.value.problems] == [
        "llm-serving:gpuNodeGroup.scaling.desiredNodes: must lie between minNodes and maxNodes "
        "(got 2; expected 2..1)",
        "llm-serving:gpuNodeGroup.scaling.maxNodes: at peak the models need 2 nodes (llama-70b 4 x TP4 = 16 GPUs, "
        "each replica on one node) but the node group supplies 1 x p5.48xlarge (8 GPUs each; maxNodes, with a node "
        "autoscaler) (got 1; expected >= 2)",
        "llm-serving:gpuNodeGroup.scaling.minNodes: must not exceed maxNodes (got 2; expected <= maxNodes (1))",
    ]
    assert not (stack_dir / "Pulumi.prod-eu.yaml").exists()


def test_clone_names_the_secrets_it_must_set_itself(stack_dir):
    cloned = clone.clone("dev", "dev-eu", [], stack_dir)
    path, secrets = cloned.path, cloned.secrets
    assert secrets == ["apiKey", "grafanaAdminPassword", "hfToken"]
    # Placeholders only: no ciphertext of the base's is copied.
    assert path.read_text().count("secure: v1:placeholder:replace-with-pulumi-config-set-secret") == 3


def test_a_clone_of_prod_must_state_its_environment(stack_dir):
    with pytest.raises(ConfigError) as caught:
        clone.clone("prod", "prod-eu", ["cluster.name=llm-prod-eu"], stack_dir)
    assert [p.line() for p in caught.value.problems] == [
        'llm-serving:environment: a clone of prod would inherit environment prod (got "prod"; expected '
        "--set environment=staging (or dev; prod only when meant: --set environment=prod))"]
    assert not (stack_dir / "Pulumi.prod-eu.yaml").exists()
    # A clone of staging (itself a clone of prod) is staging unless it says otherwise.
    assert load_stack_file(clone.clone("staging", "staging-b", ["cluster.name=llm-staging-b"],
                                       stack_dir).path)[1].environment.value == "staging"


def test_a_clone_that_keeps_its_bases_cluster_is_warned(stack_dir):
    cloned = clone.clone("prod", "staging-b", ["environment=staging"], stack_dir)
    assert cloned.warnings == [
        "cluster.name is llm-prod, inherited from prod: this stack deploys into prod's cluster; set "
        "--set cluster.name=<cluster> unless that is meant (then --keep cluster.name says so)"]


def test_set_reaches_into_a_model_by_name(stack_dir):
    cloned = clone.clone("prod", "staging-b", ["environment=staging", "cluster.name=llm-staging-b",
                                               "models[llama-70b].replicas=1", "models[llama-70b].autoscaling="
                                               "{minReplicas: 1, maxReplicas: 2}"], stack_dir)
    assert yaml.safe_load(cloned.path.read_text())["config"]["llm-serving:models"] == [
        {"name": "llama-70b", "replicas": 1, "autoscaling": {"minReplicas": 1, "maxReplicas": 2}}]
    model = load_stack_file(cloned.path)[1].models[0]
    assert (model.name, model.replicas, model.autoscaling.max_replicas) == ("llama-70b", 1, 2)


@pytest.mark.parametrize(("setting", "line"), [
    ("aws:region=", 'llm-serving:--set: an empty value for provider key aws:region (got "aws:region="; expected a '
                    "value, e.g. aws:region=eu-west-1)"),
    ("cluster.name=[unclosed", 'llm-serving:--set: the value is not valid YAML at column 10 (got "[unclosed"; '
                               "expected a YAML scalar, list or mapping, quoted if it holds [ ] { } : or #)"),
    ("models[Bad_Name].replicas=1", 'llm-serving:--set: not a key.path=value override (got '
                                    '"models[Bad_Name].replicas=1"; expected key.path=value, models[<name>].key=value, '
                                    "or <namespace>:<name>=value such as aws:region=eu-west-1)"),
    ("cluster.name.x=1", 'llm-serving:cluster.name: wrong type (got {"x": 1}; expected a string)'),
])
def test_clone_refuses_a_bad_setting_in_one_line(stack_dir, setting, line):
    with pytest.raises(ConfigError) as caught:
        clone.clone("prod", "prod-eu", ["environment=prod", setting], stack_dir)
    assert [p.line() for p in caught.value.problems] == [line]
    assert not (stack_dir / "Pulumi.prod-eu.yaml").exists()


def test_a_set_for_a_model_the_base_does_not_have_names_the_models_it_has(stack_dir):
    with pytest.raises(ConfigError) as error:
        clone.clone("dev", "dev-typo", ["models[llama].replicas=2"], stack_dir)
    assert [p.line() for p in error.value.problems] == [
        'llm-serving:models[llama]: no model of that name in dev (got "llama"; expected one of llama-8b, or a new '
        "model with models[llama].modelId)"]
    assert not (stack_dir / "Pulumi.dev-typo.yaml").exists()


def test_the_command_line_refuses_a_region_clone_and_keep_lifts_it(stack_dir, monkeypatch, capsys):
    monkeypatch.setattr("stacks.config.files.PROJECT_DIR", stack_dir)
    monkeypatch.setattr("stacks.cli.stack_files.PROJECT_DIR", stack_dir)
    argv = ["clone", "prod", "prod-eu", "--set", "environment=prod", "--set", "aws:region=eu-west-1"]
    sets = [arg for value in EU_VALUES for arg in ("--set", value)]
    assert main([*argv, *sets]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-serving:cluster.name: prod's value holds in us-east-1") and err.count("\n") == 1
    assert main([*argv, *sets, "--keep", "cluster.name"]) == 0
    assert "cluster.name" in (stack_dir / "Pulumi.prod-eu.yaml").read_text().splitlines()[2]
