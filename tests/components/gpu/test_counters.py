"""Tests for llm_serving/gpu/counters.py: the DCGM exporter counters file we ship.

Every field must be one the pinned exporter knows, with the upstream Prometheus type, and the
rendered CSV must parse the way the exporter's Go csv reader parses it.
"""

from __future__ import annotations

import ast
import csv
import io
from pathlib import Path

import pytest

from llm_serving.gpu import counters as dcgm_counters
from llm_serving.gpu.counters import COUNTERS, COUNTERS_FILE_NAME, Counter, counters_csv
from tests.support.reference import dcgm_fields

FIELDS = {c.field: c.prom_type for c in COUNTERS}

# Fields we ship that no row of the upstream 4.8.2 CSVs carries (so the reference fixture cannot
# vouch for them), with the type we chose and where the name and type come from.
BEYOND_REFERENCE_CSV = {
    # Field 112, current name; go-dcgm ec245c09 (pinned by the exporter) const_fields.go dcgmFields.
    # A bitmask, so gauge.
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "gauge",
    # Commented row of upstream etc/default-counters.csv ("counter"); the fixture keeps DCGM_FI_* only.
    "DCGM_EXP_XID_ERRORS_COUNT": "counter",
    # Field 449, current name of the deprecated DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL; a MiB/s rate,
    # hence gauge (see the comment in dcgm_counters.py).
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL": "gauge",
}

# Deprecated names in DCGM's dcgm_fields.h (go-dcgm ec245c09): the DCGM_DEPRECATED alias block,
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, the PCIe throughput fields and DCGM_FI_SYNC_BOOST.
DEPRECATED_FIELDS = {
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_NVLINK_RX_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_NVLINK_TX_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "DCGM_FI_SYNC_BOOST",
}

MUST_HAVE = {
    # utilisation, clocks, temperature, power, framebuffer
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    # errors
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    # throttling
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    # interconnects, driver, profiling
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}


def test_every_field_is_known_upstream_with_the_upstream_type() -> None:
    reference = dcgm_fields("all")
    mismatched = {
        field: (prom_type, reference[field])
        for field, prom_type in FIELDS.items()
        if field in reference and reference[field] != prom_type
    }
    assert mismatched == {}
    beyond = {field: prom_type for field, prom_type in FIELDS.items() if field not in reference}
    assert beyond == BEYOND_REFERENCE_CSV


def test_documented_exceptions_are_really_missing_from_the_reference() -> None:
    # If a regenerated fixture starts listing one of them, drop it from BEYOND_REFERENCE_CSV so the
    # type is checked against upstream again.
    assert set(BEYOND_REFERENCE_CSV).isdisjoint(dcgm_fields("all"))


def test_profiling_fields_are_in_the_upstream_dcp_set() -> None:
    dcp = dcgm_fields("dcp")
    for field, prom_type in FIELDS.items():
        if field.startswith("DCGM_FI_PROF_"):
            assert dcp.get(field) == prom_type, field


def test_must_have_fields_are_present() -> None:
    assert MUST_HAVE - set(FIELDS) == set()


def test_nothing_deprecated_is_exported() -> None:
    assert DEPRECATED_FIELDS & set(FIELDS) == set()
    assert not any("_BANDWIDTH_L" in field for field in FIELDS)


def test_no_field_is_listed_twice() -> None:
    assert len(FIELDS) == len(COUNTERS)


def test_file_name() -> None:
    assert COUNTERS_FILE_NAME == "llm-serving-counters.csv"


def test_csv_starts_with_our_header_then_the_first_record() -> None:
    lines = counters_csv().splitlines()
    assert lines[:3] == [
        "# DCGM exporter counters for llm-serving GPU nodes, rendered by components/dcgm_counters.py.",
        "# Replaces the exporter's default list. Columns: DCGM field, Prometheus type, help text.",
        "DCGM_FI_DEV_GPU_UTIL, gauge, Percent of time a kernel was running on the GPU",
    ]
    assert counters_csv().endswith("\n")


def test_csv_parses_like_the_exporters_go_reader() -> None:
    # Go encoding/csv with Comment '#': comment lines must start at column 0; every record needs
    # exactly three fields, then each is trimmed of spaces (counter_config.go).
    records = []
    for line in counters_csv().splitlines():
        if not line or line.startswith("#"):
            continue
        [record] = list(csv.reader(io.StringIO(line)))
        assert len(record) == 3, line
        assert '"' not in line, line
        records.append(tuple(part.strip(" ") for part in record))
    assert records == [(c.field, c.prom_type, c.help) for c in COUNTERS]


def test_exported_metric_names_leave_out_label_fields() -> None:
    names = dcgm_counters.exported_metric_names()
    assert "DCGM_FI_DRIVER_VERSION" not in names
    assert names == {c.field for c in COUNTERS if c.prom_type != "label"}
    assert dcgm_counters.metric_types()["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == "counter"


@pytest.mark.parametrize(
    ("field", "prom_type", "help_text", "message"),
    [
        ("GPU_UTIL", "gauge", "x", "not a DCGM field name"),
        ("DCGM_FI_DEV_GPU_UTIL", "histogram", "x", "prom_type 'histogram'"),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "busy, in percent", "without commas"),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", 'a "quoted" help', "without commas"),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", " ", "non-empty"),
    ],
)
def test_counter_rejects_lines_the_exporter_would_misread(
    field: str, prom_type: str, help_text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Counter(field, prom_type, help_text)


def test_rendering_rejects_duplicate_fields() -> None:
    twice = (COUNTERS[0], COUNTERS[0])
    with pytest.raises(ValueError, match="duplicate DCGM fields: \\['DCGM_FI_DEV_GPU_UTIL'\\]"):
        counters_csv(twice)


def test_module_does_not_import_pulumi() -> None:
    tree = ast.parse(Path(dcgm_counters.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "pulumi" for name in imported)
