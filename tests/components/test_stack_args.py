"""ServingStack refuses args it cannot deploy before it creates anything: each problem on its own line, naming
the key, and never a secret's value."""

from __future__ import annotations

import copy

import pulumi
import pytest

from llm_serving import ServingStack
from tests.support.components import EXISTING_EVERYTHING, run


def problems(values: dict, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines ServingStack logs, under the mock runtime (whose engine log is Python's logging)."""
    with pytest.raises(pulumi.RunError, match="nothing was created"):
        run(lambda: ServingStack("llm", values))
    return [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]


def test_a_secret_that_breaks_a_rule_is_named_but_never_shown(caplog):
    values = {**copy.deepcopy(EXISTING_EVERYTHING), "apiKey": "short-key-12", "hfToken": 7}
    lines = problems(values, caplog)
    assert lines and all("short-key-12" not in line for line in lines)
    assert [line for line in lines if line.startswith("llm-serving:apiKey:")]
    assert all('"[secret]"' in line for line in lines if line.startswith(("llm-serving:apiKey", "llm-serving:hfToken")))


def test_a_toleration_kubernetes_would_refuse_is_refused_here(caplog):
    values = copy.deepcopy(EXISTING_EVERYTHING)
    values["gpuNodeGroup"]["existing"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "value": "h100"}]
    (line,) = problems(values, caplog)
    assert line.startswith("llm-serving:gpuNodeGroup.existing.tolerations[0]:")
    assert "operator Exists takes no value" in line


def test_a_cluster_to_create_needs_the_program_that_creates_it(caplog):
    values = copy.deepcopy(EXISTING_EVERYTHING)
    values["cluster"] = {"name": "ml-platform", "mode": "create", "create": {"zones": ["us-east-1a", "us-east-1b"],
                                                                       "publicAccessCidrs": ["203.0.113.0/24"]}}
    lines = problems(values, caplog)
    assert [line for line in lines if line.startswith("llm-serving:cluster.mode: ServingStack does not create")]


def test_an_existing_gateway_names_its_listener(caplog):
    values = copy.deepcopy(EXISTING_EVERYTHING)
    del values["edge"]["gateway"]["listener"]
    (line,) = problems(values, caplog)
    assert line.startswith("llm-serving:edge.gateway.listener: required key is missing")
