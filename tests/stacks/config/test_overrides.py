"""`key.path=value` overrides: parsing, `models[<name>]` addressing, and every refusal in one line."""

from __future__ import annotations

import pytest

from stacks.config import overrides
from stacks.config.problems import MISSING, ConfigError

VALUES = {"cluster": {"name": "llm-prod"}, "models": [{"name": "llama-70b", "replicas": 2}, {"name": "llama-8b"}]}


def test_a_named_item_is_found_by_name_and_other_items_are_untouched():
    changed = overrides.apply(VALUES, overrides.parse("models[llama-70b].autoscaling.maxReplicas=4"),
                              create_items=False)
    assert changed["models"] == [{"name": "llama-70b", "replicas": 2, "autoscaling": {"maxReplicas": 4}},
                                 {"name": "llama-8b"}]
    assert VALUES["models"][0] == {"name": "llama-70b", "replicas": 2}  # a copy, never the input


def test_a_missing_item_is_appended_for_a_clone_and_refused_for_resolved_values():
    assert overrides.apply({}, overrides.parse("models[qwen].replicas=1"), create_items=True) == {
        "models": [{"name": "qwen", "replicas": 1}]}
    with pytest.raises(ConfigError) as caught:
        overrides.apply(VALUES, overrides.parse("models[qwen].replicas=1", "--tp"), create_items=False)
    assert [p.line() for p in caught.value.problems] == [
        'llm-serving:models[qwen].replicas: no item named qwen in models (got "qwen"; expected one of: llama-70b, '
        "llama-8b)"]


def test_provider_and_project_namespaces_are_parsed():
    assert overrides.parse("aws:region=eu-west-1") == overrides.Override(
        "aws", (overrides.Segment("region"),), "eu-west-1")
    assert overrides.parse("llm-serving:cluster.name=x").namespace is None
    assert overrides.parse("models[a-b].slo.itlP95Seconds=0.05").key == "models[a-b].slo.itlP95Seconds"


@pytest.mark.parametrize(("text", "message"), [
    ("noequals", "not a key.path=value override"),
    ("=1", "not a key.path=value override"),
    ("a..b=1", "not a key.path=value override"),
    ("models[].replicas=1", "not a key.path=value override"),
    ("aws:region[x]=1", "not a key.path=value override"),
    ("cluster.name={unclosed", "the value is not valid YAML at column 10"),
    ("aws:region=", "an empty value for provider key aws:region"),
])
def test_a_bad_override_is_one_problem_naming_the_option(text, message):
    with pytest.raises(ConfigError) as caught:
        overrides.parse(text, "--set")
    (problem,) = caught.value.problems
    assert (problem.path, problem.message) == ("--set", message)


def test_a_key_below_a_plain_value_or_a_non_list_item_is_refused():
    with pytest.raises(ConfigError, match="cannot set a key below the plain value at cluster.name"):
        overrides.apply(VALUES, overrides.parse("cluster.name.first=x"), create_items=False)
    with pytest.raises(ConfigError, match="cluster is not a list of named items"):
        overrides.apply(VALUES, overrides.parse("cluster[x].name=y"), create_items=False)
    with pytest.raises(ConfigError, match="a whole list item takes a mapping"):
        overrides.apply(VALUES, overrides.parse("models[llama-8b]=3"), create_items=False)


def test_a_key_path_without_a_value_is_looked_up_by_name_and_missing_is_not_null():
    path = overrides.parse_path("models[llama-70b].replicas", "--keep")
    assert overrides.lookup(VALUES, path) == 2
    assert overrides.lookup(VALUES, overrides.parse_path("models[qwen].replicas", "--keep")) is MISSING
    # A clone's file may set null (unset): that is a value, not an absence.
    assert overrides.lookup({"cluster": {"name": None}}, overrides.parse_path("cluster.name", "--keep")) is None
    with pytest.raises(ConfigError) as caught:
        overrides.parse_path("cluster..name", "--keep")
    assert caught.value.problems[0].path == "--keep"
