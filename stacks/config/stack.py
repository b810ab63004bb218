"""The keys of a stack file the file reader handles itself, and the secrets among the schema's keys.

The schema of a stack file is the library's `ServingStackArgs` (llm_serving.stack.args): every
`llm-serving:` key of `Pulumi.<stack>.yaml` is one of its fields.
"""

from llm_serving.stack import args as stack_args

# Keys handled by the loader rather than the schema.
LOADER_KEYS = ("extends",)


# Top-level keys that hold secrets (the library's own list): never inherited through `extends`, always
# `secure:` values.
SECRET_KEYS = stack_args.SECRET_KEYS

# Keys of the schema a stack file must not set: what the program fills in itself.
PROGRAM_KEYS: tuple[str, ...] = ("clusterFacts",)
