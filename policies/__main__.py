"""Entry point the Pulumi CLI runs for `--policy-pack policies`: serve the llm-serving policy pack.

The CLI runs `python policies/`, so this directory is on sys.path and `pack` imports as a top-level
module; the policies themselves are built in pack.py, where tests can import them without the engine.
"""

from pack import build_policies  # type: ignore[import-not-found]  # (the CLI's sys.path, above)
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack("llm-serving", enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())
