"""The offline tooling: the mock-runtime render, the diff against a base commit with the engine's
replacement rules and await chain, and the policy check over renders. No cloud, no CLI.
"""
