"""The keys of a stack file the file reader handles itself, and the secrets among the schema's keys.

The schema of a stack file is the library's `ServingStackArgs` (llm_serving.stack.args): every
`llm-serving:` key of `Pulumi.<stack>.yaml` is one of its fields.
"""

# Keys handled by the loader rather than the schema.
LOADER_KEYS = ("extends",)


# Top-level keys that hold secrets: never inherited through `extends`, always `secure:` values.
SECRET_KEYS: tuple[str, ...] = ("apiKey", "grafanaAdminPassword", "hfToken")

# Keys of the schema a stack file must not set: what the program fills in itself.
PROGRAM_KEYS: tuple[str, ...] = ("clusterFacts",)
