"""`python -m stacks verify`'s two runs with a load test, for tests/stacks/cli/test_verify.py: each
against its own local OpenAI-compatible server (tests/support/openai_server.py), with the load at its
shortest (2 requests at a time, the 1 s ramp and 1 s of load), so each waits about 2.5 s on its server
and computes almost nothing."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from pathlib import Path

from stacks.cli import verify
from stacks.config import files as stack_files
from tests.support.openai_server import KEY, Behaviour, OpenAIServer

SHORT = ["--concurrency", "2", "--duration", "1", "--output-tokens", "12"]


def _verify_with_load(key_file: Path, behaviour: Behaviour, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with OpenAIServer(behaviour) as url:
        code = verify.main(["dev", "--url", url, *SHORT, "--api-key-file", str(key_file), *extra], out, err,
                           stack_path=stack_files.find_stack_file)
    return code, out.getvalue(), err.getvalue()


def jobs(scratch: Path) -> dict[str, Callable[[], tuple[int, str, str]]]:
    """Each run's (exit code, stdout, stderr) by name. The key is in a file in `scratch`, so no run reads
    the environment, which the module's other tests change."""
    key_file = scratch / "verify-api-key"
    key_file.write_text(KEY)
    return {"correct": functools.partial(_verify_with_load, key_file, Behaviour()),
            "json-no-auth": functools.partial(_verify_with_load, key_file, Behaviour(check_key=False), "--json")}
