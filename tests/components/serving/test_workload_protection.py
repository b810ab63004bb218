"""A serving workload replaced delete-first is a full outage (every replica drains, then cold-starts): prod and
staging protect it, so such a change stops the preview unless the model allows it by name."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("stack", "protected"), [("prod", True), ("staging", True), ("dev", False)])
def test_prod_and_staging_protect_the_vllm_workload(rendered, stack, protected):
    (workload,) = [key for key in rendered[stack].wiring if key.endswith(("-deployment", "-leaderworkerset"))
                   and key.startswith(("kubernetes:apps/v1:Deployment::", "kubernetes:leaderworkerset"))
                   and "epp" not in key and "barrier" not in key]
    assert rendered[stack].wiring[workload]["protect"] is protected


def test_a_model_that_allows_its_replacement_is_not_protected():
    # ServingStack on the component tier, in a prod environment on a cluster that runs everything (the model's
    # workloads and little else): protected by default, not once the model allows its replacement.
    from llm_serving.stack import ServingStack
    from tests.support.components import EXISTING_EVERYTHING, run, stack_args

    (model,) = EXISTING_EVERYTHING["models"]
    protect = {}
    for allowed in (False, True):
        args = stack_args(EXISTING_EVERYTHING, environment="prod",
                          models=[{**model, "allowWorkloadReplacement": allowed}])
        result = run(lambda args=args: ServingStack("llm-serving", args))
        protect[allowed] = result.wiring[f"kubernetes:apps/v1:Deployment::{model['name']}-deployment"]["protect"]
    assert protect == {False: True, True: False}
