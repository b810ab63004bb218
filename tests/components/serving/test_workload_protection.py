"""A serving workload replaced delete-first is a full outage (every replica drains, then cold-starts): prod and
staging protect it, so such a change stops the preview unless the model allows it by name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file


@pytest.mark.parametrize(("stack", "protected"), [("prod", True), ("staging", True), ("dev", False)])
def test_prod_and_staging_protect_the_vllm_workload(rendered, stack, protected):
    (workload,) = [key for key in rendered[stack].wiring if key.endswith(("-deployment", "-leaderworkerset"))
                   and key.startswith(("kubernetes:apps/v1:Deployment::", "kubernetes:leaderworkerset"))
                   and "epp" not in key and "barrier" not in key]
    assert rendered[stack].wiring[workload]["protect"] is protected


def test_a_model_that_allows_its_replacement_is_not_protected():
    from llm_serving.stack import ServingStack
    from tests.support.components import run

    config = load_stack_file(stack_file_path("prod"))[1]
    model = replace(config.models[0], allow_workload_replacement=True)
    result = run(lambda: ServingStack("llm-serving", replace(config, models=(model,))))
    assert result.wiring["kubernetes:apps/v1:Deployment::llama-70b-deployment"]["protect"] is False
