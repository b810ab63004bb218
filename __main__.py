"""llm-serving: production vLLM serving on EKS.

Reads this stack's configuration (`Pulumi.<stack>.yaml`, with `extends`), validates it, and
builds the ServingStack. All logic lives in `stacks/` and `llm_serving/`.
"""

from stacks.program import run

run()
