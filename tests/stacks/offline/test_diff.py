"""`python -m stacks diff`: the field diff on its own, and the command on real git history.

The command runs in a scratch git repository built from this project's files (never this repo's own
history), with a `main` commit as the base and edits on a branch or in the working tree.

Length: the classification rules (replace, delete, create, update, options, URN changes, launch
templates), both output formats and the command on real history share one scratch repository.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from llm_serving.stack import planning
from stacks.config.files import PROJECT_DIR, stack_file_path
from stacks.environment import load_stack_file
from stacks.offline import diff as diff_module
from stacks.offline.diff import (
    ABSENT,
    FieldChange,
    ResourceChange,
    StackDiff,
    default_base,
    diff_resources,
    diff_values,
    format_markdown,
    format_text,
)
from stacks.offline.diff import main as diff_main
from tests.support.cli import Ran, run_main

# --- the field diff ------------------------------------------------------------------------------


def paths(changes: list[FieldChange]) -> dict[str, tuple[object, object]]:
    return {c.path: (c.old, c.new) for c in changes}


def test_equal_values_have_no_changes():
    value = {"a": [1, {"b": None}], "c": "x"}
    assert diff_values(value, {"a": [1, {"b": None}], "c": "x"}) == []


def test_nested_dicts_report_leaves_and_whole_subtrees_once():
    old = {"spec": {"replicas": 2, "selector": {"app": "a"}, "gone": {"deep": 1}}}
    new = {"spec": {"replicas": 3, "selector": {"app": "a"}, "new": {"deep": [1, 2]}}}
    assert paths(diff_values(old, new, "inputs")) == {
        "inputs.spec.gone": ({"deep": 1}, ABSENT),
        "inputs.spec.new": (ABSENT, {"deep": [1, 2]}),
        "inputs.spec.replicas": (2, 3),
    }


def test_keys_that_are_not_plain_words_are_quoted():
    old = {"labels": {"app.kubernetes.io/name": "a"}, "limits": {"nvidia.com/gpu": "4"}}
    new = {"labels": {"app.kubernetes.io/name": "b"}, "limits": {"nvidia.com/gpu": "8"}}
    assert list(paths(diff_values(old, new))) == ['labels["app.kubernetes.io/name"]', 'limits["nvidia.com/gpu"]']


def test_named_lists_are_keyed_by_name_so_an_insertion_shifts_nothing():
    vllm = {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0", "args": ["--port", "8000"]}
    sidecar = {"name": "proxy", "image": "envoy:1"}
    old = {"containers": [vllm]}
    new = {"containers": [sidecar, {**vllm, "image": "vllm/vllm-openai:v0.34.0"}]}
    assert paths(diff_values(old, new)) == {
        "containers[vllm].image": ("vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.34.0"),
        "containers[proxy]": (ABSENT, sidecar),
    }


def test_env_vars_by_name_and_args_by_index():
    old = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "args": ["--x", "1", "--y", "2"]}
    new = {"env": [{"name": "B", "value": "3"}, {"name": "A", "value": "1"}], "args": ["--x", "1", "--y", "5", "--z"]}
    changes = diff_values(old, new)
    assert paths(changes) == {
        "env": (["A", "B"], ["B", "A"]),  # a pure reorder is still a change: env vars may refer to earlier ones
        "env[B].value": ("2", "3"),
        "args[3]": ("2", "5"),
        "args[4]": (ABSENT, "--z"),
    }
    assert [c.note for c in changes if c.path == "env"] == ["order"]


def test_one_added_or_removed_plain_item_is_one_change_not_a_shift_of_every_later_position():
    # A model added to a stack adds one dependency in the middle of a sorted dependsOn list.
    old = {"dependsOn": ["a", "c", "d", "e", "f"], "args": ["--x", "1", "--y", "2"]}
    new = {"dependsOn": ["a", "b", "c", "d", "e", "f"], "args": ["--x", "1", "--y", "3", "--z", "4"]}
    assert paths(diff_values(old, new, "options")) == {
        "options.dependsOn[1]": (ABSENT, "b"),
        "options.args[3]": ("2", "3"),
        "options.args[4]": (ABSENT, "--z"),
        "options.args[5]": (ABSENT, "4"),
    }
    assert paths(diff_values(new, old, "options"))["options.dependsOn[1]"] == ("b", ABSENT)


def test_duplicate_names_fall_back_to_indexes():
    # Two volumeMounts of one volume share a name; keying them by it would lose one.
    old = {"volumeMounts": [{"name": "w", "mountPath": "/models"}, {"name": "w", "mountPath": "/cache"}]}
    new = {"volumeMounts": [{"name": "w", "mountPath": "/models"}, {"name": "w", "mountPath": "/var/cache"}]}
    assert paths(diff_values(old, new)) == {"volumeMounts[1].mountPath": ("/cache", "/var/cache")}


def test_names_that_look_like_indexes_are_quoted():
    old = {"ports": [{"name": "8000", "port": 1}]}
    new = {"ports": [{"name": "8000", "port": 2}]}
    assert list(paths(diff_values(old, new))) == ['ports["8000"].port']


def test_type_changes_are_changes_even_when_python_calls_them_equal():
    old = {"a": "4", "b": True, "c": {"x": 1}, "d": None, "e": 1}
    new = {"a": 4, "b": 1, "c": [1], "e": 1.5}
    assert paths(diff_values(old, new)) == {
        "a": ("4", 4),
        "b": (True, 1),
        "c": ({"x": 1}, [1]),
        "d": (None, ABSENT),  # null and absent differ
        "e": (1, 1.5),
    }


def test_multi_line_strings_carry_a_line_diff():
    old = {"data": {"counters.csv": "a, gauge\nb, gauge\nc, gauge\n"}}
    new = {"data": {"counters.csv": "a, gauge\nb, counter\nc, gauge\n"}}
    (change,) = diff_values(old, new)
    assert change.path == 'data["counters.csv"]'
    assert [line for line in change.lines if not line.startswith("@@")] == ["-b, gauge", "+b, counter"]


# --- comparing renders ---------------------------------------------------------------------------


def resource(type_: str, name: str, parent: str | None = None, **inputs: object) -> dict[str, object]:
    return {"type": type_, "name": name, "parent": parent, "inputs": inputs}


def urned(type_: str, name: str, chain: str = "llmserving:stack:ServingStack", options: dict | None = None,
          **inputs: object) -> dict[str, object]:
    """A resource as resources.json holds it now: with its engine URN and its options."""
    return {"type": type_, "name": name, "urn": f"urn:pulumi:prod::llm-serving::{chain}${type_}::{name}",
            "parent": "p", "inputs": inputs, "options": {"protect": False, **(options or {})}}


DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SECRET = "kubernetes:core/v1:Secret"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def summary(diff: StackDiff) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(c.action, c.type, c.name, c.forced_by) for c in diff.changes]


def test_renders_without_urns_are_keyed_by_type_and_name():
    base = [
        resource(DEPLOYMENT, "a", "c::a", replicas=1),
        resource(DEPLOYMENT, "gone"),
        resource(SECRET, "a", stringData={"k": "[secret]"}),
    ]
    head = [
        resource(DEPLOYMENT, "a", "c::b", replicas=2),
        resource(DEPLOYMENT, "new"),
        resource(SECRET, "a", stringData={"k": "[secret]"}),
    ]
    diff = diff_resources(base, head, "prod", "main", "1a2b3c4")
    assert summary(diff) == [("delete", DEPLOYMENT, "gone", ()), ("create", DEPLOYMENT, "new", ()),
                             ("update", DEPLOYMENT, "a", ())]
    assert paths(list(diff.of("update")[0].fields)) == {"inputs.replicas": (1, 2), "parent": ("c::a", "c::b")}


def test_unchanged_renders_make_an_empty_diff():
    base = [resource(DEPLOYMENT, "a", replicas=1)]
    diff = diff_resources(base, [dict(r) for r in base], "prod", "main")
    assert diff.empty
    assert format_text(diff) == "prod: no changes against main\n"


def test_provider_rules_decide_replace_or_update():
    base = [
        urned(NODE_GROUP, "ng", subnetIds=["subnet-a"], scalingConfig={"maxSize": 2}),
        urned(PVC, "claim", spec={"storageClassName": "efs-sc"}),
        urned(DEPLOYMENT, "d", spec={"selector": {"matchLabels": {"a": "1"}}, "replicas": 1}),
        urned(SECRET, "s", stringData={"k": "[secret]"}, metadata={"labels": {"a": "1"}}),
    ]
    head = [
        urned(NODE_GROUP, "ng", subnetIds=["subnet-b"], scalingConfig={"maxSize": 4}),
        urned(PVC, "claim", spec={"storageClassName": "efs-ap"}),
        urned(DEPLOYMENT, "d", spec={"selector": {"matchLabels": {"a": "1"}}, "replicas": 2}),
        urned(SECRET, "s", stringData={"k": "[secret]"}, metadata={"labels": {"a": "2"}}),
    ]
    diff = diff_resources(base, head, "prod", "main")
    assert summary(diff) == [
        ("replace", NODE_GROUP, "ng", ("subnetIds",)),  # terraform-provider-aws: ForceNew
        ("replace", PVC, "claim", ("spec.storageClassName",)),  # pulumi-kubernetes: a claim's spec
        ("update", DEPLOYMENT, "d", ()),
        ("update", SECRET, "s", ()),  # labels are not data
    ]
    assert diff.of("replace")[0].notes == (
        "the replacement is created first; the old one is deleted at the end of the update",)


def test_replace_on_changes_and_protect_show_in_the_diff():
    options = {"replaceOnChanges": ["labels"], "protect": True}
    base = [urned(NODE_GROUP, "ng", options=options, labels={"llm-serving/node-generation": "aaaa"})]
    head = [urned(NODE_GROUP, "ng", options={**options, "protect": False},
                  labels={"llm-serving/node-generation": "bbbb"})]
    (change,) = diff_resources(base, head, "prod", "main").changes
    assert (change.action, change.forced_by) == ("replace", ("labels",))
    assert paths(list(change.fields)) == {
        'inputs.labels["llm-serving/node-generation"]': ("aaaa", "bbbb"), "options.protect": (True, False)}
    # Unprotecting and replacing in one update is allowed (pulumi/pulumi step generator: new.Protect && old.Protect).
    assert change.notes == ("the replacement is created first; the old one is deleted at the end of the update",)


def test_a_replace_of_a_resource_that_stays_protected_is_a_preview_error():
    options = {"replaceOnChanges": ["labels"], "protect": True}
    base = [urned(NODE_GROUP, "ng", options=options, labels={"llm-serving/node-generation": "aaaa"})]
    head = [urned(NODE_GROUP, "ng", options=options, labels={"llm-serving/node-generation": "bbbb"})]
    diff = diff_resources(base, head, "prod", "main")
    assert diff.changes[0].notes[1] == (
        "preview error: protected, so `pulumi preview` and `pulumi up` fail instead of this replacement until "
        "protect is removed (protect=False in the program, or `pulumi state unprotect`)")
    assert diff.preview_errors == (f"{NODE_GROUP} ng",)
    assert "  pulumi preview fails: 1 protected resource(s) would be deleted or replaced: " in format_text(diff)


def test_option_only_changes_are_updates():
    base = [urned(PVC, "claim", options={"retainOnDelete": True}, spec={"storageClassName": "efs-sc"})]
    head = [urned(PVC, "claim", options={"retainOnDelete": False}, spec={"storageClassName": "efs-sc"})]
    (change,) = diff_resources(base, head, "prod", "main").changes
    assert (change.action, paths(list(change.fields))) == ("update", {"options.retainOnDelete": (True, False)})


def test_options_the_engine_runs_no_step_for_are_shown_apart_and_never_counted_as_updates():
    # dependsOn and customTimeouts only order and time later steps: with the inputs unchanged the engine makes a
    # `same` step and records them in state.
    base = [urned(DEPLOYMENT, "d", options={"dependsOn": ["a"], "customTimeouts": {"delete": "10m"}}, replicas=1)]
    head = [urned(DEPLOYMENT, "d", options={"dependsOn": ["a", "b"], "customTimeouts": {"delete": "20m"}},
                  replicas=1)]
    diff = diff_resources(base, head, "prod", "main")
    (change,) = diff.changes
    assert change.action == "options" and diff.of("update") == ()
    assert diff.counts() == "0 to replace, 0 to delete, 0 to create, 0 to update, 1 with options only"
    text = format_text(diff)
    assert "\n= kubernetes:apps/v1:Deployment d\n    ! options only: `pulumi up` records them in state and runs no " \
           "step for this resource\n" in text
    assert "#### Options only (no step: the engine records them in state) (1)" in format_markdown(diff)
    # With an input changed too it is an update, options and all.
    changed = [urned(DEPLOYMENT, "d", options={"dependsOn": ["a", "b"]}, replicas=2)]
    assert diff_resources(base, changed, "prod", "main").changes[0].action == "update"


def test_a_urn_change_is_delete_plus_create_with_a_warning_for_protected_resources():
    kept = {"protect": True, "retainOnDelete": True}
    base = [urned(PVC, "claim", chain="llmserving:stack:ServingStack", options=kept)]
    head = [urned(PVC, "claim", chain="llmserving:stack:Serving", options=kept)]
    diff = diff_resources(base, head, "prod", "main")
    assert [(c.action, c.name) for c in diff.changes] == [("delete", "claim"), ("create", "claim")]
    assert diff.of("delete")[0].notes == (
        "its URN changed (a renamed or re-nested parent): deleted here and created under the new URN; an "
        "`aliases` option would keep it",
        "preview error: protected, so `pulumi preview` and `pulumi up` fail instead of this delete until protect is "
        "removed (protect=False in the program, or `pulumi state unprotect`)",
        "retainOnDelete: the engine forgets it but leaves it in the cloud or cluster, unmanaged",
    )


CRD_CHART = "kubernetes:helm.sh/v4:Chart"


@pytest.mark.parametrize("retained,expected", [
    (True, "WARNING: applies CRDs and its URN changes; retainOnDelete keeps the CRDs (and every object of their "
           "kinds) in the cluster, unmanaged until a resource applies them again"),
    (False, "WARNING: applies CRDs and its URN changes, without retainOnDelete: the delete removes the CRDs and "
            "every object of their kinds in the cluster, other teams' included; add an `aliases` option or "
            "retainOnDelete first"),
])
def test_a_crd_chart_whose_urn_changes_is_flagged_first(retained, expected):
    options = {"retainOnDelete": retained}
    base = [urned(CRD_CHART, "edge-gateway-crds", chain="llmserving:edge:Edge", options=options)]
    head = [urned(CRD_CHART, "edge-gateway-crds", chain="llmserving:edge:Gateway", options=options)]
    (deleted,) = diff_resources(base, head, "prod", "main").of("delete")
    assert deleted.notes[0] == expected


def test_keda_and_the_crd_releases_count_as_crd_carriers_and_other_releases_do_not():
    from stacks.offline.replacements import applies_crds

    release = "kubernetes:helm.sh/v3:Release"
    assert applies_crds({"type": release, "inputs": {"chart": "keda"}})
    assert applies_crds({"type": release, "inputs": {"chart": "oci://docker.io/envoyproxy/ai-gateway-crds-helm"}})
    assert not applies_crds({"type": release, "inputs": {"chart": "oci://docker.io/envoyproxy/gateway-helm"}})
    assert not applies_crds({"type": PVC, "inputs": {}})


def test_a_new_launch_template_version_rolls_the_node_groups_that_use_it():
    base = [urned(TEMPLATE, "lt", blockDeviceMappings=[{"ebs": {"volumeSize": 200}}]),
            urned(NODE_GROUP, "ng", launchTemplate={"id": "lt-id", "version": "1"})]
    head = [urned(TEMPLATE, "lt", blockDeviceMappings=[{"ebs": {"volumeSize": 400}}]),
            urned(NODE_GROUP, "ng", launchTemplate={"id": "lt-id", "version": "1"})]
    (change,) = diff_resources(base, head, "prod", "main").changes
    assert (change.action, change.notes) == ("update", (
        "a new template version: node group ng replaces every node in place, draining each under the "
        "PodDisruptionBudgets",))
    # An AMI bump of a group updated in place says the same on the group itself.
    old = [urned(NODE_GROUP, "ng", releaseVersion="1.34.2-20261101")]
    new = [urned(NODE_GROUP, "ng", releaseVersion="1.34.3-20261201")]
    (group,) = diff_resources(old, new, "prod", "main").changes
    assert group.notes == ("EKS replaces every node in place, draining each under the PodDisruptionBudgets "
                           "(PodEvictionFailure after 15 minutes a node)",)


def test_raising_the_minimum_of_an_autoscaled_group_gives_the_two_step_recipe():
    ignored = {"ignoreChanges": ["scalingConfig.desiredSize"]}
    base = [urned(NODE_GROUP, "ng", options=ignored, scalingConfig={"minSize": 2, "maxSize": 6, "desiredSize": 2})]
    head = [urned(NODE_GROUP, "ng", options=ignored, scalingConfig={"minSize": 3, "maxSize": 6, "desiredSize": 3})]
    (change,) = diff_resources(base, head, "prod", "main").changes
    assert change.notes == (
        "minSize 2 -> 3 while desiredSize is left to the autoscaler: `pulumi up` sends the desired size from "
        "state, and EKS refuses the update if that is below 3. First raise the live group: `aws eks "
        "update-nodegroup-config --scaling-config minSize=3,desiredSize=3` (plus the current maxSize), then "
        "`pulumi up --refresh` (docs/operations.md, \"Raising minNodes\")",)
    # Lowering it, or a group whose desired size is the program's (no autoscaler), needs nothing.
    lowered = [urned(NODE_GROUP, "ng", options=ignored, scalingConfig={"minSize": 1, "maxSize": 6, "desiredSize": 2})]
    assert diff_resources(base, lowered, "prod", "main").changes[0].notes == ()
    fixed = [urned(NODE_GROUP, "ng", scalingConfig={"minSize": 3, "maxSize": 6, "desiredSize": 3})]
    assert diff_resources([urned(NODE_GROUP, "ng", scalingConfig={"minSize": 2, "maxSize": 6, "desiredSize": 2})],
                          fixed, "prod", "main").changes[0].notes == ()


# --- output formats ------------------------------------------------------------------------------


def change(path: str, old: object, new: object) -> FieldChange:
    return FieldChange(path, old, new)


SAMPLE = StackDiff("prod", "main", "1a2b3c4", changes=(
    ResourceChange(PVC, "llama-70b-weights-claim", (change("inputs.spec.storageClassName", "efs-sc", "efs-ap"),),
                   "replace", ("spec.storageClassName",), ("protected: stops",)),
    ResourceChange("kubernetes:core/v1:Namespace", "prometheus-namespace", action="delete"),
    ResourceChange(DEPLOYMENT, "qwen-7b-deployment", action="create"),
    ResourceChange(DEPLOYMENT, "llama-70b-deployment", (change("inputs.a[vllm].args[12]", "256", "128"),)),
))


def test_text_format():
    assert format_text(SAMPLE) == (
        "prod: 1 to replace, 1 to delete, 1 to create, 1 to update against main (1a2b3c4)\n"
        "+- kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim (forced by spec.storageClassName)\n"
        "    ! protected: stops\n"
        '    inputs.spec.storageClassName: "efs-sc" -> "efs-ap"\n'
        "- kubernetes:core/v1:Namespace prometheus-namespace\n"
        "+ kubernetes:apps/v1:Deployment qwen-7b-deployment\n"
        "~ kubernetes:apps/v1:Deployment llama-70b-deployment\n"
        '    inputs.a[vllm].args[12]: "256" -> "128"\n'
    )


def test_markdown_puts_replacements_and_deletions_first():
    text = format_markdown(SAMPLE)
    assert text.startswith("<!-- llm-serving diff: prod -->\n### Stack `prod`: 1 to replace, 1 to delete, 1 to "
                           "create, 1 to update\n")
    headings = [line for line in text.splitlines() if line.startswith("#### ")]
    assert headings == ["#### Replaced (1)", "#### Deleted (1)", "#### Created (1)", "#### Updated (1)"]
    assert ("**`+-` `kubernetes:core/v1:PersistentVolumeClaim` `llama-70b-weights-claim`** — forced by "
            "`spec.storageClassName`") in text
    assert "- protected: stops" in text
    assert '| `inputs.a[vllm].args[12]` | `"256"` | `"128"` |' in text
    assert "<details>" not in text  # short diffs stay unfolded


def test_markdown_folds_long_sections_clips_values_and_escapes_pipes():
    long_old, long_new = "x" * 300 + "OLD" + "y" * 300, "x" * 300 + "NEW" + "y" * 300
    fields = tuple(change(f"inputs.f{i}", i, i + 1) for i in range(30)) + (
        change("inputs.expr", long_old, long_new),
        change("inputs.pipe", "a|b", "a`b"),
    )
    diff = StackDiff("dev", "main", changes=(ResourceChange(DEPLOYMENT, "d", fields),))
    text = format_markdown(diff)
    assert "<details><summary>1 resources, 32 fields</summary>" in text
    row = next(line for line in text.splitlines() if line.startswith("| `inputs.expr`"))
    # Clipped to the limit around the first difference, so the change itself stays visible.
    assert "OLD" in row and "NEW" in row and "…" in row and len(row) < 2 * 120 + 60
    assert '| `inputs.pipe` | `"a\\|b"` | `` "a`b" `` |' in text


def test_markdown_stays_under_the_comment_budget():
    many = tuple(
        ResourceChange(DEPLOYMENT, f"d{i}", tuple(change(f"inputs.f{j}", "a" * 100, "b" * 100) for j in range(10)))
        for i in range(100)
    )
    text = format_markdown(StackDiff("prod", "main", changes=many), budget=20_000)
    assert len(text) < 21_000
    assert "more resources not shown; run `python -m stacks diff prod`" in text
    assert text.count("<details>") == text.count("</details>")


def test_multi_line_changes_show_their_lines():
    fields = diff_values({"script": "set -e\ndownload a\n"}, {"script": "set -e\ndownload b\n"}, "inputs")
    diff = StackDiff("dev", "main", changes=(ResourceChange("kubernetes:batch/v1:Job", "j", tuple(fields)),))
    assert "    inputs.script: 2 lines changed\n      @@ -2 +2 @@\n      -download a\n      +download b\n" in (
        format_text(diff)
    )
    assert "```diff\n@@ -2 +2 @@\n-download a\n+download b\n```" in format_markdown(diff)


# --- the command on real git history -------------------------------------------------------------

GIT = ["git", "-c", "user.name=diff-test", "-c", "user.email=diff-test@example.com", "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def run_diff(repo: Path, *args: str) -> Ran:
    """`python -m stacks diff *args` run in `repo`, in this process (tests/support/cli.py): a side whose
    code is this project's renders here, one whose code the test edited renders in a subprocess."""
    return run_main(lambda: diff_main(list(args), project_dir=repo), ("diff", *args), cwd=repo)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This project's files (working-tree versions, tests excluded) committed as `main`, then a branch;
    removed after the module (about 500 files) rather than by the cleanup at the end of a later run."""
    root = tmp_path_factory.mktemp("diff-repo")
    # Tracked and new files alike, so the code under test (maybe not committed yet) is what runs.
    listed = git(PROJECT_DIR, "ls-files", "--cached", "--others", "--exclude-standard").splitlines()
    for name in listed:
        source = PROJECT_DIR / name
        if not name.startswith("tests/") and source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    # A base whose prod no longer validates: more GPUs needed than one node offers.
    git(root, "checkout", "-q", "-b", "broken")
    edit_text(root / "Pulumi.prod.yaml", "maxNodes: 4", "maxNodes: 1")
    git(root, "commit", "-q", "-am", "prod cannot fit its model")
    git(root, "checkout", "-q", "-b", "feature", "main")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def edit_text(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1))


@contextmanager
def edited(repo: Path, name: str, *replacements: tuple[str, str]) -> Iterator[None]:
    """Working-tree edits of one tracked file, undone afterwards so the next test starts clean."""
    try:
        for old, new in replacements:
            edit_text(repo / name, old, new)
        yield
    finally:
        git(repo, "checkout", "-q", "--", name)


QWEN = """\
    - name: qwen-7b
      modelId: Qwen/Qwen2.5-7B-Instruct
      revision: a09a35458c702b33eeacc393d103063234e8bc28
      maxModelLen: 4096
      tensorParallelSize: 1
      route:
        pathPrefix: /qwen-7b
  llm-serving:edge:
"""


def test_no_change_against_the_merge_base(repo):
    # On `feature` with no --base, the base is its merge base with main.
    result = run_diff(repo, "prod")
    assert result.returncode == 0, result.stderr
    main = git(repo, "rev-parse", "--short=7", "main").strip()
    assert result.stdout == f"prod: no changes against the merge base with main ({main})\n"


def prod_rollout_step() -> tuple[int, int]:
    """prod's llama-70b as the planner times one rollout step: (its cold start, the step: the image pull (300 s),
    the cold start and minReadySeconds (30 s))."""
    config = load_stack_file(stack_file_path("prod"))[1]
    cold = planning.model_plan(config, config.models[0]).cold_start_seconds
    return cold, 300 + cold + 30


def prod_rollout_lines() -> list[str]:
    """What a rollout of prod's llama-70b costs (TP4, 2 replicas at minReplicas, maxSurge 1): two steps, in
    minutes rounded up."""
    cold, step = prod_rollout_step()
    return [
        f"    = rollout: 2 replica(s) roll (RollingUpdate maxSurge 1, maxUnavailable 0), about {math.ceil(step / 60)} "
        f"min each (image pull 300 s + cold start {cold} s + 30 s available), about {math.ceil(2 * step / 60)} min "
        "in total (at minReplicas: each replica KEDA runs above it adds a step)",
        "    = surge: 4 free GPUs for 1 extra replica(s); they fit on the 2 running node(s)",
        "    = streams: every stream the edge admits (1805 s at most) ends inside the 1805 s drain",
    ]


def test_changed_flag_shows_the_container_arg(repo):
    with edited(repo, "Pulumi.prod.yaml", ("maxNumSeqs: 256", "maxNumSeqs: 128")):
        text = run_diff(repo, "prod", "--base", "main")
        markdown = run_diff(repo, "prod", "--base", "main", "--format", "markdown", "--check")
    assert text.returncode == 1, text.stderr
    lines = text.stdout.splitlines()
    # The engine changes, so its verification Job runs again: it and its ConfigMap are new (the plan
    # behind them, at the lower concurrency, is in the ConfigMap's diff).
    assert lines[0].startswith("prod: 3 to replace, 0 to delete, 0 to create, 1 to update against main (")
    # The flags are part of the compile cache's key: a new key is a new producer Job, never the old cache.
    assert [line for line in lines if line.startswith("+- ")][0].startswith(
        "+- kubernetes:batch/v1:Job llama-70b-compile-cache (forced by metadata.name")
    assert [line for line in lines if line.startswith("+- ")][1:] == [
        "+- kubernetes:batch/v1:Job llama-70b-verify-job (forced by metadata.name, "
        "spec.template.spec.volumes.configMap.name)",
        "+- kubernetes:core/v1:ConfigMap llama-70b-verify-probe (forced by data, metadata.name)"]
    deployment = lines.index("~ kubernetes:apps/v1:Deployment llama-70b-deployment")
    # What the rollout costs, from the planner's timing for prod's llama-70b (TP4, 2 replicas, maxSurge 1): the
    # cold start does not depend on --max-num-seqs.
    assert lines[deployment + 1:deployment + 4] == prod_rollout_lines()
    assert re.fullmatch(r'    inputs\.spec\.template\.spec\.containers\[vllm\]\.args\[\d+\]: "256" -> "128"',
                        lines[deployment + 4])

    assert (markdown.returncode, markdown.stderr) == (1, "")  # --check: a rollout is nothing it refuses
    # 3: the compile cache's producer Job (the engine flags are in its key), the verification Job and its ConfigMap.
    assert "### Stack `prod`: 3 to replace, 0 to delete, 0 to create, 1 to update" in markdown.stdout
    assert "#### Updated (1)" in markdown.stdout and "#### Created" not in markdown.stdout
    assert re.search(r'\| `inputs\.spec\.template\.spec\.containers\[vllm\]\.args\[\d+\]` \| `"256"` \| `"128"` \|',
                     markdown.stdout)


def test_added_model_committed_on_a_branch(repo):
    git(repo, "checkout", "-q", "-b", "add-qwen", "main")
    try:
        # Two models need two GPUs plus a surge replica each: dev's node group must be allowed 4 nodes.
        edit_text(repo / "Pulumi.dev.yaml", "maxNodes: 2", "maxNodes: 4")
        edit_text(repo / "Pulumi.dev.yaml", "  llm-serving:edge:\n", QWEN)
        git(repo, "commit", "-q", "-am", "serve qwen-7b in dev")
        result = run_diff(repo, "dev")
    finally:
        git(repo, "checkout", "-q", "feature")
    assert result.returncode == 1, result.stderr
    for type_, name in [
        ("kubernetes:apps/v1:Deployment", "qwen-7b-deployment"),
        ("kubernetes:core/v1:Service", "qwen-7b-service"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "qwen-7b-pdb"),
        ("kubernetes:core/v1:PersistentVolumeClaim", "qwen-7b-weights-claim"),
        ("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "edge-httproute-qwen-7b"),
        ("llmserving:serving:VllmDeployment", "qwen-7b"),
    ]:
        assert f"\n+ {type_} {name}\n" in result.stdout
    assert "\n~ aws:eks/nodeGroup:NodeGroup gpu-p5-4xlarge-node-group\n    inputs.scalingConfig.maxSize: 2 -> 4\n" in (
        result.stdout
    )
    assert "\n- " not in result.stdout


def test_a_rotated_api_key_shows_its_secrets_replaced_and_the_replicas_rolling_never_the_key(repo):
    # A rotation is a new ciphertext in the stack file: compared by a keyed digest of what it renders to, so the
    # Secrets the engine replaces and the pods it rolls show, and neither key's value nor a reusable digest does.
    rotated = "    secure: v1:AAABAHRoZS1yb3RhdGVkLWtleQ=="
    with edited(repo, "Pulumi.prod.yaml", ("  llm-serving:apiKey:\n    secure: v1:placeholder:replace-with-pulumi-"
                                          "config-set-secret", "  llm-serving:apiKey:\n" + rotated)):
        result = run_diff(repo, "prod", "--base", "main")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    # pulumi-kubernetes replaces a Secret on a data change, delete-first (same name).
    assert "+- kubernetes:core/v1:Secret vllm-api-key (forced by stringData.api-key)" in lines
    assert re.search(r"^~ kubernetes:apps/v1:Deployment llama-70b-deployment$", result.stdout, re.MULTILINE)
    shown = [line for line in lines if "[secret" in line]
    assert shown and all(re.search(r'"\[secret ([0-9a-f]{12})\]" -> "\[secret (?!\1)[0-9a-f]{12}\]"', line)
                         for line in shown)
    assert "AAABAHRoZS1yb3RhdGVkLWtleQ" not in result.stdout and "placeholder" not in result.stdout


def test_removed_prometheus_stack_in_the_working_tree(repo):
    existing = "mode: existing\n      url: http://prometheus-operated.monitoring.svc:9090"
    with edited(repo, "Pulumi.dev.yaml", ("mode: install", existing)):
        result = run_diff(repo, "dev", "--base", "main")
    assert result.returncode == 1, result.stderr
    removed = [line for line in result.stdout.splitlines() if line.startswith("- ")]
    assert "- kubernetes:helm.sh/v3:Release prometheus-release" in removed
    assert "- kubernetes:core/v1:Namespace prometheus-namespace" in removed
    assert "- llmserving:observability:PrometheusStack prometheus" in removed
    assert "[secret: encrypted" not in result.stdout


def test_a_base_that_does_not_render_is_an_error(repo):
    result = run_diff(repo, "prod", "--base", "broken")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"diff: the base, broken \([0-9a-f]{7}\), does not render:", lines[0])
    assert any("llm-serving:gpuNodeGroup.scaling.maxNodes:" in line for line in lines[1:])


def test_a_stack_new_since_the_base_is_all_added(repo, exports):
    shutil.copy(repo / "Pulumi.staging.yaml", repo / "Pulumi.qa.yaml")
    try:
        result = run_diff(repo, "qa", "--base", "main")
    finally:
        (repo / "Pulumi.qa.yaml").unlink()
    assert result.returncode == 1, result.stderr
    assert "  (Pulumi.qa.yaml does not exist at the base: every resource is added)\n" in result.stdout
    assert "\n+ kubernetes:apps/v1:Deployment llama-70b-deployment\n" in result.stdout
    assert not re.search(r"^[-~] ", result.stdout, re.MULTILINE)
    assert exports == []  # nothing at the base to render, so the base is not exported


def _committed(top: Path, files: dict[str, str], executable: frozenset[str] | set[str] = frozenset()) -> str:
    """A new repository at `top` whose one commit holds `files` (path: text); the commit's id."""
    for name, text in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)
        if name in executable:
            (top / name).chmod(0o755)
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "base")
    return git(top, "rev-parse", "HEAD").strip()


def test_an_export_is_the_commits_project_directory_and_leaves_the_repository_as_it_was(tmp_path):
    # The project in a subdirectory of its repository, with a staged and an unstaged change: the export is
    # that directory at the commit, bytes and executable bit, and git's index and working tree are untouched.
    top = tmp_path / "repo"
    commit = _committed(top, {"outside.txt": "not the project\n", "project/pkg/a.py": "A = 1\n",
                              "project/run.sh": "#!/bin/sh\n"}, executable={"project/run.sh"})
    (top / "project" / "pkg" / "a.py").write_text("A = 2\n")
    git(top, "add", "project/pkg/a.py")
    (top / "project" / "run.sh").write_text("#!/bin/sh\necho changed\n")
    # Attributes the working tree has and the commit has not: they must not reach the base's files.
    for attributes in (top / ".gitattributes", top / "project" / ".gitattributes"):
        attributes.write_text("* text eol=crlf\n")
    status, index = git(top, "status", "--porcelain"), (top / ".git" / "index").read_bytes()
    into = tmp_path / "export"
    into.mkdir()
    diff_module._export(top / "project", commit, into)
    assert sorted(str(p.relative_to(into)) for p in into.rglob("*")) == ["pkg", "pkg/a.py", "run.sh"]
    assert (into / "pkg" / "a.py").read_bytes() == b"A = 1\n"
    assert (into / "run.sh").read_bytes() == b"#!/bin/sh\n" and os.access(into / "run.sh", os.X_OK)
    assert (git(top, "status", "--porcelain"), (top / ".git" / "index").read_bytes()) == (status, index)


def test_an_export_runs_no_fsmonitor_hook_of_the_users(tmp_path):
    # A hook (watchman's, say) run by the export would run in the export's directory and watch it.
    top = tmp_path / "repo"
    commit = _committed(top, {"a.py": "A = 1\n"})
    hook = tmp_path / "fsmonitor"
    hook.write_text(f"#!/bin/sh\npwd >> {tmp_path / 'ran'}\n")
    hook.chmod(0o755)
    git(top, "config", "core.fsmonitor", str(hook))
    diff_module._export(top, commit, tmp_path / "export")
    assert (tmp_path / "export" / "a.py").read_text() == "A = 1\n"
    assert not (tmp_path / "ran").exists()


def test_an_export_of_a_commit_without_the_project_directory_is_one_line(tmp_path):
    top = tmp_path / "repo"
    before = _committed(top, {"README": "before the project\n"})
    (top / "project").mkdir()
    (top / "project" / "x.py").write_text("")
    with pytest.raises(diff_module.DiffError) as error:
        diff_module._export(top / "project", before, tmp_path / "export")
    (line,) = error.value.lines
    prefix = f"diff: git read-tree of {before[:12]} failed: "
    assert line.startswith(prefix) and len(line) > len(prefix)  # git's own reason, in the user's language


@pytest.fixture
def exports(monkeypatch) -> list[str]:
    """The commits exported during the test."""
    done: list[str] = []
    real = diff_module._export

    def export(project_dir: Path, commit: str, into: Path) -> None:
        done.append(commit)
        real(project_dir, commit, into)

    monkeypatch.setattr(diff_module, "_export", export)
    return done


def test_every_stack_of_one_run_is_compared_with_one_export_of_the_base(repo, exports):
    result = run_diff(repo, "dev", "prod", "--base", "main")
    main = git(repo, "rev-parse", "main").strip()
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [f"dev: no changes against main ({main[:7]})",
                                          f"prod: no changes against main ({main[:7]})"]
    assert exports == [main]


def test_a_stack_in_neither_tree_is_refused_before_anything_is_exported(repo, exports):
    result = run_diff(repo, "qa", "--base", "main")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("python -m stacks diff: argument stack: Pulumi.qa.yaml exists neither at main (")
    assert exports == []


def test_an_unknown_ref_is_an_error(repo):
    result = run_diff(repo, "prod", "--base", "no-such-branch")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "python -m stacks diff: argument --base: 'no-such-branch' is not a commit in this repository\n")


def test_without_main_the_default_base_is_head(tmp_path):
    git(tmp_path, "init", "-q", "-b", "trunk")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "first")
    assert default_base(tmp_path) == ("HEAD", "HEAD")


def test_replacements_options_and_consequences_on_real_history(repo):
    # One working-tree change touching what a reviewer must not miss: subnets (replace the node
    # group), the weights moved to another StorageClass (replace a protected claim, delete the
    # protected file system), and protect itself.
    existing = ("  llm-serving:weightsStorage:\n    backend: existingStorageClass\n    existingStorageClass:\n"
                "      name: efs-fast\n      readMibPerSecond: 500\n")
    with edited(repo, "Pulumi.prod.yaml", ("subnet-0bb00000000000003", "subnet-0bb00000000000009"),
                ("    instanceType: p5.48xlarge\n", "    instanceType: p5.48xlarge\n    rootVolumeGib: 400\n"),
                ("  llm-serving:weightsStorage:\n", existing),
                ("      maxNumBatchedTokens: 8192\n", "      maxNumBatchedTokens: 8192\n      storage:\n"
                 "        sizeGib: 300\n")), \
            edited(repo, "llm_serving/stack/stack.py", ("protect=args.environment is Environment.PROD,",
                                                        "protect=False,")):
        text = run_diff(repo, "prod", "--base", "main")
        markdown = run_diff(repo, "prod", "--base", "main", "--format", "markdown", "--check")
    assert text.returncode == 1, text.stderr
    out = text.stdout
    assert ("\n+- aws:eks/nodeGroup:NodeGroup gpu-p5-48xlarge-node-group (forced by labels, subnetIds)\n"
            "    ! the replacement is created first; the old one is deleted at the end of the update\n") in out
    # The size is an update (pulumi-kubernetes forces only accessModes, selector, storageClassName,
    # volumeName); the claim keeps its name and namespace, so it is deleted before its replacement.
    assert ("\n+- kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim (forced by "
            "spec.storageClassName)\n"
            "    ! up fails: retainOnDelete makes the engine's delete a no-op, so the old object stays and the "
            "replacement's create of the same name fails (AlreadyExists)") in out
    assert ("\n- aws:efs/fileSystem:FileSystem weights-storage-file-system\n"
            "    ! preview error: protected, so `pulumi preview` and `pulumi up` fail instead of this delete until "
            "protect is removed (protect=False in the program, or `pulumi state unprotect`)\n"
            "    ! retainOnDelete: the engine forgets it but leaves it in the cloud or cluster, unmanaged\n") in out
    assert "    options.protect: true -> false\n" in out
    # A launch-template change is a new version in place; the group using it is a new generation.
    assert ("\n~ aws:ec2/launchTemplate:LaunchTemplate gpu-p5-48xlarge-launch-template\n"
            "    ! node group gpu-p5-48xlarge-node-group is replaced with it (a new generation)\n") in out
    assert '    inputs.spec.storageClassName: "llm-serving-weights" -> "efs-fast"\n' in out
    # The pods select the replaced node group's labels: unknown until it exists.
    assert re.search(r'~ kubernetes:apps/v1:Deployment llama-70b-deployment\n(    .*\n)*    inputs\.spec\.template'
                     r'\.spec\.nodeSelector: \{.* -> \(known after the replacement\)\n', out)
    # Replacements come first, in text and markdown.
    # Leaving EFS also deletes each model's serving volume and claim, protected in prod like the claim.
    assert out.splitlines()[1] == ("  pulumi preview fails: 3 protected resource(s) would be deleted or replaced: "
                                   "aws:efs/fileSystem:FileSystem weights-storage-file-system, "
                                   "kubernetes:core/v1:PersistentVolume weights-storage-serving-llama-70b-volume, "
                                   "kubernetes:core/v1:PersistentVolumeClaim weights-storage-serving-llama-70b-claim")
    # The claim keeps its name and data: after unprotecting, `pulumi up` would still fail on it.
    assert out.splitlines()[2] == ("  pulumi up fails: 1 retained resource(s) replaced delete-first: "
                                   "kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim")
    assert out.splitlines()[3].startswith("+- ")
    headings = [line for line in markdown.stdout.splitlines() if line.startswith("#### ")]
    assert headings[0].startswith("#### Replaced (")
    # `--check` refuses the update: one line per protected resource and per retained replacement, after the diff.
    assert markdown.returncode == 3
    refused = markdown.stderr.splitlines()
    assert [line.split(": `pulumi ")[0] for line in refused] == [
        "refused: prod: replace of kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim",
        "refused: prod: delete of aws:efs/fileSystem:FileSystem weights-storage-file-system",
        "refused: prod: delete of kubernetes:core/v1:PersistentVolume weights-storage-serving-llama-70b-volume",
        "refused: prod: delete of kubernetes:core/v1:PersistentVolumeClaim weights-storage-serving-llama-70b-claim"]


def test_a_renamed_component_type_recreates_every_descendant_with_warnings(rendered):
    # A component's type is in every descendant's URN (a name is only in its own): moving ServingStack to
    # another type token is the re-nesting a refactor causes. The engine sees prod's render with the token
    # renamed wherever it occurs: the component's type, its children's parent and every URN's type chain.
    base = rendered["prod"].resources
    head = json.loads(json.dumps(base).replace("llmserving:stack:ServingStack", "llmserving:serving:ServingStack"))
    out = format_text(diff_resources(base, head, "prod", "main", "1a2b3c4"))
    counts = out.splitlines()[0]
    # The component and every resource under it: all but what the program creates at the top (the providers and
    # the preview reader's RBAC, stacks/reader.py), whose URNs do not name the component.
    moved = sum(1 for r in base if "llmserving:stack:ServingStack" in r["urn"])
    assert moved < len(base) - 1
    assert counts == f"prod: 0 to replace, {moved} to delete, {moved} to create, 0 to update against main (1a2b3c4)"
    claim = out.split("- kubernetes:core/v1:PersistentVolumeClaim llama-70b-weights-claim\n", 1)[1]
    assert claim.startswith(
        "    ! its URN changed (a renamed or re-nested parent): deleted here and created under the new URN; an "
        "`aliases` option would keep it\n"
        "    ! preview error: protected, so `pulumi preview` and `pulumi up` fail instead of this delete until "
        "protect is removed (protect=False in the program, or `pulumi state unprotect`)\n"
        "    ! retainOnDelete: the engine forgets it but leaves it in the cloud or cluster, unmanaged\n")


def test_a_replaced_revision_says_where_its_files_stay_and_how_big_they_are():
    def job(name: str, revision: str) -> dict[str, object]:
        env = [{"name": "MODEL_ID", "value": "meta-llama/Llama-3.1-70B-Instruct"},
               {"name": "REVISION", "value": revision},
               {"name": "TARGET", "value": f"/models/meta-llama--Llama-3.1-70B-Instruct/{revision}"}]
        return urned("kubernetes:batch/v1:Job", name,
                     metadata={"labels": {"app.kubernetes.io/component": "stage-weights"}},
                     spec={"template": {"spec": {"containers": [{"name": "stage", "env": env}]}}})
    diff = diff_resources([job("llama-70b-stage-old", "aaaa")], [job("llama-70b-stage-new", "bbbb")], "prod", "main")
    assert diff.of("delete")[0].notes == (
        "revision aaaa stays in /models/meta-llama--Llama-3.1-70B-Instruct/aaaa (141 GB) on the weights volume: "
        "delete that directory once the new revision serves and no rollback to it is planned",)


def test_a_retained_object_replaced_delete_first_is_an_up_failure_the_preview_does_not_see():
    # A StorageClass rename forces a new claim of the same name; the claim is retainOnDelete (no protect in dev).
    options = {"retainOnDelete": True}
    base = [urned(PVC, "claim", options=options, metadata={"name": "weights", "namespace": "llm"},
                  spec={"storageClassName": "efs-sc"})]
    head = [urned(PVC, "claim", options=options, metadata={"name": "weights", "namespace": "llm"},
                  spec={"storageClassName": "efs-fast"})]
    diff = diff_resources(base, head, "dev", "main")
    (change,) = diff.changes
    assert change.action == "replace" and change.notes[0].startswith(
        "up fails: retainOnDelete makes the engine's delete a no-op, so the old object stays and the replacement's "
        "create of the same name fails (AlreadyExists)")
    assert diff.up_errors == (f"{PVC} claim",) and diff.preview_errors == ()
    assert f"  pulumi up fails: 1 retained resource(s) replaced delete-first: {PVC} claim\n" in format_text(diff)
    # `--check` refuses it, naming the object and the two ways that work.
    (refused,) = diff.refusals()
    assert refused.startswith(f"dev: replace of {PVC} claim: `pulumi up` would fail (AlreadyExists)")
    assert "out of the stack in one up" in refused and "a new stack beside this one" in refused
    assert "> `pulumi up` fails where the preview passes" in format_markdown(diff)
    # Created first under a new name, the old object is only forgotten.
    renamed = [urned(PVC, "claim", options={**options, "deleteBeforeReplace": False},
                     metadata={"name": "weights-2", "namespace": "llm"}, spec={"storageClassName": "efs-fast"})]
    created_first = diff_resources(base, renamed, "dev", "main")
    (change,) = created_first.changes
    assert change.notes[0] == ("the replacement is created first; the old one is then only forgotten "
                               "(retainOnDelete): it stays in the cloud or cluster, unmanaged")
    assert created_first.refusals() == ()


def test_a_chart_change_says_its_rendered_objects_are_not_in_the_offline_diff():
    chart = "kubernetes:helm.sh/v4:Chart"
    base = [urned(chart, "crds", chart_name="gateway-crds-helm", version="v1.9.0")]
    head = [urned(chart, "crds", chart_name="gateway-crds-helm", version="v1.9.1")]
    (change,) = diff_resources(base, head, "prod", "main").changes
    assert change.notes[-1].startswith("contents not shown: the objects this chart renders (CRDs included)")
    # A change of options alone renders nothing new, so nothing is hidden.
    moved = [urned(chart, "crds", options={"dependsOn": ["x"]}, chart_name="gateway-crds-helm", version="v1.9.0")]
    (change,) = diff_resources(base, moved, "prod", "main").changes
    assert not any(n.startswith("contents not shown") for n in change.notes)
