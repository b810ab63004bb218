"""The DCGM exporter counters file for LLM-serving GPU nodes, as data plus a CSV renderer.

Pure module (no Pulumi): the DCGM component mounts counters_csv() as the exporter's counters file,
and alerts.py may only alert on fields listed here (the tests enforce that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# File name inside the exporter's ConfigMap / mount. Whichever way the file reaches the exporter
# (`-f <path>` or the chart's `customMetrics`), it REPLACES the whole default CSV rather than adding
# to it (chart 4.8.2 values.yaml: customMetrics "Must be the complete list and is not additive"),
# so every field we want must be listed here.
COUNTERS_FILE_NAME = "llm-serving-counters.csv"

PROM_TYPES = frozenset({"gauge", "counter", "label"})

# The exporter reads this file with Go's encoding/csv (Comment '#', exactly 3 fields per record,
# surrounding spaces trimmed; dcgm-exporter 4.5.3-4.8.2 internal/pkg/counters/counter_config.go).
# A comma or a quote in a help text would break or shift the record, so help texts are checked.
_FIELD_NAME = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
_HELP_FORBIDDEN = (",", '"', "\n", "\r")


@dataclass(frozen=True)
class Counter:
    """One line of the counters CSV: DCGM field name, Prometheus type, our own help text."""

    field: str
    prom_type: str
    help: str

    def __post_init__(self) -> None:
        if not _FIELD_NAME.match(self.field):
            raise ValueError(f"not a DCGM field name: {self.field!r}")
        if self.prom_type not in PROM_TYPES:
            raise ValueError(f"{self.field}: prom_type {self.prom_type!r} not in {sorted(PROM_TYPES)}")
        if not self.help.strip() or any(ch in self.help for ch in _HELP_FORBIDDEN):
            raise ValueError(f"{self.field}: help must be non-empty, without commas, quotes or newlines")


# Types follow the upstream CSVs (dcgm-exporter 4.8.2 etc/default-counters.csv, including its
# commented-out lines) unless a comment says otherwise and why.
COUNTERS: tuple[Counter, ...] = (
    # --- Utilisation, clocks, temperature, power, memory (all in the upstream default set).
    Counter("DCGM_FI_DEV_GPU_UTIL", "gauge", "Percent of time a kernel was running on the GPU"),
    Counter("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Percent of time device memory was being read or written"),
    Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "Streaming multiprocessor clock in MHz"),
    Counter("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Device memory clock in MHz"),
    Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU die temperature in degrees Celsius"),
    Counter("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Device memory temperature in degrees Celsius"),
    Counter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Board power draw in watts"),
    Counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Cumulative energy drawn in millijoules"),
    Counter("DCGM_FI_DEV_FB_FREE", "gauge", "Free framebuffer memory in MiB"),
    Counter("DCGM_FI_DEV_FB_USED", "gauge", "Used framebuffer memory in MiB (vLLM preallocates most of it)"),
    Counter("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved by the driver in MiB"),
    # --- Interconnects.
    Counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe packets the link had to retry"),
    # Current name of field 449. Upstream's CSV still uses DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, which
    # the DCGM header marks as a deprecated alias of this one (go-dcgm ec245c09, pinned by exporter
    # 4.8.2: pkg/dcgm/dcgm_fields.h "DCGM_DEPRECATED" block; const_fields.go legacyDCGMFields).
    # Typed gauge, not upstream's counter: DCGM publishes an instantaneous MiB/s rate for this field
    # (dcgm-exporter PR #658 reading DcgmCacheManager.cpp; kempnerpulse#10 measured it jitter down),
    # so rate() on it would be meaningless. Query it directly.
    Counter(
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", "gauge", "NVLink traffic over all links in MiB per second"
    ),
    # --- Xid. The raw field holds only the LAST Xid value and never resets on its own
    # (dcgm-exporter#500, DCGM#277), so alerts use the exporter-computed windowed count below.
    Counter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Code of the most recent Xid error on this GPU"),
    # Listing this field is all it takes to enable the exporter's Xid collector; no extra argument.
    # Exposed per GPU with labels xid="<code>" and window_size_in_ms; the value is how many Xid
    # events of that code arrived within the window (flag --xid-count-window-size, default 300000 ms),
    # and a GPU without Xids gets one series without an xid label and value 0 (dcgm-exporter
    # 4.5.3-4.8.2 internal/pkg/collector/xid_collector.go and expcollector.go; pkg/cmd/app.go).
    # Upstream types it counter, but it is a sliding-window count that goes back down: never
    # apply rate()/increase() to it.
    Counter("DCGM_EXP_XID_ERRORS_COUNT", "counter", "Xid events per Xid code within the exporter window"),
    # --- Memory errors (all commented out upstream, so absent unless listed).
    Counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Corrected single-bit ECC errors since last reset"),
    Counter(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Uncorrectable double-bit ECC errors since last reset"
    ),
    Counter(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Corrected single-bit ECC errors over the GPU lifetime"
    ),
    Counter(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Uncorrectable double-bit ECC errors over the GPU lifetime",
    ),
    # Page retirement is the pre-Ampere mechanism; kept for mixed fleets, zero on A100/H100.
    Counter("DCGM_FI_DEV_RETIRED_SBE", "counter", "Pages retired after single-bit errors"),
    Counter("DCGM_FI_DEV_RETIRED_DBE", "counter", "Pages retired after double-bit errors"),
    Counter("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Pages waiting to be retired at the next reset"),
    # Row remapping replaces page retirement from Ampere on (in the upstream default set).
    Counter(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Memory rows remapped after correctable errors"
    ),
    Counter(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Memory rows remapped after uncorrectable errors",
    ),
    Counter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1 when the GPU could not remap a failing memory row"),
    # --- Throttling. Current name of field 112; DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is only a
    # deprecated alias, and whether the exporter accepts the alias depends on the go-dcgm version
    # (NVIDIA/go-dcgm pkg/dcgm/const_fields.go). Not in any upstream CSV line; a bitmask, hence gauge. Bits per
    # DCGM dcgm_fields.h: 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake.
    Counter("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Bitmask of reasons the clocks are held down now"),
    # Cumulative time (ns per DCGM dcgm_fields.h; older CSVs said us) spent below application clocks.
    Counter("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Time clocks were held down by the power limit in ns"),
    Counter("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Time clocks were held down by temperature in ns"),
    # --- Static driver info, exported as a label on every other metric.
    Counter("DCGM_FI_DRIVER_VERSION", "label", "NVIDIA driver version"),
    # --- Profiling (DCP). They need the chart's SYS_ADMIN capability; on GPUs without DCP support
    # the exporter logs "metric not enabled" and skips the line instead of failing (counter_config.go).
    # For LLM serving, tensor and DRAM activity show whether decode is compute or bandwidth bound;
    # GPU_UTIL alone saturates at one running request (dcgm-exporter#301), so never scale on it.
    Counter(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Fraction of time the graphics or compute engine was busy"
    ),
    Counter("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Fraction of cycles the tensor core pipe was busy"),
    Counter("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Fraction of cycles device memory was sending or receiving"),
)

_HEADER = (
    # The path below predates the package layout (now llm_serving/gpu/counters.py). It stays as it is:
    # the ConfigMap name carries a digest of this file, so editing the header would roll every
    # exporter pod on every cluster for a comment.
    "# DCGM exporter counters for llm-serving GPU nodes, rendered by components/dcgm_counters.py.",
    "# Replaces the exporter's default list. Columns: DCGM field, Prometheus type, help text.",
)


def counters_csv(counters: tuple[Counter, ...] = COUNTERS) -> str:
    """Render the counters in the exporter's CSV format: header comments, then one record per line."""
    names = [c.field for c in counters]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate DCGM fields: {duplicates}")
    lines = [*_HEADER, *(f"{c.field}, {c.prom_type}, {c.help}" for c in counters)]
    return "\n".join(lines) + "\n"


def exported_metric_names(counters: tuple[Counter, ...] = COUNTERS) -> frozenset[str]:
    """Metric names Prometheus will see: every field except `label` ones, which become labels."""
    return frozenset(c.field for c in counters if c.prom_type != "label")


def metric_types(counters: tuple[Counter, ...] = COUNTERS) -> dict[str, str]:
    """Metric name -> Prometheus type for every exported (non-label) field."""
    return {c.field: c.prom_type for c in counters if c.prom_type != "label"}
