"""LoRA adapters on the dashboard and in the alerts: the serving dashboard's per-adapter panels read the picker's
request counter and vLLM's lora_requests_info with the labels they carry, and, since vLLM 0.33.0 has no series for
an adapter that fails to load, the alerts that fire when one does (restarts, no ready replica) name the adapters."""

from __future__ import annotations

from dataclasses import replace

from llm_serving.observability.dashboards import serving_dashboard
from llm_serving.observability.serving_alerts import serving_rule_groups
from tests.components.observability.test_serving_alerts import BY_NAME, PROD, RUNBOOKS
from tests.support.reference import vllm_metrics


def test_an_adapter_that_fails_to_load_is_named_by_the_restart_and_no_replica_alerts() -> None:
    """vLLM 0.33.0 has no series for an adapter that fails to load (its only LoRA series is vllm:lora_requests_info,
    in the pinned metrics list): a static adapter that fails stops vLLM's start, so the pod restarts and is never
    Ready. The alerts that fire then name the model's adapters; a model without adapters keeps its text."""
    assert {name for name in vllm_metrics() if "lora" in name} == {"vllm:lora_requests_info"}
    lora = replace(PROD, lora_adapters=("sql-v1", "sql-v2"))
    rules = {r["alert"]: r for r in serving_rule_groups([lora], runbook_base_url=RUNBOOKS)[0]["rules"]}
    for alert in ("VllmPodRestarting", "VllmNoReadyReplica"):
        assert rules[alert]["expr"] == BY_NAME[alert]["expr"]
        description = rules[alert]["annotations"]["description"]
        assert "loads LoRA adapters sql-v1, sql-v2 at start-up, and vLLM refuses to start" in description
        assert description.startswith(BY_NAME[alert]["annotations"]["description"])
        assert "LoRA" not in BY_NAME[alert]["annotations"]["description"]


def test_the_lora_panels_split_requests_by_adapter_and_show_each_pods_newest_batch() -> None:
    """The picker's requests by the name asked and the adapter it went to; each pod's newest lora_requests_info series
    (its value is when vLLM last reported that label set), counted by the adapters running and waiting."""
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in serving_dashboard()["panels"]}
    (asked,) = panels["LoRA: requests per second by adapter"]
    assert asked.startswith("sum by (model_name, target_model_name) (rate(llm_d_epp_request_total{")
    assert panels["LoRA: adapters in the batch"] == [f"count by ({label}) (topk by (namespace, pod) (1, vllm:lora_"
                                                     'requests_info{namespace="$namespace"}))' for label in
                                                     ("running_lora_adapters", "waiting_lora_adapters")]
