"""Preview-time checks of a stack file: the library's rules over its args (llm_serving.stack.rules), and
what must exist in the account before a first `pulumi up` (prerequisites.py)."""

from llm_serving.stack.rules import check

__all__ = ["check"]
