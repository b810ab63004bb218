"""GPU health alert rules (PrometheusRule spec.groups) built on the DCGM exporter counters we export.

Pure data, no Pulumi: Xid, ECC, row remapping, throttling, temperature and silent-exporter alerts,
each naming the node and GPU and linking to a runbook anchor. Metric names come from counters.py.
"""

from __future__ import annotations

from typing import Any

from llm_serving.platform import NODE_LABEL, alert_rule

from . import counters

# Per-device labels the exporter puts on every GPU metric (render_metrics.go, 4.5.3-4.8.2): `gpu` is
# DCGM's index, which can shift when a GPU disappears and the exporter restarts; `UUID` is stable
# (it becomes `uuid` only with the non-default -o/--use-old-namespace flag).
GPU_LABEL = "gpu"
UUID_LABEL = "UUID"

# Xids that mean the GPU is lost, hung or returning corrupt data. Rule: NVIDIA's Xid catalog lists
# the immediate action as RESET_GPU or RESTART_BM (or a workflow that its text says needs a GPU
# reset or node reboot). Source: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
# (Ampere and newer). Deliberately NOT critical:
#   63 row-remap event and 92 high single-bit rate: catalog action IGNORE (trend them instead);
#   94 contained ECC error: RESTART_APP, "reset the GPU when convenient";
#   109 context-switch timeout: catalog says RESET_GPU, but NVIDIA's k8s-device-plugin treats it
#       as an application error and keeps the GPU healthy (health.go ignoredXids), so we follow it;
#   144-150 NVLink5 (Blackwell): the action depends on a subcode the exporter does not expose.
# Every Xid outside this list still raises the warning-level GpuXidError.
CRITICAL_XIDS: dict[int, str] = {
    46: "GPU stopped processing (RESET_GPU)",
    48: "double-bit ECC error; a GPU reset or node reboot clears it",
    62: "internal micro-controller halt (RESET_GPU)",
    64: "row remapping failure (RESET_GPU)",
    74: "NVLink error; a GPU reset or node reboot clears it",
    79: "GPU has fallen off the bus (RESTART_BM)",
    95: "uncontained memory error (RESET_GPU)",
    110: "security fault (RESET_GPU)",
    119: "GSP RPC timeout (RESET_GPU)",
    120: "GSP error (RESET_GPU)",
    136: "link training failed (RESET_GPU)",
    140: "unrecovered ECC error (RESET_GPU)",
    143: "GPU initialisation error (RESET_GPU)",
    155: "NVLink link down (RESET_GPU)",
    156: "resource retirement event (RESET_GPU)",
    158: "GPU fatal timeout (RESET_GPU)",
}

# DCGM clock-event reason bits (DCGM dcgm_fields.h, DCGM_CLOCKS_EVENT_REASON_*; 1:1 with NVML).
HW_SLOWDOWN_BIT = 0x8  # hardware halves clocks or worse: overheating, power brake, fast trigger
HW_THERMAL_BIT = 0x40  # hardware thermal slowdown
HW_POWER_BRAKE_BIT = 0x80  # external power brake asserted (e.g. by the power supply)

GROUP_NAME = "llm-serving-gpu-health"

# Metrics the rules may reference: what our counters file makes the exporter emit, plus `up`,
# which Prometheus synthesises for every scrape target.
ALLOWED_METRICS: frozenset[str] = counters.exported_metric_names() | {"up"}


def _check(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}={value!r}: expected an integer from {low} to {high}")


# What EKS node auto repair does about GPU faults: the node monitoring agent sets the node's
# AcceleratedHardwareReady condition for these Xids and EKS reboots or replaces the node after
# 10 minutes; other Xids are only events (awsdocs node-health-nma.adoc, node-repair.adoc). Not 13 or 31: the pinned
# agent (v1.7.0) reports those application faults as events only (gpu/repair.py).
AUTO_REPAIR_REBOOT_XIDS = (48, 63, 64, 94, 95)
AUTO_REPAIR_REPLACE_XIDS = (74, 79, 119, 120, 121, 140)


def _codes(codes: tuple[int, ...]) -> str:
    return ", ".join(str(c) for c in codes)


AUTO_REPAIR_XID_NOTE = (
    f"With node auto repair on, EKS reboots the node for Xid {_codes(AUTO_REPAIR_REBOOT_XIDS)} and replaces it for "
    f"Xid {_codes(AUTO_REPAIR_REPLACE_XIDS)} about 10 minutes after the fault, one node at a time; any other Xid "
    "needs a person."
)
NO_AUTO_REPAIR_NOTE = "Node auto repair is off: every fault needs a person."
# EKS acts about 10 minutes after the fault; past this a repair that should have come did not.
AUTO_REPAIR_WINDOW_MINUTES = 15


def gpu_health_rule_groups(
    *,
    runbook_base_url: str,
    auto_repair: bool = True,
    job_label: str = "dcgm-exporter",
    throttle_for_minutes: int = 10,
    temperature_celsius: int = 85,
    exporter_absent_minutes: int = 5,
) -> list[dict[str, Any]]:
    """PrometheusRule `spec.groups` for GPU health, scoped to the exporter's scrape job."""
    if not runbook_base_url or "#" in runbook_base_url or any(c.isspace() for c in runbook_base_url):
        raise ValueError(f"runbook_base_url={runbook_base_url!r}: expected a URL without '#' or spaces")
    # The job value is embedded in PromQL string literals; quotes or backslashes would break them.
    if not job_label or any(c in job_label for c in '"\\\n'):
        raise ValueError(f"job_label={job_label!r}: expected a non-empty value without quotes or backslashes")
    _check("throttle_for_minutes", throttle_for_minutes, 1, 24 * 60)
    _check("temperature_celsius", temperature_celsius, 40, 120)
    _check("exporter_absent_minutes", exporter_absent_minutes, 1, 24 * 60)

    job = f'job="{job_label}"'
    node = f"{{{{ $labels.{NODE_LABEL} }}}}"
    gpu = f"{{{{ $labels.{GPU_LABEL} }}}}"
    uuid = f"{{{{ $labels.{UUID_LABEL} }}}}"
    on_gpu = f"GPU {gpu} on node {node}"
    xid_regex = "|".join(str(code) for code in sorted(CRITICAL_XIDS))
    # With auto repair, the critical Xids EKS repairs warn while it works and page only if it does not.
    repairs = set(AUTO_REPAIR_REBOOT_XIDS + AUTO_REPAIR_REPLACE_XIDS)
    repaired = sorted(set(CRITICAL_XIDS) & repairs) if auto_repair else []
    repaired_regex = "|".join(str(code) for code in repaired)
    unrepaired_regex = "|".join(str(code) for code in sorted(CRITICAL_XIDS) if code not in repaired)
    # Every selector carries job=..., so a second DCGM source (e.g. the GPU Operator's own exporter)
    # neither double-fires nor satisfies the "still reporting" checks below.
    xid_count = "DCGM_EXP_XID_ERRORS_COUNT"
    temp = f"DCGM_FI_DEV_GPU_TEMP{{{job}}}"
    reasons = f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{job}}}"
    window_note = (
        "It clears once the Xid leaves the exporter's {{ $labels.window_size_in_ms }} ms counting window, "
        "which does not mean the GPU recovered."
    )
    repair_note = AUTO_REPAIR_XID_NOTE if auto_repair else NO_AUTO_REPAIR_NOTE

    rules = [
        # Xids. DCGM_FI_DEV_XID_ERRORS only holds the LAST Xid and keeps it until the exporter restarts
        # (dcgm-exporter#500), so `> 0` would fire forever after one Xid; `changes(...[10m]) > 0` misses
        # a repeat of the same code (dcgm-exporter#190) and a critical Xid overwritten by another one
        # between two scrapes. The exporter's windowed count (labels xid, window_size_in_ms; see
        # dcgm_counters) sees repeats and every code separately, so `> 0` means "this Xid arrived in
        # the last window" (default 5 minutes). Caveat: DCGM said in 2024 it could not report Xid 79,
        # 119 and 120 through NVML (DCGM#162), hence the GpuMissing and exporter alerts as backstops.
        alert_rule(
            alert="GpuXidCritical",
            expr=f'{xid_count}{{{job},xid=~"{unrepaired_regex}"}} > 0',
            for_minutes=0,
            severity="critical",
            summary=f"Xid {{{{ $labels.xid }}}} on {on_gpu}: the GPU needs a reset or the node a reboot",
            description=(
                "NVIDIA's Xid catalog lists a GPU reset or node reboot as the immediate action for this Xid "
                "(lost GPU, uncorrectable memory error or hung engine). Cordon and drain the node, then "
                f"reset the GPU or replace the node. {window_note} {repair_note}"
            ),
            runbook_base_url=runbook_base_url,
        ),
        *([] if not repaired else [
            alert_rule(
                alert="GpuXidAutoRepairing",
                expr=f'{xid_count}{{{job},xid=~"{repaired_regex}"}} > 0',
                for_minutes=0,
                severity="warning",
                summary=f"Xid {{{{ $labels.xid }}}} on {on_gpu}: EKS auto repair reboots or replaces the node",
                description=(
                    "A critical Xid that EKS node auto repair acts on about 10 minutes after the fault (the node "
                    "monitoring agent marks AcceleratedHardwareReady false). The replica on this GPU is lost until "
                    f"then; GpuXidNotRepaired pages if it has not happened within {AUTO_REPAIR_WINDOW_MINUTES} "
                    f"minutes. {window_note}"
                ),
                runbook_base_url=runbook_base_url,
            ),
            # A reboot or replacement takes the exporter's series with it; an Xid still counted after
            # the window means the repair did not act (disabled on the group, or one node at a time).
            alert_rule(
                alert="GpuXidNotRepaired",
                expr=f'{xid_count}{{{job},xid=~"{repaired_regex}"}} > 0',
                for_minutes=AUTO_REPAIR_WINDOW_MINUTES,
                severity="critical",
                summary=f"Xid {{{{ $labels.xid }}}} on {on_gpu} for {AUTO_REPAIR_WINDOW_MINUTES} minutes: EKS auto "
                        "repair did not act",
                description=(
                    "EKS should have rebooted or replaced the node about 10 minutes after this Xid. Cordon and "
                    "drain the node, then reboot or replace it by hand, and check the node group's auto repair."
                ),
                runbook_base_url=runbook_base_url,
            ),
        ]),
        alert_rule(
            alert="GpuXidError",
            expr=f'{xid_count}{{{job},xid!~"{xid_regex}"}} > 0',
            for_minutes=0,
            severity="warning",
            summary=f"Xid {{{{ $labels.xid }}}} on {on_gpu}",
            description=(
                "An Xid that NVIDIA does not classify as needing a reset: usually an application fault "
                "(13, 31, 43), teardown after a killed process (45) or a memory event already handled "
                "(63, 92, 94). Check the vLLM pod on this GPU for a crash; repeated Xids on one GPU point "
                f"at hardware. {window_note} {repair_note}"
            ),
            runbook_base_url=runbook_base_url,
        ),
        # ECC double-bit errors are uncorrectable: data on this GPU may be wrong (NVIDIA catalog,
        # Xid 48). increase() copes with the volatile counter resetting on a GPU reset.
        alert_rule(
            alert="GpuEccDoubleBitErrors",
            expr=f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{job}}}[10m]) > 0",
            for_minutes=0,
            severity="critical",
            summary=f"Uncorrectable (double-bit) ECC errors on {on_gpu}",
            description=(
                "The GPU counted about {{ $value | humanize }} uncorrectable ECC errors in 10 minutes; "
                "results computed on it may be corrupt. Drain the node and reset the GPU; replace it if "
                "errors recur. "
                + ("With node auto repair on, EKS replaces the node (the agent's NvidiaDoubleBitError)."
                   if auto_repair else NO_AUTO_REPAIR_NOTE)
            ),
            runbook_base_url=runbook_base_url,
        ),
        # A failed row remap is a state, not an event: it stays set, so `> 0` firing until the GPU is
        # replaced is the intended behaviour.
        alert_rule(
            alert="GpuRowRemapFailure",
            expr=f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{job}}} > 0",
            for_minutes=0,
            severity="critical",
            summary=f"Memory row remapping failed on {on_gpu}",
            description=(
                "The GPU ran out of spare rows or could not remap a failing memory row, so it can no longer "
                "protect itself from that memory. Drain the node and replace the GPU."
            ),
            runbook_base_url=runbook_base_url,
        ),
        alert_rule(
            alert="GpuUncorrectableRowRemapsIncreasing",
            expr=f"increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{job}}}[1h]) > 0",
            for_minutes=0,
            severity="warning",
            summary=f"New memory rows remapped after uncorrectable errors on {on_gpu}",
            description=(
                "The GPU remapped about {{ $value | humanize }} more rows after uncorrectable errors in the "
                "last hour. The remap takes effect at the next GPU reset; schedule one, and replace the GPU "
                "if the count keeps rising."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # Throttling: the violation counters accumulate time spent below application clocks, so they
        # catch throttling between scrapes that a sampled bitmask would miss. `rate(...) > 0` is also
        # unit-proof: DCGM documents ns, older exporter CSVs said us, and a fraction threshold would
        # silently never fire if the unit were wrong by 1000x. The cost: any throttling in every
        # 5-minute window for the whole `for` period fires, not "throttled X% of the time".
        alert_rule(
            alert="GpuThermalThrottling",
            expr=f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{job}}}[5m]) > 0",
            for_minutes=throttle_for_minutes,
            severity="warning",
            summary=f"{on_gpu} is thermally throttled",
            description=(
                f"Clocks were held down by temperature in every 5-minute window for {throttle_for_minutes} "
                "minutes, which slows every request on this GPU (and its whole tensor-parallel group). "
                "Check cooling and the GPU and memory temperatures."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # Power capping under sustained full load can be normal on H100-class GPUs; it is a warning
        # because it lowers decode throughput for the whole replica, not because the GPU is failing.
        alert_rule(
            alert="GpuPowerThrottling",
            expr=f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{job}}}[5m]) > 0",
            for_minutes=throttle_for_minutes,
            severity="warning",
            summary=f"{on_gpu} is power throttled",
            description=(
                f"Clocks were held down by the power limit in every 5-minute window for "
                f"{throttle_for_minutes} minutes. Sustained capping lowers tokens per second for the whole "
                "replica; check the power limit (nvidia-smi -q -d POWER) and compare with peer GPUs."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # Hardware slowdown cuts clocks by half or more. PromQL has no bitwise operators, so bit k of a
        # non-negative integer x is tested with modulo: write x = q*2^(k+1) + r with 0 <= r < 2^(k+1);
        # r = b_k*2^k + (lower bits, < 2^k), so r >= 2^k exactly when b_k = 1. Hence
        #   bit 0x8 (k=3):          x % 16 >= 8
        #   bit 0x40 or 0x80 (k=6,7): x % 256 = b7*128 + b6*64 + (< 64), which is >= 64 iff b6 or b7.
        # Exact in float64: the mask is an integer far below 2^53 (the exporter prints it with %d).
        alert_rule(
            alert="GpuHardwareSlowdown",
            expr=(
                f"({reasons} % {2 * HW_SLOWDOWN_BIT}) >= {HW_SLOWDOWN_BIT}"
                f" or ({reasons} % {2 * HW_POWER_BRAKE_BIT}) >= {HW_THERMAL_BIT}"
            ),
            for_minutes=throttle_for_minutes,
            severity="warning",
            summary=f"Hardware clock slowdown on {on_gpu}",
            description=(
                "The GPU has reported hardware slowdown, hardware thermal slowdown or an external power "
                f"brake for {throttle_for_minutes} minutes; clocks are cut by half or more. Check inlet "
                "temperature, fans and the power supply (nvidia-smi -q -d PERFORMANCE shows which)."
            ),
            runbook_base_url=runbook_base_url,
        ),
        alert_rule(
            alert="GpuTemperatureHigh",
            expr=f"{temp} > {temperature_celsius}",
            for_minutes=5,
            severity="warning",
            summary=f"{on_gpu} is above {temperature_celsius} C",
            description=(
                f"GPU temperature has been above {temperature_celsius} C for 5 minutes "
                "(now {{ $value }} C); thermal throttling follows. Check cooling and airflow on the node."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # A GPU that vanished from an exporter that still reports its siblings: the usual face of
        # Xid 79, which DCGM may not report as an Xid (DCGM#162). The exporter drops blank DCGM
        # values (gpu_collector.go toString), so a lost GPU's series disappear. Matched on UUID, not
        # on the index, because indexes shift when the exporter restarts with one GPU fewer; the
        # index kept in the result is the one the GPU had while it was seen. Scoped to nodes that
        # still report, so scaling a node away never fires it. It resolves once the GPU ages out of
        # the 1h lookback even if it never returns: the node's nvidia.com/gpu allocatable is the
        # lasting record.
        alert_rule(
            alert="GpuMissing",
            expr=(
                f"(max by ({NODE_LABEL}, {UUID_LABEL}, {GPU_LABEL}) (max_over_time({temp}[1h]))"
                f" unless on ({NODE_LABEL}, {UUID_LABEL}) {temp})"
                f" and on ({NODE_LABEL}) {temp}"
            ),
            for_minutes=5,
            severity="critical",
            summary=f"{on_gpu} ({uuid}) stopped reporting while its neighbours still do",
            description=(
                "The exporter on this node still reports other GPUs but not this one; it has likely fallen "
                "off the bus (Xid 79) or hung. Drain the node and reboot it; replace the GPU if it recurs."
            ),
            runbook_base_url=runbook_base_url,
        ),
        # No absent(): with GPU nodes scaled to zero there are no exporter targets at all, and
        # absent(up{...}) would fire all night. A node that is gone is Kubernetes' business; a node
        # that is there but unmonitored is ours: either the scrape fails (up == 0) or the exporter
        # answers without any GPU metric (DCGM hung or lost every GPU).
        alert_rule(
            alert="DcgmExporterNotReporting",
            expr=f"up{{{job}}} == 0 or (up{{{job}}} == 1 unless on ({NODE_LABEL}) {temp})",
            for_minutes=exporter_absent_minutes,
            severity="warning",
            summary=f"DCGM exporter on node {node} is not reporting: its GPUs are unmonitored",
            description=(
                f"For {exporter_absent_minutes} minutes the exporter on this node was either not scrapable "
                "or returned no GPU metrics, so Xid, ECC and thermal alerts cannot fire for its GPUs. "
                "Check the dcgm-exporter pod logs on the node and nvidia-smi on the host."
            ),
            runbook_base_url=runbook_base_url,
        ),
    ]
    return [{"name": GROUP_NAME, "rules": rules}]


def alert_names(groups: list[dict[str, Any]]) -> list[str]:
    """Alert names in rule order, for runbooks and tests."""
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]
