"""tools/scan.py: the skip-list gate over Checkov's JSON report, and the committed skip list itself.

Checkov runs only in `make scan` (its own virtualenv); these tests pin the gate's decisions on
reports of Checkov's shape and check that every entry of the list still names what the render holds.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
import yaml

from tools import scan
from tools.scan import Finding, Skip, SkipListError

STACKS = ("dev", "prod", "staging")
REASON = "vLLM reads its API key only from VLLM_API_KEY or --api-key; an argument shows in the pod spec."


def report(*failed: tuple[str, str], passed: int = 3) -> dict[str, Any]:
    """A Checkov JSON report with the given (check id, resource) failures."""
    return {
        "check_type": "kubernetes",
        "summary": {"passed": passed, "failed": len(failed)},
        "results": {"failed_checks": [
            {"check_id": check, "check_name": "a check", "resource": resource,
             "file_path": "/manifests.yaml", "file_line_range": [10, 20]}
            for check, resource in failed
        ]},
    }


def skip(check: str = "CKV_K8S_35", stacks: tuple[str, ...] = STACKS,
         resources: tuple[str, ...] = ("Deployment.llm-serving.*",)) -> Skip:
    return Skip(check, stacks, resources, REASON)


def test_findings_are_read_from_one_report_or_a_list_of_reports():
    one = report(("CKV_K8S_35", "Deployment.llm-serving.llama-8b"))
    assert scan.failed_findings(one) == [
        Finding("CKV_K8S_35", "a check", "Deployment.llm-serving.llama-8b", "/manifests.yaml:10-20")]
    assert scan.failed_findings([one, report(("CKV_K8S_11", "Job.llm-serving.x"))])[1].check == "CKV_K8S_11"
    assert scan.passed_count([one, report(passed=4)]) == 7


def test_a_finding_covered_by_check_stack_and_resource_pattern_passes():
    findings = {"dev": scan.failed_findings(report(("CKV_K8S_35", "Deployment.llm-serving.llama-8b")))}
    assert scan.judge(findings, [skip(stacks=("dev",))]) == ([], [])


@pytest.mark.parametrize("entry", [
    skip(check="CKV_K8S_11", stacks=("dev",)),  # another check
    skip(stacks=("prod",)),  # another stack
    skip(stacks=("dev",), resources=("Deployment.kube-system.*",)),  # another resource
])
def test_a_finding_no_entry_covers_fails_with_where_it_is(entry):
    findings = {"dev": scan.failed_findings(report(("CKV_K8S_35", "Deployment.llm-serving.llama-8b")))}
    uncovered, _ = scan.judge(findings, [entry])
    assert uncovered == ["dev: CKV_K8S_35 (a check) on Deployment.llm-serving.llama-8b at /manifests.yaml:10-20"]


def test_an_entry_that_covers_nothing_in_one_of_its_stacks_is_stale():
    findings = {
        "dev": scan.failed_findings(report(("CKV_K8S_35", "Deployment.llm-serving.llama-8b"))),
        "prod": [],  # fixed in prod
    }
    assert scan.judge(findings, [skip(stacks=("dev", "prod"))]) == ([], [
        "entry 0 (CKV_K8S_35 on Deployment.llm-serving.*) covers nothing in prod; remove prod from it, or the entry"])


def test_a_pattern_covers_a_clone_without_editing_the_list():
    findings = {"prod-eu": scan.failed_findings(report(("CKV_K8S_35", "Deployment.llm-serving.llama-70b")))}
    assert scan.judge(findings, [skip(stacks=("prod*",))]) == ([], [])
    assert scan.judge(findings, [skip(stacks=("dev*",))])[0] == [
        "prod-eu: CKV_K8S_35 (a check) on Deployment.llm-serving.llama-70b at /manifests.yaml:10-20"]


def test_a_pattern_is_stale_only_when_no_stack_it_matches_needs_it():
    findings = {
        "prod": scan.failed_findings(report(("CKV_K8S_35", "Deployment.llm-serving.llama-70b"))),
        "prod-eu": [],
        "staging": [],
    }
    assert scan.judge(findings, [skip(stacks=("prod*",))]) == ([], [])
    assert scan.judge(findings, [skip(stacks=("prod*", "staging*"))])[1] == [
        "entry 0 (CKV_K8S_35 on Deployment.llm-serving.*) covers nothing in staging; remove staging* from it, "
        "or the entry"]


def test_stacks_not_scanned_this_run_do_not_make_an_entry_stale():
    findings = {"dev": scan.failed_findings(report(("CKV_K8S_35", "Deployment.llm-serving.llama-8b")))}
    assert scan.judge(findings, [skip(stacks=("dev", "prod"))]) == ([], [])


def test_a_malformed_skip_list_names_every_problem():
    document = [
        {"check": "K8S_11", "stacks": ["qa"], "resources": [], "reason": "fine", "owner": "me"},
        "CKV_K8S_11",
    ]
    with pytest.raises(SkipListError) as raised:
        scan.parse_skips(document, STACKS)
    assert str(raised.value).splitlines() == [
        "entry 0: unknown keys owner; allowed: check, stacks, resources, reason",
        "entry 0.check: 'K8S_11' is not a Checkov check id such as CKV_K8S_11",
        "entry 0.stacks: ['qa']; expected a non-empty list of stack name patterns, each matching one of dev, prod, "
        "staging, workflows",
        "entry 0.resources: []; expected a non-empty list of resource id patterns",
        "entry 0.reason: must say why the finding is accepted (at least 40 characters)",
        "entry 1: must be a mapping with check, stacks, resources, reason",
    ]
    with pytest.raises(SkipListError, match="must be a YAML list of entries, got dict"):
        scan.parse_skips({"check": "CKV_K8S_11"}, STACKS)


def committed_skips() -> list[Skip]:
    return scan.parse_skips(yaml.safe_load(scan.SKIPS_FILE.read_text()), STACKS)


def test_the_committed_skip_list_is_the_reviewed_set_of_accepted_checks():
    assert [(s.check, s.stacks) for s in committed_skips()] == [
        ("CKV_K8S_11", ("*",)),  # CPU limits
        ("CKV_K8S_15", ("*",)),  # imagePullPolicy Always
        ("CKV_K8S_43", ("dev*", "staging*")),  # digests outside prod
        ("CKV_K8S_43", ("prod*",)),  # prod digest until models[].image.digest is set
        ("CKV_K8S_35", ("*",)),  # VLLM_API_KEY as env
        ("CKV_K8S_40", ("*",)),  # UID 2000, the image's own user
        ("CKV_K8S_38", ("*",)),  # the endpoint picker reads pods and pools, the drain barrier its Deployment
        ("CKV_K8S_8", ("*",)),  # the image pre-pull pods only sleep: no liveness probe
        ("CKV_K8S_9", ("*",)),  # ... and no readiness probe
    ]


def _checkov_ids(result: Any) -> list[str]:
    """Kind.namespace.name, as Checkov names the render's namespaced objects."""
    ids = []
    for resource in result.resources:
        inputs = resource["inputs"]
        metadata = inputs.get("metadata", {}) if isinstance(inputs, dict) else {}
        if "kind" in inputs and metadata.get("namespace"):
            ids.append(f"{inputs['kind']}.{metadata['namespace']}.{metadata['name']}")
    return ids


@pytest.mark.parametrize("stack", STACKS)
def test_every_skip_pattern_matches_only_vllm_deployments_and_staging_jobs_in_the_render(rendered, stack):
    ids = _checkov_ids(rendered[stack])
    workloads = sorted(i for i in ids if i.split(".")[0] in ("DaemonSet", "Deployment", "Job"))
    for entry in committed_skips():
        if stack not in entry.stacks:
            continue
        matched = sorted(i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in entry.resources))
        assert matched, f"{entry.check}: no resource of {stack} matches {entry.resources}"
        assert set(matched) <= set(workloads)
    model = {"dev": "llama-8b", "staging": "llama-70b", "prod": "llama-70b"}[stack]
    # The Job's name ends in a hash of its template.
    # Every stack routes through an InferencePool (dev's model scales to zero and its picker holds the first
    # request), so each runs the model's endpoint picker.
    pickers = [f"Deployment.llm-serving.{model}-epp"]
    # dev's 1-GPU nodes leave no room for a compile-cache producer beside the surge replica (cache off).
    producers = [] if stack == "dev" else [f"Job.llm-serving.{model}-compile-<hash>"]
    # The node generation's drain barrier (llm_serving/gpu/drain.py) passes the checks these entries skip but its
    # token's (CKV_K8S_38).
    assert [w if not w.startswith("Job.") and "drain-barrier" not in w else w.rsplit("-", 1)[0] + "-<hash>"
            for w in workloads] == [
        "DaemonSet.llm-serving.llm-serving-image-prepull", f"Deployment.llm-serving.{model}", *pickers,
        "Deployment.llm-serving.node-drain-barrier-<hash>",
        *producers, f"Job.llm-serving.{model}-stage-<hash>", f"Job.llm-serving.{model}-verify-<hash>"]



# --- zizmor --------------------------------------------------------------------------------------

ZIZMOR_REASON = "The workspace-relative form calls the file at the caller's commit, which deploy needs."


def zizmor_report(*found: tuple[str, str, list[dict[str, object]]]) -> list[dict[str, Any]]:
    """zizmor's JSON (v1) shape: (audit, file, route steps) per finding, one primary location each."""
    return [{
        "ident": audit,
        "determinations": {"confidence": "High", "severity": "Low", "persona": "Regular"},
        "locations": [{
            "symbolic": {"key": {"Local": {"verbatim_path": path}}, "annotation": "this job",
                         "route": {"route": route}, "kind": "Primary"},
            "concrete": {"location": {"start_point": {"row": 15, "column": 4}}},
        }],
    } for audit, path, route in found]


DEPLOY_USES = ("self-repository", ".github/workflows/deploy.yml", [{"Key": "jobs"}, {"Key": "dev"}, {"Key": "uses"}])
STEP_CHECKOUT = ("artipacked", ".github/workflows/ci.yml",
                 [{"Key": "jobs"}, {"Key": "test"}, {"Key": "steps"}, {"Index": 0}])


def test_zizmor_findings_are_keyed_by_audit_file_and_route():
    assert scan.zizmor_findings(zizmor_report(DEPLOY_USES, STEP_CHECKOUT)) == [
        scan.ZizmorFinding("self-repository", ".github/workflows/deploy.yml", "jobs.dev.uses", 16, "Low", "this job"),
        scan.ZizmorFinding("artipacked", ".github/workflows/ci.yml", "jobs.test.steps[0]", 16, "Low", "this job"),
    ]


def test_a_zizmor_finding_is_accepted_only_by_an_entry_for_its_audit_file_and_location():
    findings = scan.zizmor_findings(zizmor_report(DEPLOY_USES, STEP_CHECKOUT))
    entry = scan.ZizmorIgnore("self-repository", ".github/workflows/deploy.yml", ("jobs.*.uses",), ZIZMOR_REASON)
    uncovered, stale = scan.judge_zizmor(findings, [entry])
    assert uncovered == [".github/workflows/ci.yml:16: artipacked (Low) at jobs.test.steps[0]: this job"]
    assert stale == []
    elsewhere = scan.ZizmorIgnore("self-repository", ".github/workflows/ci.yml", ("jobs.*.uses",), ZIZMOR_REASON)
    assert scan.judge_zizmor(findings[:1], [elsewhere]) == (
        [".github/workflows/deploy.yml:16: self-repository (Low) at jobs.dev.uses: this job"],
        ["entry 0 (self-repository in .github/workflows/ci.yml at jobs.*.uses) covers nothing; remove it"])


def test_a_malformed_zizmor_ignore_list_names_every_problem():
    document = [{"audit": "Self Repository", "file": "deploy.yml", "where": [], "reason": "ok", "owner": "me"}]
    with pytest.raises(SkipListError) as error:
        scan.parse_zizmor_ignores(document)
    assert str(error.value).splitlines() == [
        "entry 0: unknown keys owner; allowed: audit, file, where, reason",
        "entry 0.audit: 'Self Repository' is not a zizmor audit id such as dangerous-triggers",
        "entry 0.file: 'deploy.yml'; expected a path under .github/, e.g. .github/workflows/ci.yml",
        "entry 0.where: []; expected a non-empty list of location patterns such as jobs.*.uses",
        f"entry 0.reason: must say why the finding is accepted (at least {scan.MIN_REASON_CHARS} characters)",
    ]
    with pytest.raises(SkipListError, match="must be a YAML list"):
        scan.parse_zizmor_ignores({"audit": "x"})


def test_the_committed_zizmor_ignore_list_is_the_reviewed_set():
    entries = scan.parse_zizmor_ignores(yaml.safe_load(scan.ZIZMOR_IGNORES_FILE.read_text()))
    assert [(e.audit, e.file, e.where) for e in entries] == [
        ("dangerous-triggers", ".github/workflows/offline-diff-comment.yml", ("on.workflow_run",)),
        ("self-repository", ".github/workflows/deploy.yml", ("jobs.*.uses",)),
    ]
