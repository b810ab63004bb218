"""llm-serving's policy pack: the guardrails every stack must meet, as pure rules plus a Pulumi wrapper.

rules.py holds the checks (no Pulumi import), pack.py wraps them for pulumi-policy, check.py runs them
on an offline render. `pulumi preview --policy-pack policies` runs the pack against a real preview.
"""
