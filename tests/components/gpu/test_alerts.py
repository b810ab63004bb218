"""Tests for llm_serving/gpu/alerts.py: the GPU health PrometheusRule groups.

They pin every alert's expression, duration and severity, prove each expression parses and only
uses metrics our counters file exports, and check that every alert names its node and GPU.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from llm_serving.gpu import alerts as gpu_alerts
from llm_serving.gpu.alerts import CRITICAL_XIDS, NODE_LABEL, gpu_health_rule_groups
from llm_serving.gpu.counters import COUNTERS
from tests.support import promql
from tests.support.reference import custom_resource_errors

RUNBOOKS = "https://runbooks.example.com/gpu-health"
GROUPS = gpu_health_rule_groups(runbook_base_url=RUNBOOKS)
RULES = [rule for group in GROUPS for rule in group["rules"]]
BY_NAME = {rule["alert"]: rule for rule in RULES}

# Independent of gpu_alerts.ALLOWED_METRICS on purpose: derived from the counters file itself.
EXPORTED = {c.field for c in COUNTERS if c.prom_type != "label"}
METRIC_TYPES = {c.field: c.prom_type for c in COUNTERS if c.prom_type != "label"}
KNOWN = EXPORTED | {"up"}

J = 'job="dcgm-exporter"'
XIDS = "46|48|62|64|74|79|95|110|119|120|136|140|143|155|156|158"
# With auto repair (the default): the critical Xids EKS reboots or replaces the node for (awsdocs
# node-health-nma.adoc) warn while it works and page after 15 minutes; the others page at once.
REPAIRED = "48|64|74|79|95|119|120|140"
UNREPAIRED = "46|62|110|136|143|155|156|158"
TEMP = f"DCGM_FI_DEV_GPU_TEMP{{{J}}}"
REASONS = f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{J}}}"

EXPECTED = [
    ("GpuXidCritical", f'DCGM_EXP_XID_ERRORS_COUNT{{{J},xid=~"{UNREPAIRED}"}} > 0', "0m", "critical"),
    ("GpuXidAutoRepairing", f'DCGM_EXP_XID_ERRORS_COUNT{{{J},xid=~"{REPAIRED}"}} > 0', "0m", "warning"),
    ("GpuXidNotRepaired", f'DCGM_EXP_XID_ERRORS_COUNT{{{J},xid=~"{REPAIRED}"}} > 0', "15m", "critical"),
    ("GpuXidError", f'DCGM_EXP_XID_ERRORS_COUNT{{{J},xid!~"{XIDS}"}} > 0', "0m", "warning"),
    ("GpuEccDoubleBitErrors", f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{J}}}[10m]) > 0", "0m", "critical"),
    ("GpuRowRemapFailure", f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{J}}} > 0", "0m", "critical"),
    (
        "GpuUncorrectableRowRemapsIncreasing",
        f"increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{J}}}[1h]) > 0",
        "0m",
        "warning",
    ),
    ("GpuThermalThrottling", f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{J}}}[5m]) > 0", "10m", "warning"),
    ("GpuPowerThrottling", f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{J}}}[5m]) > 0", "10m", "warning"),
    ("GpuHardwareSlowdown", f"({REASONS} % 16) >= 8 or ({REASONS} % 256) >= 64", "10m", "warning"),
    ("GpuTemperatureHigh", f"{TEMP} > 85", "5m", "warning"),
    (
        "GpuMissing",
        f"(max by (node, UUID, gpu) (max_over_time({TEMP}[1h])) unless on (node, UUID) {TEMP})"
        f" and on (node) {TEMP}",
        "5m",
        "critical",
    ),
    (
        "DcgmExporterNotReporting",
        f"up{{{J}}} == 0 or (up{{{J}}} == 1 unless on (node) {TEMP})",
        "5m",
        "warning",
    ),
]

# Alerts about a whole node's exporter: `up` carries no gpu label, so they cannot name one GPU.
NODE_LEVEL_ALERTS = {"DcgmExporterNotReporting"}


def test_alert_table_is_exactly_as_designed() -> None:
    actual = [(r["alert"], r["expr"], r["for"], r["labels"]["severity"]) for r in RULES]
    assert actual == EXPECTED


def test_one_group_with_a_stable_name() -> None:
    assert [group["name"] for group in GROUPS] == ["llm-serving-gpu-health"]
    assert gpu_alerts.alert_names(GROUPS) == [name for name, _, _, _ in EXPECTED]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_expression_parses(rule: dict) -> None:
    assert promql.parse_errors(rule["expr"]) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_expression_uses_only_exported_metrics_and_up(rule: dict) -> None:
    assert promql.unknown_metric_errors(rule["expr"], KNOWN) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_rate_and_increase_only_touch_counters(rule: dict) -> None:
    assert promql.counter_function_errors(rule["expr"], METRIC_TYPES) == []


def test_windowed_xid_count_is_never_rated() -> None:
    # Typed counter upstream, but it is a sliding-window count that falls back to zero.
    for rule in RULES:
        if "DCGM_EXP_XID_ERRORS_COUNT" in promql.metric_names(rule["expr"]):
            assert promql.function_names(rule["expr"]) & promql.COUNTER_ONLY_FUNCTIONS == set()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_every_selector_is_scoped_to_the_exporter_job(rule: dict) -> None:
    for selector in promql.selectors(rule["expr"]):
        assert ("job", "=", "dcgm-exporter") in selector.matchers, (rule["alert"], selector)


def test_custom_job_label_reaches_every_selector() -> None:
    groups = gpu_health_rule_groups(runbook_base_url=RUNBOOKS, job_label="gpu-operator/nvidia-dcgm-exporter")
    for rule in groups[0]["rules"]:
        for selector in promql.selectors(rule["expr"]):
            assert ("job", "=", "gpu-operator/nvidia-dcgm-exporter") in selector.matchers


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_every_alert_has_severity_summary_and_runbook(rule: dict) -> None:
    assert rule["labels"] == {"severity": rule["labels"]["severity"]}
    assert rule["labels"]["severity"] in {"critical", "warning"}
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["description"].strip()
    assert annotations["runbook_url"] == f"{RUNBOOKS}#{rule['alert'].lower()}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_summary_names_the_node_and_the_gpu(rule: dict) -> None:
    summary = rule["annotations"]["summary"]
    assert "{{ $labels.node }}" in summary
    if rule["alert"] in NODE_LEVEL_ALERTS:
        assert "GPUs" in summary and "$labels.gpu" not in summary
    else:
        assert "GPU {{ $labels.gpu }}" in summary


def test_node_label_is_the_one_the_service_monitor_must_set() -> None:
    assert NODE_LABEL == "node"
    # Everything keyed per node in the expressions uses that same label.
    for rule in RULES:
        for match in re.findall(r"on \(([^)]*)\)", rule["expr"]):
            assert NODE_LABEL in [label.strip() for label in match.split(",")]


def test_a_wrong_metric_name_is_caught() -> None:
    expr = BY_NAME["GpuTemperatureHigh"]["expr"]
    broken = expr.replace("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMPERATURE")
    errors = promql.unknown_metric_errors(broken, KNOWN)
    assert errors and "unknown metric 'DCGM_FI_DEV_GPU_TEMPERATURE'" in errors[0]


def test_a_deprecated_field_in_an_alert_is_caught() -> None:
    broken = BY_NAME["GpuHardwareSlowdown"]["expr"].replace(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
    )
    assert promql.unknown_metric_errors(broken, KNOWN) != []


def test_critical_and_warning_xid_alerts_split_on_the_same_list() -> None:
    [critical] = promql.selectors(BY_NAME["GpuXidCritical"]["expr"])
    [warning] = promql.selectors(BY_NAME["GpuXidError"]["expr"])
    assert ("xid", "=~", UNREPAIRED) in critical.matchers
    assert sorted(int(c) for c in (UNREPAIRED + "|" + REPAIRED).split("|")) == sorted(CRITICAL_XIDS)
    assert set(REPAIRED.split("|")) <= {str(c) for c in gpu_alerts.AUTO_REPAIR_REBOOT_XIDS
                                        + gpu_alerts.AUTO_REPAIR_REPLACE_XIDS}
    # Without auto repair every critical Xid pages at once, and the repair alerts are left out.
    manual = {r["alert"]: r for g in gpu_health_rule_groups(runbook_base_url=RUNBOOKS, auto_repair=False)
              for r in g["rules"]}
    assert manual["GpuXidCritical"]["expr"] == f'DCGM_EXP_XID_ERRORS_COUNT{{{J},xid=~"{XIDS}"}} > 0'
    assert not {"GpuXidAutoRepairing", "GpuXidNotRepaired"} & set(manual)
    assert ("xid", "!~", XIDS) in warning.matchers
    assert "|".join(str(code) for code in sorted(CRITICAL_XIDS)) == XIDS


def test_critical_xids_follow_nvidias_reset_or_reboot_actions() -> None:
    # Lost GPU, uncorrectable memory, NVLink and GSP failures page; handled events do not.
    assert {48, 64, 74, 79, 95, 119, 120, 140} <= set(CRITICAL_XIDS)
    assert set(CRITICAL_XIDS).isdisjoint({13, 31, 43, 45, 63, 92, 94, 109})


def test_hardware_slowdown_modulo_arithmetic_equals_the_bit_test() -> None:
    # The rule's (modulus, threshold) pairs, evaluated as PromQL would (float modulo) on every
    # combination of the nine documented clock-event bits.
    expr = BY_NAME["GpuHardwareSlowdown"]["expr"]
    pairs = [(int(m), int(t)) for m, t in re.findall(r"% (\d+)\) >= (\d+)", expr)]
    assert pairs == [(16, 8), (256, 64)]
    wanted = gpu_alerts.HW_SLOWDOWN_BIT | gpu_alerts.HW_THERMAL_BIT | gpu_alerts.HW_POWER_BRAKE_BIT
    for mask in range(512):
        fires = any(float(mask) % modulus >= threshold for modulus, threshold in pairs)
        assert fires == bool(mask & wanted), mask


def test_parameters_reach_the_rules() -> None:
    groups = gpu_health_rule_groups(
        runbook_base_url=RUNBOOKS, throttle_for_minutes=15, temperature_celsius=90, exporter_absent_minutes=7
    )
    rules = {rule["alert"]: rule for rule in groups[0]["rules"]}
    for name in ("GpuThermalThrottling", "GpuPowerThrottling", "GpuHardwareSlowdown"):
        assert rules[name]["for"] == "15m"
    assert rules["GpuTemperatureHigh"]["expr"] == f"{TEMP} > 90"
    assert "above 90 C" in rules["GpuTemperatureHigh"]["annotations"]["summary"]
    assert rules["DcgmExporterNotReporting"]["for"] == "7m"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runbook_base_url": ""}, "runbook_base_url=''"),
        ({"runbook_base_url": "https://x/y#a"}, "without '#'"),
        ({"runbook_base_url": RUNBOOKS, "job_label": 'a"b'}, "job_label="),
        (
            {"runbook_base_url": RUNBOOKS, "temperature_celsius": 200},
            "temperature_celsius=200: expected an integer from 40 to 120",
        ),
        ({"runbook_base_url": RUNBOOKS, "throttle_for_minutes": 0}, "throttle_for_minutes=0"),
        ({"runbook_base_url": RUNBOOKS, "exporter_absent_minutes": True}, "exporter_absent_minutes=True"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        gpu_health_rule_groups(**kwargs)


def test_groups_form_a_valid_prometheus_rule() -> None:
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpu-health", "namespace": "monitoring"},
        "spec": {"groups": GROUPS},
    }
    assert custom_resource_errors(rule) == []


def test_module_is_pure_data_without_pulumi() -> None:
    tree = ast.parse(Path(gpu_alerts.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "pulumi" for name in imported)


def _descriptions(auto_repair: bool) -> dict[str, str]:
    (group,) = gpu_health_rule_groups(runbook_base_url="https://runbooks.example.com/x", auto_repair=auto_repair)
    return {rule["alert"]: rule["annotations"]["description"] for rule in group["rules"]}


def test_xid_and_ecc_alerts_say_what_auto_repair_fixes_and_what_needs_a_person() -> None:
    on, off = _descriptions(True), _descriptions(False)
    note = ("With node auto repair on, EKS reboots the node for Xid 48, 63, 64, 94, 95 and replaces it for "
            "Xid 74, 79, 119, 120, 121, 140 about 10 minutes after the fault, one node at a time; any other Xid "
            "needs a person.")
    for alert in ("GpuXidCritical", "GpuXidError"):
        assert on[alert].endswith(note)
        assert off[alert].endswith("Node auto repair is off: every fault needs a person.")
    assert on["GpuEccDoubleBitErrors"].endswith("EKS replaces the node (the agent's NvidiaDoubleBitError).")
    # Xids NVIDIA calls critical that EKS does not act on still need a person.
    unrepaired = sorted(set(CRITICAL_XIDS) - set(gpu_alerts.AUTO_REPAIR_REBOOT_XIDS)
                        - set(gpu_alerts.AUTO_REPAIR_REPLACE_XIDS))
    assert unrepaired == [46, 62, 110, 136, 143, 155, 156, 158]


def test_the_alerts_promise_no_repair_for_the_application_xids_the_agent_only_reports() -> None:
    # eks-node-monitoring-agent (pinned v1.7.0) dropped Xid 13 and 31 from its well-known list in v1.6.4: events
    # only, no node condition, so EKS repairs nothing for them.
    assert not {13, 31} & set(gpu_alerts.AUTO_REPAIR_REBOOT_XIDS + gpu_alerts.AUTO_REPAIR_REPLACE_XIDS)
