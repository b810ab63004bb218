"""Tests for the shared PromQL checker in tests/support/promql.py.

They pin down what the checker accepts and rejects and which names it extracts, because every
alert, KEDA trigger and dashboard test relies on it to catch typos in expressions.
"""

from __future__ import annotations

import pytest

from tests.support import promql

VALID = [
    "up",
    'up{job="dcgm-exporter"} == 0',
    "vllm:num_requests_waiting",
    'sum by (model_name) (vllm:num_requests_waiting{model_name="m"})',
    "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
    'absent(up{job="x"})',
    "max_over_time(rate(x_total[1m])[10m:1m])",
    "a and on (node) b or c unless d",
    "(x % 16) >= 8",
    "-x offset 5m",
]


@pytest.mark.parametrize("expr", VALID)
def test_accepts_valid_promql(expr: str) -> None:
    assert promql.parse_errors(expr) == []


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("rate(x[5m]", "unclosed left parenthesis"),
        ("x[5m", "unexpected end of input inside brackets"),
        ("sum(rate(x[5m])) by (le", "unclosed left parenthesis"),
        ("rate(x)", "expected type matrix"),
        ("no_such_function(x)", "unknown function"),
        ('x{a=~"["}', "illegal regex"),
    ],
)
def test_rejects_bad_promql_with_the_parser_message(expr: str, fragment: str) -> None:
    errors = promql.parse_errors(expr)
    assert len(errors) == 1
    assert fragment in errors[0] and repr(expr) in errors[0]


def test_rejects_an_empty_expression() -> None:
    assert promql.parse_errors("  ") == ["empty PromQL expression"]


def test_rejects_experimental_functions_unless_allowed() -> None:
    expr = "mad_over_time(x[5m])"
    assert promql.parse_errors(expr) == [
        f"mad_over_time() is experimental in Prometheus (feature flag needed): {expr!r}"
    ]
    assert promql.parse_errors(expr, allow_experimental=True) == []


def test_rejects_or_inside_label_matchers() -> None:
    errors = promql.parse_errors('x{a="1" or b="2"}')
    assert errors and "not standard PromQL" in errors[0]


def test_extracts_names_from_nested_expressions() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le) (rate(x_bucket[5m])))"
        " / on () group_left max_over_time(rate(y_total[1m])[10m:1m])"
        ' unless absent(z{job="j"})'
        ' or topk(3, -w) or quantile(0.5, v offset 1m) or count_values("k", u)'
    )
    assert promql.metric_names(expr) == {"x_bucket", "y_total", "z", "w", "v", "u"}


def test_extracts_names_with_colons_and_name_matchers() -> None:
    expr = 'vllm:num_requests_waiting + {__name__="vllm:kv_cache_usage_perc", engine="0"}'
    assert promql.metric_names(expr) == {"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}


def test_regex_name_matchers_give_no_exact_name() -> None:
    assert promql.metric_names('{__name__=~"vllm:.*"}') == set()


def test_label_matchers_map_each_metric_to_its_labels() -> None:
    expr = (
        'sum(rate(a_total{job="j", code=~"5.."}[5m])) / sum(rate(a_total{job="j"}[5m]))'
        ' + {__name__="b", pod!=""} + {job="k"}'
    )
    assert promql.label_matchers(expr) == {"a_total": {"job", "code"}, "b": {"pod"}, "": {"job"}}


def test_selectors_keep_operators_and_values() -> None:
    [selector] = promql.selectors('x{a="1", b!="2", c=~"3|4", d!~"5"}')
    assert selector == promql.Selector(
        name="x", matchers=(("a", "=", "1"), ("b", "!=", "2"), ("c", "=~", "3|4"), ("d", "!~", "5"))
    )


def test_function_names_are_collected() -> None:
    assert promql.function_names("histogram_quantile(0.9, rate(x[5m])) > absent(y)") == {
        "histogram_quantile",
        "rate",
        "absent",
    }


def test_unknown_metric_errors_name_the_unknown_metric() -> None:
    expr = "rate(DCGM_FI_DEV_GPU_TEMPERATURE[5m]) > up"
    errors = promql.unknown_metric_errors(expr, {"up"})
    assert errors == [f"unknown metric 'DCGM_FI_DEV_GPU_TEMPERATURE' in {expr!r}"]


def test_unknown_metric_errors_accept_known_names() -> None:
    assert promql.unknown_metric_errors("vllm:a + vllm:b", {"vllm:a", "vllm:b"}) == []


def test_unknown_metric_errors_flag_uncheckable_selectors() -> None:
    errors = promql.unknown_metric_errors('{__name__=~"up|x"}', {"up"})
    assert len(errors) == 1 and "without a fixed metric name" in errors[0]


def test_unknown_metric_errors_report_parse_errors_first() -> None:
    errors = promql.unknown_metric_errors("rate(up[5m]", {"up"})
    assert len(errors) == 1 and "parse error" in errors[0]


def test_counter_functions_on_gauges_are_flagged() -> None:
    types = {"g": "gauge", "c": "counter"}
    assert promql.counter_function_errors("rate(c[5m]) + increase(c[1h])", types) == []
    assert promql.counter_function_errors("rate(g[5m])", types) == [
        "rate() on 'g' of type 'gauge', not a counter"
    ]
    assert promql.counter_function_errors("irate(unknown[5m])", types) == [
        "irate() on 'unknown' of type None, not a counter"
    ]
